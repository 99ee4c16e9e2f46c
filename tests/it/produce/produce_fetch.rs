//! Producing and reading over HTTP: values kept exactly, keys, partitioning, timestamps,
//! offsets, long polls and the timestamp index.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::{b64, now_ms, poll, Server};
use herald::domain::partitioner::partition_for_key;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn json_values_come_back_byte_exact_and_in_order() {
    let server = Server::start().await;
    server.create_topic("exact", 1).await;

    // Sent as text so the formatting (spaces, escapes, number spelling) is exactly this.
    let texts = [
        r#"{"b":1,  "a":[1,2]}"#,
        r#""caf\u00e9 \"quoted\" ☕""#,
        r#"12.50"#,
        r#"[ true ,false,null ]"#,
        r#"-0.0e+3"#,
        r#"{"nested":{"deep":[{"x":"y"}, {}]} ,"z":0}"#,
        r#""""#,
        r#"123456789012345678901234567890"#,
    ];
    let body = format!(
        r#"{{"messages":[{}]}}"#,
        texts
            .iter()
            .map(|t| format!(r#"{{"value":{t}}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let response = server
        .post_raw("/v1/topics/exact/messages", "application/json", body)
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let offsets = common::parse_offsets(&answer);
    let expected: Vec<(u32, u64)> = (0..texts.len() as u64).map(|o| (0, o)).collect();
    assert_eq!(offsets, expected);

    let messages = server.read_all("exact", 0).await;
    assert_eq!(messages.len(), texts.len());
    for (i, (message, text)) in messages.iter().zip(texts).enumerate() {
        assert_eq!(message.offset, i as u64);
        assert_eq!(message.partition, 0);
        assert_eq!(message.value_text(), text, "offset {i}");
        assert!(message.value_b64.is_none(), "{message:?}");
        if let Some(topic) = &message.topic {
            assert_eq!(topic, "exact");
        }
    }

    // A second batch continues the offsets.
    let offsets = server
        .produce_ok(
            "exact",
            &json!({"messages": [{"value": "next"}, {"value": "after"}]}),
        )
        .await;
    let n = texts.len() as u64;
    assert_eq!(offsets, vec![(0, n), (0, n + 1)]);
    assert_eq!(server.high_watermarks("exact").await, vec![n + 2]);
}

#[tokio::test]
async fn bytes_keys_and_headers_round_trip() {
    let server = Server::start().await;
    server.create_topic("bytes", 2).await;

    let all_bytes: Vec<u8> = (0..=255u8).rev().collect();
    let offsets = server
        .produce_ok(
            "bytes",
            &json!({"messages": [
                {"value_b64": b64(&all_bytes), "partition": 0, "key": "k1",
                 "headers": {"trace": "abc", "content-type": "application/x-thing"}},
                {"value_b64": "", "partition": 0},
                {"value": {"json": true}, "key_b64": b64(&[0, 159, 146, 150]), "partition": 0},
            ]}),
        )
        .await;
    assert_eq!(offsets, vec![(0, 0), (0, 1), (0, 2)]);

    // A raw body: one message, key and partition from the query.
    let raw: Vec<u8> = vec![0, 1, 2, 3, 0xff, 0xfe, b'\n', b'{'];
    let response = server
        .post_raw(
            "/v1/topics/bytes/messages?key=user-7&partition=0",
            "application/octet-stream",
            raw.clone(),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(common::parse_offsets(&answer), vec![(0, 3)]);

    let messages = server.read_all("bytes", 0).await;
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );

    assert_eq!(messages[0].value_bytes(), all_bytes);
    assert!(messages[0].value.is_none(), "bytes come back as value_b64");
    assert_eq!(messages[0].key.as_deref(), Some("k1"));
    let headers = messages[0].headers.clone().expect("headers");
    assert_eq!(headers.get("trace"), Some(&json!("abc")));
    assert_eq!(
        headers.get("content-type"),
        Some(&json!("application/x-thing"))
    );
    assert_eq!(headers.len(), 2);

    assert_eq!(messages[1].value_bytes(), Vec::<u8>::new());

    assert_eq!(
        messages[2].value_text(),
        r#"{"json": true}"#.replace(' ', "")
    );
    // A key that is not UTF-8 can only come back as key_b64.
    assert_eq!(
        messages[2].key_b64.as_deref(),
        Some(b64(&[0, 159, 146, 150]).as_str())
    );

    assert_eq!(messages[3].value_bytes(), raw);
    assert_eq!(messages[3].key.as_deref(), Some("user-7"));

    // The octet-stream form without a partition hashes its key like the JSON form.
    let response = server
        .post_raw(
            "/v1/topics/bytes/messages?key=user-42",
            "application/octet-stream",
            b"hello".to_vec(),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let offsets = common::parse_offsets(&answer);
    assert_eq!(offsets.len(), 1);
    assert_eq!(offsets[0].0, partition_for_key(b"user-42", 2));
}

#[tokio::test]
async fn keyed_messages_land_where_kafka_puts_them() {
    let server = Server::start().await;
    server.create_topic("keyed", 6).await;

    // "user-42" over 6 partitions, as Kafka's default partitioner computes it.
    let expected = partition_for_key(b"user-42", 6);
    let messages: Vec<Value> = (0..10)
        .map(|i| json!({"key": "user-42", "value": i}))
        .collect();
    let offsets = server
        .produce_ok("keyed", &json!({ "messages": messages }))
        .await;
    assert_eq!(offsets.len(), 10);
    for (i, (partition, offset)) in offsets.iter().enumerate() {
        assert_eq!(*partition, expected);
        assert_eq!(*offset, i as u64);
    }
    // The same key in later requests goes to the same place.
    for i in 10..15 {
        let offsets = server
            .produce_ok(
                "keyed",
                &json!({"messages": [{"key": "user-42", "value": i}]}),
            )
            .await;
        assert_eq!(offsets, vec![(expected, i as u64)]);
    }
    let read = server.read_all("keyed", expected).await;
    let values: Vec<&str> = read.iter().map(|m| m.value_text()).collect();
    let want: Vec<String> = (0..15).map(|i| i.to_string()).collect();
    assert_eq!(values, want);
    assert!(read.iter().all(|m| m.key.as_deref() == Some("user-42")));

    // Many keys, interleaved in one batch: each lands on its own Kafka partition.
    let mut batch = Vec::new();
    for round in 0..3 {
        for k in 0..40 {
            batch.push(json!({"key": format!("customer-{k}"), "value": {"k": k, "round": round}}));
        }
    }
    let offsets = server
        .produce_ok("keyed", &json!({ "messages": batch }))
        .await;
    let mut used = BTreeSet::new();
    for (i, (partition, _)) in offsets.iter().enumerate() {
        let key = format!("customer-{}", i % 40);
        assert_eq!(*partition, partition_for_key(key.as_bytes(), 6), "{key}");
        used.insert(*partition);
    }
    assert!(
        used.len() > 1,
        "40 keys should use more than one of 6 partitions"
    );
    // Offsets within a partition are consecutive in request order.
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for (partition, offset) in offsets {
        if let Some(previous) = last.insert(partition, offset) {
            assert_eq!(offset, previous + 1);
        }
    }
}

#[tokio::test]
async fn unkeyed_spread_and_explicit_partitions() {
    let server = Server::start().await;
    server.create_topic("spread", 3).await;

    let mut used = BTreeMap::<u32, usize>::new();
    for i in 0..30 {
        let offsets = server
            .produce_ok("spread", &json!({"messages": [{"value": i}]}))
            .await;
        assert_eq!(offsets.len(), 1);
        *used.entry(offsets[0].0).or_default() += 1;
    }
    assert_eq!(
        used.len(),
        3,
        "round-robin should use every partition: {used:?}"
    );
    let total: u64 = server.high_watermarks("spread").await.iter().sum();
    assert_eq!(total, 30);

    // An explicit partition wins, even over a key.
    let before = server.high_watermarks("spread").await;
    let offsets = server
        .produce_ok(
            "spread",
            &json!({"messages": [
                {"value": "a", "partition": 2},
                {"value": "b", "partition": 2, "key": "user-42"},
                {"value": "c", "partition": 0},
            ]}),
        )
        .await;
    assert_eq!(
        offsets,
        vec![(2, before[2]), (2, before[2] + 1), (0, before[0])]
    );
    let after = server.high_watermarks("spread").await;
    assert_eq!(after, vec![before[0] + 1, before[1], before[2] + 2]);
}

/// A request's unkeyed messages stay together (one partition, consecutive offsets, request
/// order), while keyed ones still go by their key; successive requests take the partitions in
/// turn.
#[tokio::test]
async fn unkeyed_messages_of_a_request_go_to_one_partition() {
    let server = Server::start().await;
    server.create_topic("sticky", 3).await;

    let mut used = BTreeMap::<u32, usize>::new();
    let mut last = None;
    for request in 0..6 {
        let messages: Vec<Value> = (0..5).map(|i| json!({"value": [request, i]})).collect();
        let offsets = server
            .produce_ok("sticky", &json!({ "messages": messages }))
            .await;
        let (partition, first) = offsets[0];
        let expected: Vec<(u32, u64)> = (0..5).map(|i| (partition, first + i)).collect();
        assert_eq!(offsets, expected, "request {request}");
        *used.entry(partition).or_default() += 1;
        // Requests with only keyed messages in between do not take a turn.
        server
            .produce_ok("sticky", &json!({"messages": [{"key": "k", "value": 1}]}))
            .await;
        if let Some(previous) = last {
            assert_eq!(partition, (previous + 1) % 3, "request {request}");
        }
        last = Some(partition);
    }
    assert_eq!(
        used,
        BTreeMap::from([(0, 2), (1, 2), (2, 2)]),
        "requests should take the partitions in turn"
    );
    // A partition holds whole requests, each in its order: [r, 0], [r, 1], ... [r, 4].
    let stored: Vec<Value> = server
        .read_all("sticky", 0)
        .await
        .iter()
        .map(|message| serde_json::from_str::<Value>(message.value_text()).unwrap())
        .filter(Value::is_array) // the keyed messages in between may land here too
        .collect();
    assert_eq!(stored.len(), 10, "{stored:?}");
    for chunk in stored.chunks(5) {
        let request = &chunk[0][0];
        let expected: Vec<Value> = (0..5).map(|i| json!([request, i])).collect();
        assert_eq!(chunk, expected.as_slice());
    }

    // Keyed messages go by key; the unkeyed ones between them still land together.
    let keyed_alone = server
        .produce_ok(
            "sticky",
            &json!({"messages": [{"key": "user-42", "value": 0}]}),
        )
        .await[0]
        .0;
    let offsets = server
        .produce_ok(
            "sticky",
            &json!({"messages": [
                {"value": "a"},
                {"key": "user-42", "value": "b"},
                {"value": "c"},
            ]}),
        )
        .await;
    assert_eq!(offsets[1].0, keyed_alone, "a key keeps its partition");
    assert_eq!(offsets[0].0, offsets[2].0, "unkeyed messages stay together");
    if offsets[0].0 != keyed_alone {
        assert_eq!(offsets[2].1, offsets[0].1 + 1);
    }
}

#[tokio::test]
async fn timestamps_from_client_or_broker() {
    let server = Server::start().await;
    server.create_topic("times", 1).await;

    let before = now_ms();
    server
        .produce_ok(
            "times",
            &json!({"messages": [
                {"value": 1, "timestamp": 1_700_000_000_123_i64},
                {"value": 2},
                {"value": 3, "timestamp": 1_000},
            ]}),
        )
        .await;
    let after = now_ms();
    let messages = server.read_all("times", 0).await;
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0].timestamp, 1_700_000_000_123);
    assert!(
        (before - 5..=after + 5).contains(&messages[1].timestamp),
        "broker timestamp {} outside [{before}, {after}]",
        messages[1].timestamp
    );
    assert_eq!(messages[2].timestamp, 1_000);
}

#[tokio::test]
async fn acks_leader_and_none() {
    let server = Server::start().await;
    server.create_topic("acks", 1).await;

    let response = server
        .post_json(
            "/v1/topics/acks/messages?acks=leader",
            &json!({"messages": [{"value": "leader"}]}),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(common::parse_offsets(&answer), vec![(0, 0)]);

    let response = server
        .post_json(
            "/v1/topics/acks/messages?acks=all",
            &json!({"messages": [{"value": "all"}]}),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(common::parse_offsets(&answer), vec![(0, 1)]);

    let response = server
        .post_json(
            "/v1/topics/acks/messages?acks=none",
            &json!({"messages": [{"value": "none-1"}, {"value": "none-2"}]}),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let offsets = answer["offsets"].as_array().expect("offsets");
    assert_eq!(offsets.len(), 2);
    for o in offsets {
        assert_eq!(o["partition"], 0, "{answer}");
        assert!(
            o["offset"].is_null(),
            "acks=none answers null offsets: {answer}"
        );
    }
    // The messages arrive anyway.
    let messages = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let messages = server.read_all("acks", 0).await;
            if messages.len() == 4 {
                Ok(messages)
            } else {
                Err(format!("{} messages", messages.len()))
            }
        },
    )
    .await
    .unwrap_or_else(|seen| panic!("acks=none messages never appeared ({seen})"));
    let values: Vec<&str> = messages.iter().map(|m| m.value_text()).collect();
    assert_eq!(
        values,
        vec!["\"leader\"", "\"all\"", "\"none-1\"", "\"none-2\""]
    );
}

#[tokio::test]
async fn offsets_earliest_latest_and_paging() {
    let server = Server::start().await;
    server.create_topic("paging", 1).await;

    // Empty partition.
    let answer = server.fetch_raw("paging", 0, "offset=earliest").await;
    assert!(answer.messages.is_empty());
    assert_eq!(
        (
            answer.next_offset,
            answer.high_watermark,
            answer.log_start_offset
        ),
        (0, 0, 0)
    );
    let answer = server.fetch_raw("paging", 0, "offset=latest").await;
    assert!(answer.messages.is_empty());
    assert_eq!(answer.next_offset, 0);

    let messages: Vec<Value> = (0..10).map(|i| json!({"value": i})).collect();
    server
        .produce_ok("paging", &json!({ "messages": messages }))
        .await;

    let answer = server.fetch_raw("paging", 0, "offset=earliest").await;
    assert_eq!(answer.high_watermark, 10);
    assert_eq!(answer.log_start_offset, 0);
    assert_eq!(answer.next_offset, 10);
    let offsets: Vec<u64> = answer.messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());

    let answer = server.fetch_raw("paging", 0, "offset=latest").await;
    assert!(
        answer.messages.is_empty(),
        "latest starts at the end: {answer:?}"
    );
    assert_eq!(answer.next_offset, 10);
    assert_eq!(answer.high_watermark, 10);

    let answer = server
        .fetch_raw("paging", 0, "offset=earliest&max_messages=3")
        .await;
    assert_eq!(
        answer.messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(answer.next_offset, 3);

    let answer = server
        .fetch_raw("paging", 0, "offset=3&max_messages=4")
        .await;
    assert_eq!(
        answer.messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
        vec![3, 4, 5, 6]
    );
    assert_eq!(answer.next_offset, 7);
    assert_eq!(answer.messages[0].value_text(), "3");

    let answer = server.fetch_raw("paging", 0, "offset=7").await;
    assert_eq!(
        answer.messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    assert_eq!(answer.next_offset, 10);

    let answer = server.fetch_raw("paging", 0, "offset=10").await;
    assert!(answer.messages.is_empty());
    assert_eq!(answer.next_offset, 10);

    let answer = server
        .fetch_raw("paging", 0, "offset=9&max_messages=1")
        .await;
    assert_eq!(answer.messages.len(), 1);
    assert_eq!(answer.messages[0].offset, 9);
    assert_eq!(answer.next_offset, 10);
}

#[tokio::test]
async fn large_batches_and_compressed_topics() {
    let server = Server::start().await;
    for (name, compression) in [("plain", "none"), ("lz4ed", "lz4"), ("zstded", "zstd")] {
        server
            .create_topic_with(
                &json!({"name": name, "partitions": 1, "config": {"compression": compression}}),
            )
            .await;
        let mut expected = Vec::new();
        for batch in 0..3 {
            let messages: Vec<Value> = (0..1000)
                .map(|i| {
                    let value = json!({"batch": batch, "i": i, "pad": "abcdefghij".repeat(10)});
                    expected.push(value.to_string());
                    json!({"value": value, "key": format!("k{}", i % 7)})
                })
                .collect();
            let offsets = server
                .produce_ok(name, &json!({ "messages": messages }))
                .await;
            assert_eq!(offsets.len(), 1000);
            assert_eq!(offsets[0], (0, batch * 1000));
            assert_eq!(offsets[999], (0, batch * 1000 + 999));
        }
        let messages = server.read_all(name, 0).await;
        assert_eq!(messages.len(), 3000, "{name}");
        for (i, (message, value)) in messages.iter().zip(&expected).enumerate() {
            assert_eq!(message.offset, i as u64, "{name}");
            assert_eq!(message.value_text(), value, "{name} offset {i}");
            assert_eq!(
                message.key.as_deref(),
                Some(format!("k{}", (i % 1000) % 7).as_str())
            );
        }
        // Reading from the middle of a stored batch starts exactly there.
        let answer = server
            .fetch_raw(name, 0, "offset=1500&max_messages=2")
            .await;
        assert_eq!(
            answer.messages.iter().map(|m| m.offset).collect::<Vec<_>>(),
            vec![1500, 1501]
        );
        assert_eq!(answer.messages[0].value_text(), expected[1500]);
    }
}

#[tokio::test]
async fn long_poll_wakes_on_produce() {
    let server = Server::start().await;
    server.create_topic("wake", 1).await;
    server
        .produce_ok("wake", &json!({"messages": [{"value": "old"}]}))
        .await;

    let url = server.url("/v1/topics/wake/partitions/0/messages?offset=1&max_wait_ms=30000");
    let client = server.http_client().clone();
    let poll = tokio::spawn(async move {
        let response = client.get(url).send().await.expect("long poll");
        let status = response.status();
        let text = response.text().await.expect("long poll body");
        (status, text, Instant::now())
    });

    // Time for the poll to start waiting; if it has not yet, it finds the message at once and
    // the test still holds (only less tellingly).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poll.is_finished(),
        "the long poll answered before anything was produced"
    );
    server
        .produce_ok("wake", &json!({"messages": [{"value": "new"}]}))
        .await;
    let produced_at = Instant::now();

    let (status, text, answered_at) = tokio::time::timeout(Duration::from_secs(60), poll)
        .await
        .expect("the long poll never answered")
        .expect("the long poll task");
    assert_eq!(status, StatusCode::OK, "{text}");
    // Woken by the message, not by its 30 s deadline (the bound leaves room for a loaded
    // machine).
    let woke_after = answered_at.saturating_duration_since(produced_at);
    assert!(
        woke_after < Duration::from_secs(15),
        "the long poll answered {woke_after:?} after the produce, not when the message arrived"
    );
    let answer: common::FetchAnswer = serde_json::from_str(&text).expect("fetch answer");
    assert_eq!(answer.messages.len(), 1, "{text}");
    assert_eq!(answer.messages[0].offset, 1);
    assert_eq!(answer.messages[0].value_text(), "\"new\"");
    assert_eq!(answer.next_offset, 2);
}

#[tokio::test]
async fn long_poll_with_nothing_answers_empty_at_the_deadline() {
    let server = Server::start().await;
    server.create_topic("quiet", 2).await;
    // Traffic on another partition must not wake this one with nothing.
    server
        .produce_ok(
            "quiet",
            &json!({"messages": [{"value": 1, "partition": 1}]}),
        )
        .await;

    let started = Instant::now();
    let answer = server
        .fetch_raw("quiet", 0, "offset=latest&max_wait_ms=1000")
        .await;
    let elapsed = started.elapsed();
    assert!(answer.messages.is_empty(), "{answer:?}");
    assert_eq!(answer.next_offset, 0);
    assert!(
        elapsed >= Duration::from_millis(900),
        "answered after only {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(5),
        "answered after {elapsed:?}"
    );

    // With data already there a long poll answers at once.
    let started = Instant::now();
    let answer = server
        .fetch_raw("quiet", 1, "offset=earliest&max_wait_ms=10000")
        .await;
    assert_eq!(answer.messages.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn offset_for_timestamp() {
    let server = Server::start().await;
    server.create_topic("clock", 2).await;

    // Empty partition: none, so the high watermark.
    assert_eq!(server.offset_for_timestamp("clock", 0, 0).await, 0);

    let messages: Vec<Value> = [1000, 2000, 3000, 4000, 5000]
        .iter()
        .map(|ts| json!({"value": ts, "timestamp": ts, "partition": 0}))
        .collect();
    server
        .produce_ok("clock", &json!({ "messages": messages }))
        .await;
    // A second batch, and a timestamp that goes back in time.
    server
        .produce_ok(
            "clock",
            &json!({"messages": [
                {"value": 6000, "timestamp": 6000, "partition": 0},
                {"value": 5500, "timestamp": 5500, "partition": 0},
                {"value": 7000, "timestamp": 7000, "partition": 0},
            ]}),
        )
        .await;

    let cases = [
        (0, 0),
        (999, 0),
        (1000, 0),
        (1001, 1),
        (2500, 2),
        (3000, 2),
        (5000, 4),
        (5001, 5),
        (6000, 5),
        (6001, 7),
        (7000, 7),
        (7001, 8), // none: the high watermark
        (i64::MAX, 8),
    ];
    for (timestamp, offset) in cases {
        assert_eq!(
            server.offset_for_timestamp("clock", 0, timestamp).await,
            offset,
            "timestamp {timestamp}"
        );
    }
    // The other partition is still empty.
    assert_eq!(server.offset_for_timestamp("clock", 1, 0).await, 0);
}

/// Concurrent requests for one partition are merged into shared raft entries: each still gets
/// its own offsets, contiguous and in its own order, and every value lands where it was told.
#[tokio::test]
async fn concurrent_produces_to_one_partition_get_distinct_contiguous_offsets() {
    let server = Server::start().await;
    server.create_topic("merged", 1).await;
    let requests = 40;
    let per_request = 5;
    let answers = futures::future::join_all((0..requests).map(|request| {
        let server = &server;
        async move {
            let messages: Vec<Value> = (0..per_request)
                .map(|index| json!({"value": format!("r{request}-m{index}")}))
                .collect();
            let offsets = server
                .produce_ok("merged", &json!({ "messages": messages }))
                .await;
            (request, offsets)
        }
    }))
    .await;

    let mut expected = BTreeMap::new();
    for (request, offsets) in answers {
        assert_eq!(offsets.len(), per_request);
        for (index, (partition, offset)) in offsets.iter().enumerate() {
            assert_eq!(*partition, 0);
            if index > 0 {
                assert_eq!(
                    *offset,
                    offsets[index - 1].1 + 1,
                    "a request's offsets are contiguous"
                );
            }
            let previous = expected.insert(*offset, format!("\"r{request}-m{index}\""));
            assert!(previous.is_none(), "offset {offset} was answered twice");
        }
    }
    let all: BTreeSet<u64> = expected.keys().copied().collect();
    assert_eq!(all, (0..(requests * per_request) as u64).collect());
    let stored = server.read_all("merged", 0).await;
    assert_eq!(stored.len(), requests * per_request);
    for message in &stored {
        assert_eq!(
            message.value_text(),
            expected[&message.offset],
            "offset {}",
            message.offset
        );
    }
}

/// The peak resident memory of a process, in KiB (Linux), for the figures of a test.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Counts and sizes are bounded by what a message really takes: a request over the message
/// cap and a message over the header cap are refused (400) while being read, and a message's
/// size counts its headers' framing, so empty headers are not free. Nothing refused is
/// written, and the node keeps serving.
#[tokio::test]
async fn message_counts_header_counts_and_encoded_sizes_are_bounded() {
    let server = Server::start().await;
    let topic = "bounded";
    server
        .create_topic_with(
            &json!({"name": topic, "partitions": 1, "config": {"max_message_bytes": 1000}}),
        )
        .await;
    server.wait_for_leaders(topic).await;
    let peak_before = server.pid().and_then(peak_rss_kib);

    // 100,001 tiny messages (1.2 MB of body): refused while parsing.
    let mut body = String::from(r#"{"messages":["#);
    body.push_str(&vec![r#"{"value":0}"#; 100_001].join(","));
    body.push_str("]}");
    let response = server
        .post_raw(
            &format!("/v1/topics/{topic}/messages"),
            "application/json",
            body,
        )
        .await;
    let problem = server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("100000"),
        "{problem}"
    );

    // One message with 1,000,000 empty headers (6 MB of body): refused while parsing.
    let headers = vec![r#""":"""#; 1_000_000].join(",");
    let body = format!(r#"{{"messages":[{{"value":1,"headers":{{{headers}}}}}]}}"#);
    let response = server
        .post_raw(
            &format!("/v1/topics/{topic}/messages"),
            "application/json",
            body,
        )
        .await;
    let problem = server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 1000 headers"),
        "{problem}"
    );
    let peak_after = server.pid().and_then(peak_rss_kib);
    eprintln!("peak RSS of the node: {peak_before:?} KiB before the refused requests, {peak_after:?} KiB after");

    // 600 empty headers on a one-byte value: 1,207 bytes as stored, over max_message_bytes.
    let empty_names = vec![r#""":"""#; 600].join(",");
    let body = format!(r#"{{"messages":[{{"value":1,"headers":{{{empty_names}}}}}]}}"#);
    let response = server
        .post_raw(
            &format!("/v1/topics/{topic}/messages"),
            "application/json",
            body,
        )
        .await;
    let problem = server
        .expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "message_too_large")
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("1207 bytes"),
        "{problem}"
    );
    assert_eq!(
        server.high_watermarks(topic).await,
        [0],
        "nothing refused was written"
    );

    // Within the limit, headers and all: written, and read back.
    let headers: serde_json::Map<String, Value> = (0..100)
        .map(|index| (format!("h{index:02}"), json!("v")))
        .collect();
    let offsets = server
        .produce_ok(
            topic,
            &json!({"messages": [{"value": 1, "headers": headers}]}),
        )
        .await;
    assert_eq!(offsets, [(0, 0)]);
    let messages = server.read_all(topic, 0).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].headers.as_ref().map(|h| h.len()), Some(100));
}
