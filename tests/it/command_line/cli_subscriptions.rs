//! `herald subscriptions` and `herald pull`, run as a separate process against a real node:
//! create, list, describe and delete; pull printing and acking, `--no-ack` leaving messages
//! leased, `--follow` getting redeliveries and new messages until Ctrl-C (SIGINT), which stops
//! it cleanly with everything it printed acked.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use crate::common::Server;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// How long one CLI invocation, or one line of a following one, may take.
const CLI_DEADLINE: Duration = Duration::from_secs(30);

fn command(server: &Server, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(args)
        .arg("--server")
        .arg(server.base_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERALD_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs `herald <args> --server <url>` to its end; fails the test when it fails.
async fn herald(server: &Server, args: &[&str]) -> String {
    let child = command(server, args).spawn().expect("start the herald CLI");
    let output = tokio::time::timeout(CLI_DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| server.fail(&format!("herald {args:?} did not finish in time")))
        .expect("wait for the CLI");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        server.fail(&format!(
            "herald {args:?} failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    stdout
}

async fn describe(server: &Server) -> Value {
    let text = herald(server, &["subscriptions", "describe", "workers"]).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn ids(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .map(|line| {
            let message: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            message["value"]["id"].as_u64().expect("an id")
        })
        .collect()
}

async fn produce(server: &Server, ids: std::ops::Range<u64>) {
    let messages: Vec<Value> = ids.map(|id| json!({"value": {"id": id}})).collect();
    server
        .produce_ok("jobs", &json!({ "messages": messages }))
        .await;
}

#[tokio::test]
async fn subscriptions_commands_and_pull() {
    let server = Server::start().await;
    server.create_topic("jobs", 1).await;
    server.wait_for_leaders("jobs").await;

    let created = herald(
        &server,
        &[
            "subscriptions",
            "create",
            "workers",
            "--topic",
            "jobs",
            "--ack-deadline-ms",
            "2000",
            "--min-backoff-ms",
            "0",
            "--max-backoff-ms",
            "0",
        ],
    )
    .await;
    let created: Value = serde_json::from_str(&created).expect("JSON");
    assert_eq!(
        (
            &created["name"],
            &created["topic"],
            &created["ack_deadline_ms"]
        ),
        (&json!("workers"), &json!("jobs"), &json!(2000))
    );
    let listed = herald(&server, &["subscriptions", "list"]).await;
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec![
                "NAME",
                "TOPIC",
                "ACK_DEADLINE_MS",
                "DEAD_LETTER_TOPIC",
                "START"
            ],
            vec!["workers", "jobs", "2000", "-", "earliest"],
        ]
    );

    // Nothing yet: one pull prints nothing.
    assert_eq!(
        herald(&server, &["pull", "workers", "--max-wait-ms", "0"]).await,
        ""
    );
    produce(&server, 0..5).await;
    // --no-ack: printed and left leased.
    let pulled = herald(
        &server,
        &["pull", "workers", "--max-messages", "3", "--no-ack"],
    )
    .await;
    assert_eq!(ids(&pulled), [0, 1, 2]);
    let counts = describe(&server).await;
    assert_eq!(
        (&counts["backlog"], &counts["in_flight"]),
        (&json!(5), &json!(3)),
        "{counts}"
    );
    // The rest, acked.
    let pulled = herald(&server, &["pull", "workers", "--max-messages", "10"]).await;
    assert_eq!(ids(&pulled), [3, 4]);
    let counts = describe(&server).await;
    assert_eq!(
        (&counts["backlog"], &counts["in_flight"]),
        (&json!(3), &json!(3)),
        "{counts}"
    );

    // --follow: the three unacked come back after their deadline, and new messages arrive;
    // SIGINT stops it cleanly.
    let mut child = command(
        &server,
        &["pull", "workers", "--follow", "--max-wait-ms", "500"],
    )
    .spawn()
    .expect("start herald pull --follow");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    produce(&server, 5..7).await;
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let line = tokio::time::timeout(CLI_DEADLINE, lines.next_line())
            .await
            .unwrap_or_else(|_| server.fail(&format!("pull --follow printed only {seen:?}")))
            .expect("read stdout")
            .unwrap_or_else(|| server.fail(&format!("pull --follow ended after {seen:?}")));
        seen.extend(ids(&line));
    }
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 5, 6]);
    // Everything printed is acked: a describe shows nothing left (the ack follows the print,
    // so wait for it).
    common::poll(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            let counts = describe(&server).await;
            if counts["backlog"] == json!(0) {
                Ok(())
            } else {
                Err(format!("{counts}"))
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    let pid = Pid::from_raw(child.id().expect("a pid") as i32);
    kill(pid, Signal::SIGINT).expect("SIGINT");
    let status = tokio::time::timeout(CLI_DEADLINE, child.wait())
        .await
        .unwrap_or_else(|_| server.fail("pull --follow did not stop on SIGINT"))
        .expect("wait");
    assert!(status.success(), "pull --follow exited with {status}");

    herald(&server, &["subscriptions", "delete", "workers"]).await;
    let listed = herald(&server, &["subscriptions", "list"]).await;
    assert_eq!(listed.lines().count(), 1, "{listed}");
}
