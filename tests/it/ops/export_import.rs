//! The logical backup (docs/export-import.md), black box: `herald topics export` of a topic on a
//! three-node cluster and `herald topics import` into a fresh node give the same messages
//! (keys, values, headers, timestamps, order per partition) and the same configuration, for a
//! topic of plain and compressed batches and a compacted one whose batches have gaps; an import
//! run again writes nothing; an import killed after some batches and run again writes each
//! message exactly once; a cut, foreign or unfitting file writes nothing; auth is the usual.
//!
//! The commands run as the operator runs them (`cli`); what the source holds is made in `data`,
//! and compared through `contents`.

pub(crate) mod cli;
mod contents;
mod data;

use std::time::Duration;

use herald::domain::Compression;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::common::auth::create_client;
use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::{now_ms, poll, Server};
use cli::{command, finish, herald};
use contents::{
    config, frame_ends, frames, read_topic, records_in, total_high_watermark, written_so_far,
};

const ORDERS_PARTITIONS: u32 = 3;
const CHANGELOG_PARTITIONS: u32 = 2;
/// How long the target gets to show what a killed import wrote.
const WRITTEN_DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_topic_exported_from_three_nodes_imports_equal_once_and_after_an_interruption() {
    let cluster = TestCluster::start_with(3, &["--retention-check-interval-ms", "200"]).await;
    let source = cluster.node(1);
    create_replicated(&cluster, 1, "orders", ORDERS_PARTITIONS, 3).await;
    source
        .create_topic_with(&json!({
            "name": "changelog",
            "partitions": CHANGELOG_PARTITIONS,
            "replication_factor": 3,
            // No pass while a partition is half written: a pass between its batches would clean
            // by the keys seen so far, and with little left dirty the next pass may not come
            // before the deadline. Its messages share one timestamp (data::fill_changelog), so
            // the lag ends for all its batches at once; 5 s: a loaded machine (the whole suite
            // alongside a compile) stretched one partition's five writes past 2 s.
            "config": {"cleanup_policy": "compact", "retention_ms": -1, "min_compaction_lag_ms": 5000},
        }))
        .await;
    for partition in 0..ORDERS_PARTITIONS {
        cluster.leader_of("orders", partition).await;
    }
    for partition in 0..CHANGELOG_PARTITIONS {
        cluster.leader_of("changelog", partition).await;
    }
    data::fill_orders(source, ORDERS_PARTITIONS, now_ms() - 60_000).await;
    let keys = data::fill_changelog(source, CHANGELOG_PARTITIONS).await;
    data::wait_until_cleaned(source, CHANGELOG_PARTITIONS, &keys).await;
    let orders = read_topic(source, "orders", ORDERS_PARTITIONS).await;
    let changelog = read_topic(source, "changelog", CHANGELOG_PARTITIONS).await;
    assert_eq!(orders.iter().map(Vec::len).sum::<usize>(), 480 + 180);

    let dir = tempfile::tempdir().expect("a scratch directory");
    let orders_file = dir.path().join("orders.hlx");
    let changelog_file = dir.path().join("changelog.hlx");
    let exported = herald(
        &source.base_url(),
        &["topics", "export", "orders", "-o", path(&orders_file)],
    )
    .await
    .ok("export of orders");
    assert!(
        exported.stderr.contains("exported 660 message(s)"),
        "{}",
        exported.stderr
    );
    // Through another node, which forwards the reads to the partitions' leaders.
    herald(
        &cluster.node(2).base_url(),
        &["topics", "export", "changelog", "-o", path(&changelog_file)],
    )
    .await
    .ok("export of changelog");
    let orders_bytes = std::fs::read(&orders_file).expect("the orders export");
    let changelog_bytes = std::fs::read(&changelog_file).expect("the changelog export");
    assert_exports_cover_every_kind_of_batch(&orders_bytes, &changelog_bytes);

    let target = Server::start().await;
    let url = target.base_url();
    let imported = herald(&url, &["topics", "import", "-i", path(&orders_file)])
        .await
        .ok("import of orders");
    assert!(
        imported
            .stderr
            .contains("created topic `orders` with 3 partition(s)")
            && imported.stderr.contains("imported 660 message(s)"),
        "{}",
        imported.stderr
    );
    assert_eq!(
        read_topic(&target, "orders", ORDERS_PARTITIONS).await,
        orders
    );
    assert_eq!(
        config(&target, "orders").await,
        config(source, "orders").await
    );

    // Again: every batch is a duplicate, nothing is written.
    let batches = frames(&orders_bytes).len();
    let before = target.high_watermarks("orders").await;
    let again = herald(&url, &["topics", "import", "-i", path(&orders_file)])
        .await
        .ok("import of orders again");
    assert!(
        again.stderr.contains("imported 0 message(s)")
            && again.stderr.contains(&format!(
                "660 message(s) in {batches} batch(es) were there from an earlier run"
            )),
        "{}",
        again.stderr
    );
    assert_eq!(target.high_watermarks("orders").await, before);

    herald(&url, &["topics", "import", "-i", path(&changelog_file)])
        .await
        .ok("import of changelog");
    assert_eq!(
        read_topic(&target, "changelog", CHANGELOG_PARTITIONS).await,
        changelog
    );
    assert_eq!(
        config(&target, "changelog").await,
        config(source, "changelog").await
    );

    let (killed_after, fed_batches) =
        import_killed_midway(&target, &orders_bytes, "orders-resumed").await;
    let resumed = herald(
        &url,
        &[
            "topics",
            "import",
            "-i",
            path(&orders_file),
            "--topic",
            "orders-resumed",
        ],
    )
    .await
    .ok("the resumed import");
    assert!(
        resumed.stderr.contains(&format!(
            "{killed_after} message(s) in {fed_batches} batch(es) were there from an earlier run"
        )),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        read_topic(&target, "orders-resumed", ORDERS_PARTITIONS).await,
        orders,
        "each message exactly once"
    );

    refusals(&target, &orders_bytes, dir.path()).await;
    let missing = dir.path().join("missing.hlx");
    herald(&url, &["topics", "export", "missing", "-o", path(&missing)])
        .await
        .refused("an export of a missing topic", "topic_not_found");
}

/// The exports hold what the test means to cover: plain, LZ4 and zstd batches, and compacted
/// batches with gaps in their offsets and without any record.
fn assert_exports_cover_every_kind_of_batch(orders: &[u8], changelog: &[u8]) {
    let codecs: Vec<Compression> = frames(orders)
        .iter()
        .map(|frame| frame.header.compression)
        .collect();
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
        assert!(codecs.contains(&codec), "no {codec:?} batch: {codecs:?}");
    }
    let compacted = frames(changelog);
    let gapped = compacted.iter().any(|frame| {
        frame.header.compacted
            && frame.header.record_count > 0
            && frame.header.record_count < frame.header.offset_span
    });
    let emptied = compacted
        .iter()
        .any(|frame| frame.header.compacted && frame.header.record_count == 0);
    assert!(gapped && emptied, "{compacted:?}");
}

/// Feeds the first half of the export's frames to an import reading stdin into `topic`, waits
/// until the target holds them, and kills the import there. Answers how many messages and
/// batches it had written.
async fn import_killed_midway(target: &Server, file: &[u8], topic: &str) -> (u64, usize) {
    let ends = frame_ends(file);
    let half = ends.len() / 2;
    assert!(half >= 3, "{} frames", ends.len());
    let fed = records_in(&frames(file)[..half]).values().sum::<u64>();
    let args = ["topics", "import", "-i", "-", "--topic", topic];
    let mut import = command(&target.base_url(), &args)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("start the import");
    let mut stdin = import.stdin.take().expect("its stdin");
    stdin
        .write_all(&file[..ends[half - 1]])
        .await
        .expect("feed the import");
    stdin.flush().await.expect("feed the import");
    let written = poll(WRITTEN_DEADLINE, Duration::from_millis(50), || async {
        let written = written_so_far(target, topic).await.unwrap_or(0);
        if written == fed {
            Ok(written)
        } else {
            Err(format!("{written} of {fed}"))
        }
    })
    .await;
    import.start_kill().expect("kill the import");
    let killed = finish(import, &args).await;
    assert!(!killed.status.success(), "{}", killed.stderr);
    drop(stdin);
    let written = written
        .unwrap_or_else(|seen| target.fail(&format!("the fed frames were not written: {seen}")));
    (written, half)
}

/// A cut file, a foreign file and a target with too few partitions write nothing.
async fn refusals(target: &Server, orders: &[u8], dir: &std::path::Path) {
    let url = target.base_url();
    let cut = dir.join("cut.hlx");
    std::fs::write(&cut, &orders[..orders.len() / 2]).expect("write the cut file");
    herald(
        &url,
        &["topics", "import", "-i", path(&cut), "--topic", "cut"],
    )
    .await
    .refused("a cut file", "the file is truncated");
    let foreign = dir.join("foreign.hlx");
    std::fs::write(&foreign, b"{\"messages\":[]}\n").expect("write the foreign file");
    herald(
        &url,
        &["topics", "import", "-i", path(&foreign), "--topic", "cut"],
    )
    .await
    .refused("a foreign file", "not a Herald export file");
    let (status, _) = target.json(target.get("/v1/topics/cut").await).await;
    assert_eq!(
        status,
        reqwest::StatusCode::NOT_FOUND,
        "nothing was created"
    );

    target.create_topic("narrow", 2).await;
    let whole = dir.join("whole.hlx");
    std::fs::write(&whole, orders).expect("write the file");
    herald(
        &url,
        &["topics", "import", "-i", path(&whole), "--topic", "narrow"],
    )
    .await
    .refused("a target with fewer partitions", "fewer than the 3");
    assert_eq!(total_high_watermark(target, "narrow").await, 0);
}

#[tokio::test]
async fn export_and_import_take_the_usual_credentials() {
    let mut server = Server::start().await;
    let secret = create_client(&server, "mover", &["admin"]).await;
    server.set_extra_args(vec!["--auth".to_string()]);
    server.restart().await;
    let url = server.base_url();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = dir.path().join("empty.hlx");
    let credentials = ["--client-id", "mover", "--client-secret", &secret];

    herald(&url, &["topics", "create", "quiet", "--partitions", "2"])
        .await
        .refused("an unauthenticated create", "401");
    let mut create = vec!["topics", "create", "quiet", "--partitions", "2"];
    create.extend(credentials);
    herald(&url, &create).await.ok("create");
    herald(&url, &["topics", "export", "quiet", "-o", path(&file)])
        .await
        .refused("an unauthenticated export", "401");
    assert!(!file.exists(), "a refused export leaves no file");
    let mut export = vec!["topics", "export", "quiet", "-o", path(&file), "-q"];
    export.extend(credentials);
    let exported = herald(&url, &export).await.ok("export");
    assert!(exported.stderr.is_empty(), "--quiet: {}", exported.stderr);

    let mut import = vec!["topics", "import", "-i", path(&file), "--topic", "copy"];
    herald(&url, &import)
        .await
        .refused("an unauthenticated import", "401");
    import.extend(credentials);
    let imported = herald(&url, &import).await.ok("import");
    assert!(
        imported
            .stderr
            .contains("created topic `copy` with 2 partition(s)")
            && imported
                .stderr
                .contains("imported 0 message(s) in 0 batch(es) from 2 partition(s)"),
        "{}",
        imported.stderr
    );
}

fn path(path: &std::path::Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}
