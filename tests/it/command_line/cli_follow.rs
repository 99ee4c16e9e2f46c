//! `herald consume --follow` reads over the WebSocket: messages produced while it runs are
//! printed in order as they arrive, `--count` ends it, and when the node restarts under it, it
//! connects again and continues after the last message printed, printing none twice.

use std::process::Stdio;
use std::time::Duration;

use crate::common::Server;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

/// How long the next printed line may take (a node restart included).
const LINE_DEADLINE: Duration = Duration::from_secs(60);

async fn produce(server: &Server, topic: &str, values: &[Value]) {
    let messages: Vec<Value> = values.iter().map(|value| json!({"value": value})).collect();
    let response = server
        .post_json(
            &format!("/v1/topics/{topic}/messages"),
            &json!({"messages": messages}),
        )
        .await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
}

async fn next_message(server: &Server, lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(LINE_DEADLINE, lines.next_line())
        .await
        .unwrap_or_else(|_| server.fail("consume --follow printed nothing within the deadline"))
        .expect("read the CLI's stdout")
        .unwrap_or_else(|| server.fail("consume --follow ended early"));
    serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a JSON line: {line}"))
}

#[tokio::test]
async fn follow_streams_over_the_websocket_and_resumes_after_a_restart() {
    let mut server = Server::start().await;
    server.create_topic("follow-orders", 2).await;
    server.wait_for_leaders("follow-orders").await;
    produce(&server, "follow-orders", &[json!(0), json!(1)]).await;

    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["consume", "follow-orders", "--follow", "--count", "6"])
        .arg("--server")
        .arg(server.base_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("HERALD_SERVER")
        .kill_on_drop(true)
        .spawn()
        .expect("start herald consume --follow");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next_message(&server, &mut lines).await);
    }
    // Produced while it follows: pushed to it.
    produce(&server, "follow-orders", &[json!(2), json!(3)]).await;
    for _ in 0..2 {
        seen.push(next_message(&server, &mut lines).await);
    }
    // The node goes away and comes back: the command reconnects and resumes after message 4.
    server.stop().await;
    server.restart().await;
    produce(&server, "follow-orders", &[json!(4), json!(5)]).await;
    for _ in 0..2 {
        seen.push(next_message(&server, &mut lines).await);
    }

    let status = tokio::time::timeout(LINE_DEADLINE, child.wait())
        .await
        .expect("--count 6 ends the command")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        lines.next_line().await.unwrap().is_none(),
        "nothing past --count"
    );

    let mut values: Vec<u64> = seen.iter().map(|m| m["value"].as_u64().unwrap()).collect();
    values.sort_unstable();
    assert_eq!(
        values,
        vec![0, 1, 2, 3, 4, 5],
        "each message once: {seen:?}"
    );
    for partition in 0..2u64 {
        let offsets: Vec<u64> = seen
            .iter()
            .filter(|m| m["partition"] == partition)
            .map(|m| m["offset"].as_u64().unwrap())
            .collect();
        assert!(
            offsets.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "partition {partition} in offset order: {offsets:?}"
        );
    }
    assert!(
        seen.iter().all(|m| m["resume"].as_str().is_some()),
        "{seen:?}"
    );
}
