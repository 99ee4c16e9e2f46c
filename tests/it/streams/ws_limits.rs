//! A socket is bounded (issue 29, item 5): `ws.max_subscriptions` caps the subscriptions one
//! WebSocket holds (an `error` frame `too_many_subscriptions` past it, the socket goes on), and
//! every subscription counts against the node's memory budget (`overloaded` when the budget's
//! share is taken). Also measures what 1,000 topic subscriptions on one socket cost the node
//! (printed; run with `--nocapture` for the figure).

use crate::common;

use std::time::Duration;

use crate::common::ws::{connect, next_frame, send, subscribe, Socket};
use crate::common::Server;
use serde_json::{json, Value};

const MAX_BODY_BYTES: usize = 64 << 10;

async fn try_subscribe(socket: &mut Socket, id: &str, topic: &str) -> Value {
    send(
        socket,
        json!({"op": "subscribe", "id": id, "topic": topic, "from": "latest", "credit": 10}),
    )
    .await;
    next_frame(socket).await
}

#[tokio::test]
async fn a_socket_holds_at_most_max_subscriptions() {
    let server = Server::start_with(&["--ws-max-subscriptions", "3"]).await;
    server.create_topic("feed", 1).await;
    server.wait_for_leaders("feed").await;
    let mut socket = connect(&server).await;
    for id in ["a", "b", "c"] {
        let answer = try_subscribe(&mut socket, id, "feed").await;
        assert_eq!(answer, json!({"op": "ok", "id": id}));
    }
    let refused = try_subscribe(&mut socket, "d", "feed").await;
    assert_eq!(refused["op"], "error", "{refused}");
    assert_eq!(refused["id"], "d");
    assert_eq!(
        refused["error"]["code"], "too_many_subscriptions",
        "{refused}"
    );
    // A queue subscription is counted the same way.
    send(
        &mut socket,
        json!({"op": "subscribe", "id": "q", "subscription": "nowhere"}),
    )
    .await;
    let refused = next_frame(&mut socket).await;
    assert_eq!(
        refused["error"]["code"], "too_many_subscriptions",
        "{refused}"
    );

    // The socket goes on: an unsubscribe makes room again.
    send(&mut socket, json!({"op": "unsubscribe", "id": "a"})).await;
    assert_eq!(
        next_frame(&mut socket).await,
        json!({"op": "ok", "id": "a"})
    );
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "d", "topic": "feed", "from": "latest"}),
    )
    .await;
    assert_eq!(
        server
            .metric("herald_ws_subscriptions_refused_total", &[])
            .await,
        Some(2.0)
    );
}

#[tokio::test]
async fn subscriptions_count_against_the_memory_budget() {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("herald.toml");
    // Block cache 8 MiB + memtables 4 MiB + 64 MiB of recent raft entries + the 128 MiB
    // reserve + one largest request: the share left for records in flight and subscriptions
    // is 64 KiB plus 1 MiB.
    let budget = (8 << 20) + (4 << 20) + (64 << 20) + (128 << 20) + MAX_BODY_BYTES + (1 << 20);
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
    server.create_topic("feed", 1).await;
    server.wait_for_leaders("feed").await;
    let mut socket = connect(&server).await;
    let mut admitted = Vec::new();
    let mut refused = None;
    for n in 0..200 {
        let id = format!("s{n}");
        let answer = try_subscribe(&mut socket, &id, "feed").await;
        if answer["op"] == "ok" {
            admitted.push(id);
        } else {
            refused = Some(answer);
            break;
        }
    }
    let refused = refused.expect("the budget never refused a subscription");
    assert_eq!(refused["error"]["code"], "overloaded", "{refused}");
    // 48 KiB a topic subscription: about 22 fit in 1 MiB and 64 KiB.
    assert!(
        (10..=40).contains(&admitted.len()),
        "{} admitted",
        admitted.len()
    );
    // Closing the socket gives the budget back: a new socket subscribes as many again.
    socket.close(None).await.expect("close");
    drop(socket);
    let mut again = connect(&server).await;
    let mut second = 0;
    for attempt in 0..200 {
        let answer = try_subscribe(&mut again, &format!("t{attempt}"), "feed").await;
        if answer["op"] == "ok" {
            second += 1;
            if second == admitted.len() {
                break;
            }
        } else {
            // The first socket's subscriptions may still be ending.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(second, admitted.len());
}

/// `VmRSS` of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .expect("a VmRSS line")
}

#[tokio::test]
async fn memory_of_a_thousand_subscriptions_on_one_socket() {
    let server = Server::start().await;
    server.create_topic("feed", 1).await;
    server.wait_for_leaders("feed").await;
    common::queues::subscribe(&server, "work", json!({"topic": "feed"})).await;
    let pid = server.pid().expect("the node runs here");
    let mut socket = connect(&server).await;
    // One subscription first, so what every socket and the first stream set up is not counted.
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "warm", "topic": "feed", "from": "latest"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kb(pid);
    for n in 0..999 {
        let answer = try_subscribe(&mut socket, &format!("s{n}"), "feed").await;
        assert_eq!(answer["op"], "ok", "{answer}");
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let topics = rss_kb(pid);
    println!(
        "1000 topic subscriptions on one socket: RSS {before} kB -> {topics} kB, {} bytes each",
        (topics.saturating_sub(before)) * 1024 / 999
    );
    let mut queue_socket = connect(&server).await;
    for n in 0..1_000 {
        send(
            &mut queue_socket,
            json!({"op": "subscribe", "id": format!("q{n}"), "subscription": "work", "credit": 10}),
        )
        .await;
        assert_eq!(next_frame(&mut queue_socket).await["op"], "ok");
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let queues = rss_kb(pid);
    println!(
        "1000 queue subscriptions on one socket: RSS {topics} kB -> {queues} kB, {} bytes each",
        (queues.saturating_sub(topics)) * 1024 / 1000
    );
    // Far below the 38 KB a subscription, and within the estimates counted against
    // the budget (48 KiB a topic subscription, 32 KiB a queue subscription).
    assert!((topics.saturating_sub(before)) * 1024 / 999 <= 48 << 10);
    assert!((queues.saturating_sub(topics)) * 1024 / 1000 <= 32 << 10);
}
