//! Durability: what was acknowledged with `acks=all` survives SIGKILL, and a restart on the same
//! data directory serves it at the same offsets. Topics and their configuration survive too.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Server;
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Every message of every partition after a restart: partition -> [(offset, value text)].
async fn read_everything(server: &Server, topic: &str, partitions: u32) -> Vec<Vec<(u64, String)>> {
    let mut all = Vec::new();
    for partition in 0..partitions {
        let messages = server.read_all(topic, partition).await;
        all.push(
            messages
                .iter()
                .map(|m| (m.offset, m.value_text().to_string()))
                .collect(),
        );
    }
    all
}

/// Offsets of a partition start at the log start (0 here) and have no holes.
fn assert_no_holes(partition: usize, messages: &[(u64, String)]) {
    for (i, (offset, _)) in messages.iter().enumerate() {
        assert_eq!(
            *offset, i as u64,
            "partition {partition}: offsets have a hole or disorder"
        );
    }
}

#[tokio::test]
async fn acknowledged_messages_survive_sigkill() {
    let mut server = Server::start().await;
    server
        .create_topic_with(&json!({
            "name": "ledger",
            "partitions": 3,
            "config": {"retention_ms": 86_400_000, "compression": "lz4", "max_message_bytes": 100_000}
        }))
        .await;
    server.create_topic("other", 1).await;

    // partition -> offset -> value text
    let mut acked: BTreeMap<u32, BTreeMap<u64, String>> = BTreeMap::new();
    for batch in 0..20 {
        let messages: Vec<Value> = (0..25)
            .map(|i| {
                let n = batch * 25 + i;
                json!({"key": format!("account-{}", n % 11), "value": {"n": n, "text": format!("entry {n}")}})
            })
            .collect();
        let response = server
            .post_json(
                "/v1/topics/ledger/messages?acks=all",
                &json!({ "messages": messages }),
            )
            .await;
        let (status, answer) = server.json(response).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        for ((partition, offset), message) in
            common::parse_offsets(&answer).into_iter().zip(&messages)
        {
            let previous = acked
                .entry(partition)
                .or_default()
                .insert(offset, message["value"].to_string());
            assert!(
                previous.is_none(),
                "offset {partition}/{offset} acknowledged twice"
            );
        }
    }
    let described_before = server.describe("ledger").await;
    let marks_before = server.high_watermarks("ledger").await;

    server.kill();
    server.restart().await;

    // The topics, their partitions and configuration are back.
    let described_after = server.describe("ledger").await;
    assert_eq!(described_after["config"], described_before["config"]);
    assert_eq!(described_after["partitions"].as_array().unwrap().len(), 3);
    assert_eq!(server.high_watermarks("ledger").await, marks_before);
    server.describe("other").await;

    let everything = read_everything(&server, "ledger", 3).await;
    let mut total = 0;
    for (partition, messages) in everything.iter().enumerate() {
        assert_no_holes(partition, messages);
        let expected = acked.get(&(partition as u32)).cloned().unwrap_or_default();
        assert_eq!(messages.len(), expected.len(), "partition {partition}");
        for (offset, value) in messages {
            assert_eq!(
                Some(value),
                expected.get(offset),
                "partition {partition} offset {offset}"
            );
        }
        total += messages.len();
    }
    assert_eq!(total, 500);

    // Producing continues after the last offset, never reusing one.
    let offsets = server
        .produce_ok(
            "ledger",
            &json!({"messages": [{"value": "after restart", "partition": 0}]}),
        )
        .await;
    assert_eq!(offsets, vec![(0, marks_before[0])]);

    // A graceful stop exits cleanly and keeps everything too.
    let status = server.stop().await;
    assert!(
        status.success(),
        "SIGTERM should exit cleanly, got {status}"
    );
    server.restart().await;
    assert_eq!(
        server.high_watermarks("ledger").await[0],
        marks_before[0] + 1
    );
    let everything_again = read_everything(&server, "ledger", 3).await;
    assert_eq!(everything_again[1..], everything[1..]);
    assert_eq!(
        everything_again[0][..everything[0].len()],
        everything[0][..]
    );
}

/// One acknowledged message: where it was acknowledged and with which value.
#[derive(Clone, Debug)]
struct Ack {
    partition: u32,
    offset: u64,
    value: String,
}

#[tokio::test]
async fn acknowledged_messages_survive_sigkill_under_load() {
    const PRODUCERS: usize = 4;
    const PARTITIONS: u32 = 2;
    let mut server = Server::start().await;
    server.create_topic("busy", PARTITIONS).await;

    let acks: Arc<Mutex<Vec<Ack>>> = Arc::new(Mutex::new(Vec::new()));
    let url = server.url("/v1/topics/busy/messages?acks=all");
    let mut producers = Vec::new();
    for producer in 0..PRODUCERS {
        let client = common::client();
        let url = url.clone();
        let acks = acks.clone();
        producers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut sent = 0usize;
            let mut seq = 0u64;
            while Instant::now() < deadline {
                // Batches of 1 to 8 messages, keyed and unkeyed.
                let size = 1 + (seq % 8) as usize;
                let messages: Vec<Value> = (0..size)
                    .map(|i| {
                        let value = json!({"producer": producer, "seq": seq + i as u64});
                        if i % 2 == 0 {
                            json!({"value": value, "key": format!("p{producer}-{}", (seq + i as u64) % 5)})
                        } else {
                            json!({"value": value})
                        }
                    })
                    .collect();
                seq += size as u64;
                let body = json!({ "messages": messages }).to_string();
                let response = match client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                {
                    Ok(response) => response,
                    Err(_) => break, // the server is gone: this batch is unacknowledged
                };
                if response.status() != StatusCode::OK {
                    break;
                }
                let Ok(text) = response.text().await else { break };
                let answer: Value = serde_json::from_str(&text).expect("produce answer is JSON");
                let offsets = common::parse_offsets(&answer);
                assert_eq!(offsets.len(), messages.len());
                let mut acks = acks.lock();
                for ((partition, offset), message) in offsets.into_iter().zip(&messages) {
                    acks.push(Ack { partition, offset, value: message["value"].to_string() });
                }
                sent += size;
            }
            sent
        }));
    }

    // Let them run, then pull the plug while they are sending.
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let count = acks.lock().len();
        if (count >= 500 && started.elapsed() >= Duration::from_millis(1500))
            || started.elapsed() >= Duration::from_secs(20)
        {
            break;
        }
    }
    for producer in &producers {
        assert!(
            !producer.is_finished(),
            "a producer stopped before the kill"
        );
    }
    server.kill();
    for producer in producers {
        tokio::time::timeout(Duration::from_secs(70), producer)
            .await
            .expect("a producer did not stop after the kill")
            .expect("a producer panicked");
    }
    let acks = acks.lock().clone();
    assert!(!acks.is_empty(), "nothing was acknowledged before the kill");

    server.restart().await;
    let everything = read_everything(&server, "busy", PARTITIONS).await;

    // Every value that was sent is unique, so each may be present at most once.
    let mut seen: HashMap<&str, (u32, u64)> = HashMap::new();
    for (partition, messages) in everything.iter().enumerate() {
        assert_no_holes(partition, messages);
        for (offset, value) in messages {
            let parsed: Value = serde_json::from_str(value).unwrap_or_else(|err| {
                panic!("{partition}/{offset} holds garbage ({err}): {value}")
            });
            assert!(
                parsed["producer"].is_u64() && parsed["seq"].is_u64(),
                "{value}"
            );
            if let Some(first) = seen.insert(value.as_str(), (partition as u32, *offset)) {
                panic!("{value} is stored twice: at {first:?} and at {partition}/{offset}");
            }
        }
    }
    // Every acknowledged message is present at its acknowledged offset with its exact value.
    for ack in &acks {
        let stored = everything[ack.partition as usize]
            .get(ack.offset as usize)
            .unwrap_or_else(|| panic!("acknowledged {ack:?} is lost"));
        assert_eq!(stored.0, ack.offset);
        assert_eq!(
            stored.1, ack.value,
            "acknowledged {ack:?} has another value"
        );
    }
    let stored: usize = everything.iter().map(Vec::len).sum();
    eprintln!(
        "{} acknowledged, {stored} stored after the kill",
        acks.len()
    );

    // The node takes writes again after the last offset.
    let marks = server.high_watermarks("busy").await;
    let offsets = server
        .produce_ok(
            "busy",
            &json!({"messages": [{"value": "after", "partition": 1}]}),
        )
        .await;
    assert_eq!(offsets, vec![(1, marks[1])]);
}
