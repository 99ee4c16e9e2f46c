//! Log compaction on one node, black box: a compacted topic ends with exactly the latest value
//! of each key at the offset it was given, tombstones go once `delete_retention_ms` has passed,
//! the result survives a restart, and producers writing while the cleaner runs lose nothing.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::{poll, RawMessage, Server};
use serde_json::{json, Value};

/// Compaction is checked this often in these tests (production default: 5 minutes).
const CHECK_INTERVAL: &str = "200";
const COMPACTION_DEADLINE: Duration = Duration::from_secs(60);
/// How long tombstones stay in the first test.
const DELETE_RETENTION_MS: u64 = 3000;

/// What a partition should hold: offset to (key, exact value text).
type Expected = BTreeMap<u64, (String, String)>;

/// What a read answered, checked to be in strictly increasing offset order.
fn stored(messages: &[RawMessage]) -> Expected {
    for pair in messages.windows(2) {
        assert!(
            pair[0].offset < pair[1].offset,
            "offsets out of order: {} then {}",
            pair[0].offset,
            pair[1].offset
        );
    }
    messages
        .iter()
        .map(|message| {
            let key = message
                .key
                .clone()
                .expect("a compacted topic's messages have keys");
            (message.offset, (key, message.value_text().to_string()))
        })
        .collect()
}

/// Produces `(key, value)` messages in one request; answers their offsets.
async fn produce(server: &Server, topic: &str, messages: &[(String, Value)]) -> Vec<u64> {
    let body: Vec<Value> = messages
        .iter()
        .map(|(key, value)| json!({"key": key, "value": value}))
        .collect();
    server
        .produce_ok(topic, &json!({ "messages": body }))
        .await
        .into_iter()
        .map(|(_, offset)| offset)
        .collect()
}

/// Reads the partition until it holds exactly `expected`. Every read on the way must be a
/// subset of what was produced, at the offsets it was given, and must hold the latest value of
/// every key in `must_keep` (compaction never loses a live key, even mid-pass); a read that
/// starts before `tombstones.1` must still hold every tombstone in `tombstones.0`.
async fn wait_until_compacted(
    server: &Server,
    topic: &str,
    produced: &Expected,
    must_keep: &Expected,
    tombstones: (&Expected, Instant),
    expected: &Expected,
) {
    // Reads made while the tombstones had to stay.
    let checked_tombstones = std::cell::Cell::new(0);
    let compacted = poll(COMPACTION_DEADLINE, Duration::from_millis(200), || {
        let checked_tombstones = &checked_tombstones;
        async move {
            let started = Instant::now();
            let now = stored(&server.read_all(topic, 0).await);
            if started < tombstones.1 {
                checked_tombstones.set(checked_tombstones.get() + 1);
                for (offset, message) in tombstones.0 {
                    if now.get(offset) != Some(message) {
                        server.fail(&format!(
                            "tombstone {message:?} at {offset} went before delete_retention_ms"
                        ));
                    }
                }
            }
            for (offset, message) in &now {
                if produced.get(offset) != Some(message) {
                    server.fail(&format!(
                        "offset {offset} holds {message:?}, produced {:?}",
                        produced.get(offset)
                    ));
                }
            }
            for (offset, message) in must_keep {
                if now.get(offset) != Some(message) {
                    server.fail(&format!("the latest {message:?} at {offset} is missing"));
                }
            }
            if &now == expected {
                Ok(())
            } else {
                Err(format!(
                    "{} messages, expected {}",
                    now.len(),
                    expected.len()
                ))
            }
        }
    })
    .await;
    if let Err(seen) = compacted {
        server.fail(&format!("not compacted in time: {seen}"));
    }
    assert!(
        tombstones.0.is_empty() || checked_tombstones.get() > 0,
        "no read happened while tombstones had to stay"
    );
}

#[tokio::test]
async fn a_compacted_topic_keeps_the_latest_value_of_each_key_and_drops_tombstones() {
    let mut server = Server::start_with(&["--retention-check-interval-ms", CHECK_INTERVAL]).await;
    server
        .create_topic_with(&json!({
            "name": "changelog",
            "partitions": 1,
            "config": {"cleanup_policy": "compact", "delete_retention_ms": DELETE_RETENTION_MS}
        }))
        .await;
    let keys: Vec<String> = (0..300).map(|key| format!("user-{key:03}")).collect();
    let mut tombstones_written = Instant::now();
    let mut produced = Expected::new();
    let mut latest: BTreeMap<String, (u64, String)> = BTreeMap::new();
    // Six versions of every key, 100 keys per request; in the last round every tenth key is
    // deleted with a tombstone.
    for round in 0..6 {
        if round == 5 {
            tombstones_written = Instant::now();
        }
        for chunk in keys.chunks(100) {
            let messages: Vec<(String, Value)> = chunk
                .iter()
                .enumerate()
                .map(|(index, key)| {
                    let deleted = round == 5 && index % 10 == 0;
                    let value = if deleted {
                        Value::Null
                    } else {
                        json!({"key": key, "round": round})
                    };
                    (key.clone(), value)
                })
                .collect();
            let offsets = produce(&server, "changelog", &messages).await;
            for ((key, value), offset) in messages.iter().zip(offsets) {
                let text = value.to_string();
                produced.insert(offset, (key.clone(), text.clone()));
                latest.insert(key.clone(), (offset, text));
            }
        }
    }
    // The active tail (the newest batch) is never compacted: this one holds a key of its own.
    let tail = produce(&server, "changelog", &[("tail".into(), json!("end"))]).await[0];
    produced.insert(tail, ("tail".into(), "\"end\"".into()));
    latest.insert("tail".into(), (tail, "\"end\"".into()));
    assert_eq!(produced.len(), 6 * 300 + 1);

    let live: Expected = latest
        .iter()
        .filter(|(_, (_, value))| value != "null")
        .map(|(key, (offset, value))| (*offset, (key.clone(), value.clone())))
        .collect();
    assert_eq!(live.len(), 300 - 30 + 1);
    let tombstones: Expected = latest
        .iter()
        .filter(|(_, (_, value))| value == "null")
        .map(|(key, (offset, value))| (*offset, (key.clone(), value.clone())))
        .collect();
    // Superseded versions go; tombstones stay for delete_retention_ms after the pass that
    // first cleaned them (which came after they were written), then go too.
    // (Less a margin: a read that starts in time may end after.)
    let tombstones_stay_until = tombstones_written + Duration::from_millis(DELETE_RETENTION_MS)
        - Duration::from_millis(500);
    wait_until_compacted(
        &server,
        "changelog",
        &produced,
        &live,
        (&tombstones, tombstones_stay_until),
        &live,
    )
    .await;
    // Dropping the tombstones took a second pass; its counter may trail its result a moment.
    poll(COMPACTION_DEADLINE, Duration::from_millis(100), || async {
        let passes = server
            .metric("herald_compaction_passes_total", &[])
            .await
            .unwrap_or(0.0);
        if passes >= 2.0 {
            Ok(())
        } else {
            Err(format!("{passes} passes"))
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    // The cleaned section holds the live keys (the gauge follows within a second).
    let kept = poll(COMPACTION_DEADLINE, Duration::from_millis(100), || async {
        match server
            .partition_gauge("herald_compaction_keys_kept", "changelog", 0)
            .await
        {
            Some(270) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    if let Err(seen) = kept {
        server.fail(&format!("keys kept gauge stayed at {seen}, expected 270"));
    }

    // The log is unchanged by a restart, keeps its offsets, and goes on where it was.
    let high_watermark = server.high_watermarks("changelog").await[0];
    server.restart().await;
    assert_eq!(stored(&server.read_all("changelog", 0).await), live);
    // Small pages walk over the gaps too: each answers the messages there and where to go on.
    let mut paged = Vec::new();
    let mut offset = 0;
    for _ in 0..1000 {
        let page = server
            .fetch_raw("changelog", 0, &format!("offset={offset}&max_messages=7"))
            .await;
        assert!(page.messages.len() <= 7 && page.next_offset > offset);
        offset = page.next_offset;
        paged.extend(page.messages);
        if offset >= page.high_watermark {
            break;
        }
    }
    assert_eq!(stored(&paged), live);
    let next = produce(&server, "changelog", &[("user-000".into(), json!("again"))]).await;
    assert_eq!(next, vec![high_watermark]);
    // A timestamp lookup lands on a message that is there, not on a removed one.
    let first = server.offset_for_timestamp("changelog", 0, 0).await;
    assert_eq!(Some(&first), live.keys().next());
}

/// Producers keep writing while passes run (slowed to a crawl by a small I/O budget): no
/// acknowledged latest value is ever missing, and the end state is exactly the latest values.
#[tokio::test]
async fn producing_while_the_cleaner_runs_loses_nothing() {
    let server = Server::start_with(&[
        "--retention-check-interval-ms",
        CHECK_INTERVAL,
        "--cleaner-io-max-bytes-per-sec",
        "4194304",
    ])
    .await;
    server
        .create_topic_with(&json!({
            "name": "busy",
            "partitions": 1,
            "config": {"cleanup_policy": "compact"}
        }))
        .await;
    let passes_before = server
        .metric("herald_compaction_passes_total", &[])
        .await
        .unwrap_or(0.0);
    let padding = "x".repeat(1000);
    let mut produced = Expected::new();
    let mut latest: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut passes_during = 0.0;
    // At least 20 rounds, and on until a pass finished while producers wrote. How many rounds
    // a pass takes depends on how fast the machine produces, so the bound is a time, and past
    // the first rounds the producers slow down to keep the log (and the test) small.
    let deadline = Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        if round >= 20 && passes_during > passes_before {
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        if round >= 20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Two concurrent producers, 50 keys each, every round.
        let requests = (0..2).map(|producer| {
            let messages: Vec<(String, Value)> = (0..50)
                .map(|key| {
                    let key = format!("p{producer}-k{key}");
                    let value = json!({"round": round, "pad": padding});
                    (key, value)
                })
                .collect();
            let server = &server;
            async move {
                let offsets = produce(server, "busy", &messages).await;
                (messages, offsets)
            }
        });
        for (messages, offsets) in futures::future::join_all(requests).await {
            for ((key, value), offset) in messages.iter().zip(offsets) {
                let text = value.to_string();
                produced.insert(offset, (key.clone(), text.clone()));
                latest.insert(key.clone(), (offset, text));
            }
        }
        passes_during = server
            .metric("herald_compaction_passes_total", &[])
            .await
            .unwrap_or(0.0);
    }
    assert!(
        passes_during > passes_before,
        "no pass finished while producers wrote"
    );
    let tail = produce(&server, "busy", &[("tail".into(), json!("end"))]).await[0];
    produced.insert(tail, ("tail".into(), "\"end\"".into()));
    latest.insert("tail".into(), (tail, "\"end\"".into()));
    let live: Expected = latest
        .iter()
        .map(|(key, (offset, value))| (*offset, (key.clone(), value.clone())))
        .collect();
    let no_tombstones = (&Expected::new(), Instant::now());
    wait_until_compacted(&server, "busy", &produced, &live, no_tombstones, &live).await;
}

/// `compact,delete`: retention removes expired batches (the log start moves, reads below it are
/// 416) and compaction keeps the latest value of every key in what remains.
#[tokio::test]
async fn compact_delete_applies_retention_and_compaction() {
    let server = Server::start_with(&["--retention-check-interval-ms", CHECK_INTERVAL]).await;
    server
        .create_topic_with(&json!({
            "name": "both",
            "partitions": 1,
            // Half an hour: the hour-old batches expire, and the fresh ones do not while a
            // slow machine takes the whole deadline to compact (60 s retention did).
            "config": {"cleanup_policy": "compact,delete", "retention_ms": 1_800_000}
        }))
        .await;
    let hour_ago = common::now_ms() - 3_600_000;
    let old: Vec<Value> = (0..10)
        .map(|key| json!({"key": format!("k{key}"), "value": "old", "timestamp": hour_ago}))
        .collect();
    server.produce_ok("both", &json!({ "messages": old })).await;
    let mut expected = Expected::new();
    for version in ["v1", "v2"] {
        let messages: Vec<(String, Value)> = (0..5)
            .map(|key| (format!("k{key}"), json!(version)))
            .collect();
        let offsets = produce(&server, "both", &messages).await;
        if version == "v2" {
            for ((key, value), offset) in messages.iter().zip(offsets) {
                expected.insert(offset, (key.clone(), value.to_string()));
            }
        }
    }
    let tail = produce(&server, "both", &[("tail".into(), json!("end"))]).await[0];
    expected.insert(tail, ("tail".into(), "\"end\"".into()));
    assert_eq!(tail, 20);

    let done = poll(COMPACTION_DEADLINE, Duration::from_millis(200), || async {
        let now = stored(&server.read_all("both", 0).await);
        let start = server.describe("both").await["partitions"][0]["log_start_offset"].as_u64();
        if now == expected && start == Some(10) {
            Ok(())
        } else {
            Err(format!("log start {start:?}, messages {now:?}"))
        }
    })
    .await;
    if let Err(seen) = done {
        server.fail(&format!(
            "retention and compaction did not both apply: {seen}"
        ));
    }
    let (status, problem) = server.fetch("both", 0, "offset=5").await;
    assert_eq!(
        status,
        reqwest::StatusCode::RANGE_NOT_SATISFIABLE,
        "{problem}"
    );
    assert_eq!(problem["log_start_offset"], 10);
}
