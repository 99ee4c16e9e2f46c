//! A full disk is a state, not a crash (issue 32): a node whose data directory's file system
//! falls under its reserve (`storage.disk_reserve_bytes`) answers produce requests 507
//! `insufficient_storage` having written nothing, goes on serving reads, consumer groups and
//! admin, says why in `/readyz` and `/metrics`, and takes writes again by itself once space is
//! freed.
//!
//! The data directory is a small tmpfs the test mounts (root only, as CI runs; without root the
//! test fails and says so rather than pass without a full disk), with a ballast file beside the
//! node's files that the test deletes to free space, as an operator growing the volume would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{poll, Server};

/// The file system's size, the ballast, and the reserve: the node starts with about 40 MiB
/// free, fills about 24 MiB, and freeing the ballast lifts it back above the reserve.
const FILE_SYSTEM_MIB: u64 = 64;
const BALLAST_MIB: u64 = 16;
const RESERVE_MIB: u64 = 16;
/// One produce request: 16 values of 48 KiB of incompressible text, about 1 MiB.
const VALUES_PER_REQUEST: usize = 16;
const VALUE_BYTES: usize = 48 << 10;
/// The most requests before the disk must be full: about 60 MiB would not fit the file system.
const MAX_FILL_REQUESTS: usize = 60;

/// A tmpfs of a given size mounted on a directory, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size_mib: u64) -> Tmpfs {
        std::fs::create_dir_all(path).expect("create the mount point");
        let output = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .output()
            .expect("run mount");
        assert!(
            output.status.success(),
            "the full-disk test mounts a small tmpfs and needs root (CI runs as root): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Text that does not compress: a xorshift over 64 letters.
fn incompressible(seed: u64, len: usize) -> String {
    const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            LETTERS[(state % 64) as usize] as char
        })
        .collect()
}

fn fill_body(request: usize) -> Value {
    let messages: Vec<Value> = (0..VALUES_PER_REQUEST)
        .map(|i| json!({"value": incompressible((request * VALUES_PER_REQUEST + i) as u64, VALUE_BYTES)}))
        .collect();
    json!({ "messages": messages })
}

async fn high_watermark(server: &Server, topic: &str) -> u64 {
    server.describe(topic).await["partitions"][0]["high_watermark"]
        .as_u64()
        .expect("high_watermark")
}

#[tokio::test]
async fn a_full_data_directory_refuses_writes_with_507_serves_the_rest_and_recovers() {
    let config = tempfile::NamedTempFile::new().expect("a config file");
    std::fs::write(
        config.path(),
        format!(
            "max_body_bytes = 4194304\n[storage]\ndisk_reserve_bytes = {}\n\
             log_write_buffer_bytes = 1048576\nmemtable_bytes = 8388608\n",
            RESERVE_MIB << 20
        ),
    )
    .unwrap();
    let server = Server::prepare(
        1,
        0,
        0,
        vec!["--config".into(), config.path().display().to_string()],
    );
    let data_dir = server.data_dir();
    let _tmpfs = Tmpfs::mount(&data_dir, FILE_SYSTEM_MIB);
    let ballast = data_dir.join("ballast");
    std::fs::write(&ballast, vec![7u8; (BALLAST_MIB << 20) as usize]).expect("write the ballast");
    let server = server.start_on_free_ports().await;
    server
        .create_topic_with(&json!({"name": "fill", "config": {"retention_ms": -1}}))
        .await;
    server.wait_for_leaders("fill").await;

    // Fill the file system until the node refuses.
    let mut accepted = 0;
    let refusal = loop {
        assert!(
            accepted < MAX_FILL_REQUESTS,
            "{accepted} requests of about 1 MiB accepted on a {FILE_SYSTEM_MIB} MiB file system"
        );
        let response = server
            .post_json("/v1/topics/fill/messages", &fill_body(accepted))
            .await;
        match response.status() {
            StatusCode::OK => accepted += 1,
            StatusCode::INSUFFICIENT_STORAGE => break response,
            status => server.fail(&format!(
                "produce {accepted}: {status}: {}",
                response.text().await.unwrap_or_default()
            )),
        }
    };
    assert_eq!(
        refusal
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok()),
        Some("30")
    );
    let problem = server
        .expect_problem(
            refusal,
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
        )
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("storage.disk_reserve_bytes")),
        "{problem}"
    );
    let written = high_watermark(&server, "fill").await;
    assert_eq!(written, (accepted * VALUES_PER_REQUEST) as u64);

    // Refused again, and nothing is written, whatever the request.
    let response = server
        .post_json(
            "/v1/topics/fill/messages",
            &json!({"messages": [{"value": "small"}]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(high_watermark(&server, "fill").await, written);

    // Reads, consumer groups and admin go on.
    let response = server
        .get("/v1/topics/fill/partitions/0/messages?offset=0&max_messages=2")
        .await;
    let (status, page) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["messages"].as_array().map(Vec::len), Some(2), "{page}");
    let member = server
        .join_group("readers", &json!({"topics": ["fill"]}))
        .await;
    let commit = json!({
        "member_id": member.id,
        "generation": member.generation,
        "offsets": [{"topic": "fill", "partition": 0, "offset": 2}],
    });
    let response = server
        .post_json("/v1/groups/readers/offsets", &commit)
        .await;
    assert_eq!(
        response.status(),
        StatusCode::NO_CONTENT,
        "a commit while full"
    );
    server.create_topic("made-while-full", 1).await;

    // `/readyz` stays ready (the node serves) and says what it refuses; the metric says it too.
    let (status, ready) = server.json(server.get("/readyz").await).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert!(
        ready["warnings"][0]
            .as_str()
            .is_some_and(|warning| warning.contains("507")),
        "{ready}"
    );
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|line| line == "herald_storage_disk_full 1"),
        "herald_storage_disk_full is not 1"
    );

    // Space comes back: writes resume by themselves.
    std::fs::remove_file(&ballast).expect("free the ballast");
    poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let response = server
                .post_json(
                    "/v1/topics/fill/messages",
                    &json!({"messages": [{"value": "after"}]}),
                )
                .await;
            match response.status() {
                StatusCode::OK => Ok(()),
                status => Err(format!("{status}")),
            }
        },
    )
    .await
    .unwrap_or_else(|status| server.fail(&format!("writes did not resume: {status}")));
    assert_eq!(high_watermark(&server, "fill").await, written + 1);
    let (status, ready) = server.json(server.get("/readyz").await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(ready.get("warnings").is_none(), "{ready}");
    let logs = server.logs().concat();
    assert!(
        logs.contains("refusing produce requests (507)"),
        "{}",
        server.log_tail()
    );
    assert!(logs.contains("has room again"), "{}", server.log_tail());
}
