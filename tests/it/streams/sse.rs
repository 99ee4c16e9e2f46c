//! Server-sent events: `GET /v1/topics/{topic}/events` streams a topic's messages with resume
//! tokens as ids, resumes exactly with `Last-Event-ID`, follows messages produced through
//! another node, ends at once on shutdown, and refuses bad input before the stream starts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::cluster::{
    create_replicated, messages_url, produce_client, produce_retrying, TestCluster,
};
use crate::common::sse::{open, SseEvent};
use crate::common::{Server, PROBLEM_JSON};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Produces `count` messages with values `{"n": first..}` spread by key over partitions;
/// answers (partition, offset, n) in produce order.
async fn produce(server: &Server, topic: &str, first: u64, count: u64) -> Vec<(u32, u64, u64)> {
    let messages: Vec<Value> = (first..first + count)
        .map(|n| json!({"key": format!("k{n}"), "value": {"n": n}}))
        .collect();
    let offsets = server
        .produce_ok(topic, &json!({ "messages": messages }))
        .await;
    offsets
        .into_iter()
        .zip(first..)
        .map(|((partition, offset), n)| (partition, offset, n))
        .collect()
}

/// Checks events against what was produced: per partition, the same offsets in order.
fn by_partition(events: &[SseEvent]) -> BTreeMap<u32, Vec<(u64, u64)>> {
    let mut seen: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for event in events {
        let message = event.message();
        let partition = message["partition"].as_u64().unwrap() as u32;
        let offset = message["offset"].as_u64().unwrap();
        let n = message["value"]["n"].as_u64().unwrap();
        // The id is the position right after this message in its partition.
        let id = event.id.as_deref().expect("every message has an id");
        assert!(
            id.split(',')
                .any(|pair| pair == format!("{partition}:{}", offset + 1)),
            "id {id} for {partition}:{offset}"
        );
        seen.entry(partition).or_default().push((offset, n));
    }
    seen
}

fn expected(produced: &[(u32, u64, u64)]) -> BTreeMap<u32, Vec<(u64, u64)>> {
    let mut expected: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for &(partition, offset, n) in produced {
        expected.entry(partition).or_default().push((offset, n));
    }
    expected
}

#[tokio::test]
async fn events_from_earliest_and_an_offset_in_order_including_later_ones() {
    let server = Server::start_with(&["--sse-keepalive-ms", "1000"]).await;
    server.create_topic("live", 3).await;
    server.wait_for_leaders("live").await;
    let before = produce(&server, "live", 0, 30).await;

    let mut stream = open(
        &server.base_url(),
        "/v1/topics/live/events?from=earliest",
        None,
    )
    .await;
    let mut events = stream.messages(before.len()).await;
    let after = produce(&server, "live", 30, 30).await;
    events.extend(stream.messages(after.len()).await);
    let all: Vec<_> = before.iter().chain(&after).copied().collect();
    assert_eq!(by_partition(&events), expected(&all));

    // Idle: a keepalive comment comes (every second here), and no event.
    stream.keepalive().await;

    // From an offset, one partition.
    let partition = all[0].0;
    let mut stream = open(
        &server.base_url(),
        &format!("/v1/topics/live/events?from=2&partition={partition}"),
        None,
    )
    .await;
    let wanted: Vec<_> = all
        .iter()
        .filter(|(p, offset, _)| *p == partition && *offset >= 2)
        .copied()
        .collect();
    let events = stream.messages(wanted.len()).await;
    assert_eq!(by_partition(&events), expected(&wanted));
    for event in &events {
        let id = event.id.as_deref().unwrap();
        assert!(
            !id.contains(','),
            "a one-partition stream's id is one pair: {id}"
        );
    }

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("herald_sse_events_total"), "{metrics}");
    assert!(metrics.contains("herald_sse_streams"), "{metrics}");
}

#[tokio::test]
async fn last_event_id_resumes_every_partition_without_loss_or_repeat() {
    let server = Server::start().await;
    server.create_topic("resume", 4).await;
    server.wait_for_leaders("resume").await;
    let first = produce(&server, "resume", 0, 40).await;

    let mut stream = open(
        &server.base_url(),
        "/v1/topics/resume/events?from=earliest",
        None,
    )
    .await;
    let received = stream.messages(17).await;
    drop(stream);
    let last_id = received.last().unwrap().id.clone().unwrap();
    assert_eq!(
        last_id.split(',').count(),
        4,
        "the id covers all partitions: {last_id}"
    );

    let second = produce(&server, "resume", 40, 20).await;
    // EventSource reconnects to the same URL (from=earliest) with Last-Event-ID: it wins.
    let mut stream = open(
        &server.base_url(),
        "/v1/topics/resume/events?from=earliest",
        Some(&last_id),
    )
    .await;
    let rest = stream
        .messages(first.len() + second.len() - received.len())
        .await;

    let mut everything = received.clone();
    everything.extend(rest);
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    assert_eq!(
        by_partition(&everything),
        expected(&all),
        "no loss, no repeat"
    );

    // Nothing more comes: the next produced message is the next event.
    let third = produce(&server, "resume", 60, 1).await;
    let next = stream.messages(1).await;
    assert_eq!(by_partition(&next), expected(&third));

    // The same token as `from` resumes the same way.
    let mut stream = open(
        &server.base_url(),
        &format!("/v1/topics/resume/events?from={last_id}"),
        None,
    )
    .await;
    // Everything after the token, the message produced last included.
    let all: Vec<_> = all.iter().chain(&third).copied().collect();
    let again = stream.messages(all.len() - received.len()).await;
    let mut everything = received;
    everything.extend(again);
    assert_eq!(by_partition(&everything), expected(&all));
}

#[tokio::test]
async fn a_stream_on_one_node_gets_messages_produced_through_another() {
    let cluster = TestCluster::start(3).await;
    let topic = "spread";
    create_replicated(&cluster, 1, topic, 2, 3).await;
    for partition in 0..2 {
        cluster.stable_leader(topic, partition).await;
    }
    let leader = cluster.leader_of(topic, 0).await;
    let watcher = cluster.others_than(leader)[0];
    let producer_node = cluster.ids().into_iter().find(|id| *id != watcher).unwrap();

    let mut stream = open(
        &cluster.node(watcher).base_url(),
        &format!("/v1/topics/{topic}/events?from=earliest"),
        None,
    )
    .await;
    let client = produce_client();
    let url = messages_url(&cluster, producer_node, topic);
    let mut produced = Vec::new();
    for n in 0..20u64 {
        let body = json!({"messages": [{"key": format!("k{n}"), "value": {"n": n}}]});
        let answer = produce_retrying(
            &client,
            std::slice::from_ref(&url),
            &body,
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|error| cluster.fail(&error));
        let (partition, offset) = answer.offsets[0];
        produced.push((partition, offset, n));
    }
    let events = stream.messages(produced.len()).await;
    assert_eq!(by_partition(&events), expected(&produced));
}

#[tokio::test]
async fn shutdown_ends_open_streams_at_once_and_the_node_exits() {
    // The grace period is 10 s by default: an open stream must not hold the node that long.
    let mut server = Server::start().await;
    server.create_topic("closing", 2).await;
    server.wait_for_leaders("closing").await;
    let produced = produce(&server, "closing", 0, 5).await;
    let mut stream = open(
        &server.base_url(),
        "/v1/topics/closing/events?from=earliest",
        None,
    )
    .await;
    stream.messages(produced.len()).await;

    let started = Instant::now();
    let status = server.stop().await;
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    let last = stream.next().await.expect("a final shutdown event");
    assert_eq!(last.event, "shutdown", "{last:?}");
    assert!(
        last.id.is_some(),
        "the shutdown event carries the resume token"
    );
    assert!(stream.next().await.is_none(), "then the stream ends");
}

#[tokio::test]
async fn bad_input_is_refused_before_the_stream_starts() {
    let server = Server::start().await;
    server.create_topic("strict", 2).await;
    server.wait_for_leaders("strict").await;
    let cases: [(&str, Option<&str>, StatusCode, &str); 8] = [
        (
            "/v1/topics/missing/events",
            None,
            StatusCode::NOT_FOUND,
            "topic_not_found",
        ),
        (
            "/v1/topics/strict/events?from=soon",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/topics/strict/events?from=-1",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/topics/strict/events?from=timestamp:x",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/topics/strict/events?from=0:1,0:2",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/topics/strict/events",
            Some("0:x"),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/topics/strict/events",
            Some("7:0"),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/topics/strict/events?partition=2",
            None,
            StatusCode::NOT_FOUND,
            "partition_not_found",
        ),
    ];
    for (path, last_event_id, status, code) in cases {
        let mut request = server.http_client().get(server.url(path));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("request");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(PROBLEM_JSON),
            "{path}"
        );
        server.expect_problem(response, status, code).await;
    }
}

#[tokio::test]
async fn streams_past_the_cap_are_refused_and_not_counted_as_requests() {
    let server =
        Server::start_with(&["--max-sse-streams", "2", "--max-concurrent-requests", "1"]).await;
    server.create_topic("capped", 1).await;
    server.wait_for_leaders("capped").await;
    let _one = open(&server.base_url(), "/v1/topics/capped/events", None).await;
    let _two = open(&server.base_url(), "/v1/topics/capped/events", None).await;
    // Two streams open, yet the single request slot is free.
    let response = server.get("/v1/topics/capped").await;
    assert_eq!(response.status(), StatusCode::OK);
    let response = server.get("/v1/topics/capped/events").await;
    assert!(response.headers().contains_key("retry-after"));
    server
        .expect_problem(response, StatusCode::SERVICE_UNAVAILABLE, "overloaded")
        .await;
}

#[tokio::test]
async fn a_stream_follows_a_leader_change_without_loss_or_repeat() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "failover";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let survivors = cluster.others_than(leader);
    let watcher = survivors[0];
    let mut stream = open(
        &cluster.node(watcher).base_url(),
        &format!("/v1/topics/{topic}/events?from=earliest"),
        None,
    )
    .await;
    let client = produce_client();
    let urls: Vec<String> = survivors
        .iter()
        .map(|id| messages_url(&cluster, *id, topic))
        .collect();
    let mut acknowledged = Vec::new();
    for n in 0..20u64 {
        if n == 10 {
            cluster.kill(leader);
        }
        let body = json!({"messages": [{"value": {"n": n}}]});
        produce_retrying(&client, &urls, &body, Duration::from_secs(60))
            .await
            .unwrap_or_else(|error| cluster.fail(&error));
        acknowledged.push(n);
    }
    // A retried produce may have been written twice: the stream must show the log as it is,
    // every offset once and in order, with every acknowledged message in it.
    let mut offsets = Vec::new();
    let mut values = std::collections::BTreeSet::new();
    while !acknowledged.iter().all(|n| values.contains(n)) {
        let event = &stream.messages(1).await[0];
        let message = event.message();
        offsets.push(message["offset"].as_u64().unwrap());
        values.insert(message["value"]["n"].as_u64().unwrap());
        assert!(offsets.len() <= 100, "too many events: {offsets:?}");
    }
    let contiguous: Vec<u64> = (0..offsets.len() as u64).collect();
    assert_eq!(offsets, contiguous, "every offset once, in order");
}
