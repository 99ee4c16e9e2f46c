//! The node's memory budget (`[storage] memory_budget_bytes`), black box: a budget smaller than
//! its parts is refused at startup, and produce requests past the budget's in-flight share are
//! refused with 503 `overloaded` having written nothing, while the ones taken are all readable.

use std::time::Duration;

use crate::common::Server;
use reqwest::StatusCode;
use serde_json::json;

/// The largest request body in the second test: the budget's in-flight share is exactly this.
const MAX_BODY_BYTES: usize = 65_536;

#[tokio::test]
async fn a_budget_smaller_than_its_parts_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(["serve", "--memory-budget-bytes", "268435456", "--data-dir"])
        .arg(&data_dir)
        .args(["--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERALD_") {
            command.env_remove(name);
        }
    }
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("herald serve exits within 30 s with a too-small budget")
        .expect("run herald serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "it started: {stdout}{stderr}");
    assert!(
        stderr.contains("memory_budget_bytes") || stdout.contains("memory_budget_bytes"),
        "the refusal names the setting: {stdout}{stderr}"
    );
    assert!(
        !data_dir.exists(),
        "nothing was created in the data directory"
    );
}

#[tokio::test]
async fn produces_past_the_in_flight_share_are_refused_and_write_nothing() {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("herald.toml");
    // Block cache 8 MiB + memtables 4 MiB (the least four 1 MiB memtables take) + 64 MiB of
    // recent raft entries + the 128 MiB reserve + one largest request.
    let budget = (8 << 20) + (4 << 20) + (64 << 20) + (128 << 20) + MAX_BODY_BYTES;
    std::fs::write(
        &config,
        format!(
            "[storage]\nmemory_budget_bytes = {budget}\nblock_cache_bytes = 8388608\n\
             memtable_bytes = 4194304\nlog_write_buffer_bytes = 1048576\n"
        ),
    )
    .unwrap();
    let server = Server::start_with(&[
        "--config",
        config.to_str().unwrap(),
        "--max-body-bytes",
        &MAX_BODY_BYTES.to_string(),
    ])
    .await;
    server.create_topic("budget", 1).await;
    // About 41 KB of records: two at once do not fit in the 64 KiB share.
    let body = json!({"messages": (0..40).map(|i| json!({"value": format!("{i:04}{}", "x".repeat(1000))})).collect::<Vec<_>>()});

    let (mut written, mut refused) = (0usize, 0usize);
    for _round in 0..20 {
        let answers =
            futures::future::join_all((0..16).map(|_| server.produce_json("budget", &body))).await;
        for (status, answer) in answers {
            match status {
                StatusCode::OK => written += 1,
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert_eq!(answer["code"], "overloaded", "{answer}");
                    let detail = answer["detail"].as_str().unwrap_or_default();
                    assert!(detail.contains("memory_budget_bytes"), "{answer}");
                    refused += 1;
                }
                other => server.fail(&format!("produce answered {other}: {answer}")),
            }
        }
        if refused > 0 && written > 0 {
            break;
        }
    }
    assert!(
        refused > 0,
        "16 concurrent 41 KB produces never went past a 64 KiB share"
    );
    assert!(written > 0, "no produce was taken");
    // Exactly the taken requests were written, whole and in order.
    let stored = server.read_all("budget", 0).await;
    assert_eq!(stored.len(), written * 40);
    for (index, message) in stored.iter().enumerate() {
        let expected = format!("\"{:04}x", index % 40);
        assert!(
            message.value_text().starts_with(&expected),
            "message {index} is {}...",
            &message.value_text()[..8]
        );
    }
}
