//! Idempotent producing on one node, black box: the `Idempotency-Key` header (a retried request
//! writes once and answers the first offsets, a reused key with another body is refused, the
//! window survives a restart) and idempotent producers (`POST /v1/producers`, sequences,
//! duplicates, gaps, fencing by a newer epoch).

use std::collections::BTreeMap;

use crate::common::{RawMessage, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// `POST /v1/topics/{topic}/messages?{query}` with an optional `Idempotency-Key`.
async fn produce(
    server: &Server,
    topic: &str,
    query: &str,
    key: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = server
        .http_client()
        .post(server.url(&format!("/v1/topics/{topic}/messages?{query}")))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
        .send()
        .await
        .unwrap_or_else(|err| server.fail(&format!("POST messages: {err}")))
}

/// Produces and asserts 200; answers the whole answer.
async fn produce_ok(server: &Server, topic: &str, key: Option<&str>, body: &Value) -> Value {
    let response = produce(server, topic, "acks=all", key, body).await;
    let (status, answer) = server.json(response).await;
    if status != StatusCode::OK {
        server.fail(&format!(
            "produce {body}: expected 200, got {status}: {answer}"
        ));
    }
    answer
}

/// Every message of every partition of `topic`, by partition.
async fn read_topic(
    server: &Server,
    topic: &str,
    partitions: u32,
) -> BTreeMap<u32, Vec<RawMessage>> {
    let mut all = BTreeMap::new();
    for partition in 0..partitions {
        all.insert(partition, server.read_all(topic, partition).await);
    }
    all
}

/// The JSON values of the messages read, as text.
fn values(messages: &BTreeMap<u32, Vec<RawMessage>>) -> Vec<String> {
    let mut values: Vec<String> = messages
        .values()
        .flatten()
        .map(|message| message.value_text().to_string())
        .collect();
    values.sort();
    values
}

async fn register(server: &Server, body: Option<&Value>) -> Value {
    let response = match body {
        Some(body) => server.post_json("/v1/producers", body).await,
        None => {
            server
                .post_raw("/v1/producers", "application/json", Vec::new())
                .await
        }
    };
    let (status, answer) = server.json(response).await;
    if status != StatusCode::OK {
        server.fail(&format!("POST /v1/producers: {status}: {answer}"));
    }
    answer
}

fn batch(values: &[&str]) -> Value {
    json!({"messages": values.iter().map(|value| json!({"value": value})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn the_same_request_with_one_key_writes_once() {
    let server = Server::start().await;
    let topic = "idem-key";
    server.create_topic(topic, 3).await;
    server.wait_for_leaders(topic).await;
    let body = json!({"messages": [
        {"key": "user-1", "value": "a"},
        {"key": "user-2", "value": "b"},
        {"value": "c"},
        {"value": "d", "headers": {"trace": "x"}},
        {"key": "user-3", "value": "e", "partition": 2, "timestamp": 1764400000000i64},
        {"key": "user-4", "value": "f"},
    ]});

    let first = produce_ok(&server, topic, Some("order-17"), &body).await;
    assert!(
        first.get("duplicate").is_none(),
        "a first write is no duplicate: {first}"
    );
    let partitions: std::collections::BTreeSet<u64> = first["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["partition"].as_u64().unwrap())
        .collect();
    assert!(
        partitions.len() > 1,
        "the request should span partitions: {first}"
    );
    let watermarks = server.high_watermarks(topic).await;
    for attempt in 0..2 {
        let again = produce_ok(&server, topic, Some("order-17"), &body).await;
        assert_eq!(again["offsets"], first["offsets"], "retry {attempt}");
        assert_eq!(again["duplicate"], true, "retry {attempt}: {again}");
    }
    assert_eq!(
        server.high_watermarks(topic).await,
        watermarks,
        "retries wrote nothing"
    );
    let stored = read_topic(&server, topic, 3).await;
    assert_eq!(
        values(&stored),
        ["\"a\"", "\"b\"", "\"c\"", "\"d\"", "\"e\"", "\"f\""]
    );
    // Unkeyed messages of a keyed request land together, where the key's hash puts them.
    let unkeyed: Vec<&Value> = first["offsets"].as_array().unwrap()[2..4].iter().collect();
    assert_eq!(unkeyed[0]["partition"], unkeyed[1]["partition"], "{first}");

    // The same key with another body for one partition: that partition refuses its share,
    // the others answer theirs as the duplicates they are (207), and nothing is written.
    let mut changed = body.clone();
    changed["messages"][0]["value"] = json!("a2");
    let response = produce(&server, topic, "acks=all", Some("order-17"), &changed).await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::MULTI_STATUS, "{answer}");
    let changed_partition = &first["offsets"][0]["partition"];
    for (entry, first_entry) in answer["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .zip(first["offsets"].as_array().unwrap())
    {
        if &entry["partition"] == changed_partition {
            assert_eq!(entry["offset"], Value::Null, "{answer}");
            assert_eq!(entry["error"]["code"], "idempotency_key_reused", "{answer}");
            let detail = entry["error"]["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("order-17"), "{answer}");
        } else {
            assert_eq!(
                entry, first_entry,
                "a duplicate share answers its first offsets"
            );
        }
    }
    assert_eq!(server.high_watermarks(topic).await, watermarks);

    // Changed in every partition, it is refused as a whole: 409.
    let mut changed_everywhere = body.clone();
    for message in changed_everywhere["messages"].as_array_mut().unwrap() {
        message["value"] = json!("changed");
    }
    let response = produce(
        &server,
        topic,
        "acks=all",
        Some("order-17"),
        &changed_everywhere,
    )
    .await;
    let problem = server
        .expect_problem(response, StatusCode::CONFLICT, "idempotency_key_reused")
        .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("order-17"),
        "{problem}"
    );
    assert_eq!(server.high_watermarks(topic).await, watermarks);

    // Another key is another request.
    let other = produce_ok(&server, topic, Some("order-18"), &batch(&["g"])).await;
    assert!(other.get("duplicate").is_none(), "{other}");
    assert_eq!(values(&read_topic(&server, topic, 3).await).len(), 7);
}

#[tokio::test]
async fn idempotent_requests_are_checked_before_anything_is_written() {
    let server = Server::start().await;
    let topic = "idem-checks";
    server.create_topic(topic, 2).await;
    server.wait_for_leaders(topic).await;
    let body = batch(&["x"]);
    for acks in ["acks=none", "acks=leader"] {
        let response = produce(&server, topic, acks, Some("k"), &body).await;
        let problem = server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
        assert!(
            problem["detail"].as_str().unwrap().contains("acks=all"),
            "{problem}"
        );
    }
    let long = "k".repeat(256);
    for bad in [long.as_str(), "tab\there"] {
        let response = produce(&server, topic, "acks=all", Some(bad), &body).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    let producer = register(&server, None).await;
    let mut with_producer = json!({
        "messages": [{"value": 1}],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "sequence": 0,
    });
    let response = produce(&server, topic, "acks=none", None, &with_producer).await;
    server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    // Producer fields go together.
    with_producer.as_object_mut().unwrap().remove("sequence");
    let response = produce(&server, topic, "acks=all", None, &with_producer).await;
    server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    // A producer's messages go to one partition: sequences are per partition.
    let spread = json!({
        "messages": [{"value": 1, "partition": 0}, {"value": 2, "partition": 1}],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "sequence": 0,
    });
    let response = produce(&server, topic, "acks=all", None, &spread).await;
    let problem = server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("one partition"),
        "{problem}"
    );
    let response = server
        .post_json("/v1/producers", &json!({"name": "bad name"}))
        .await;
    server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    assert_eq!(server.high_watermarks(topic).await, vec![0, 0]);
}

#[tokio::test]
async fn producer_sequences_duplicates_gaps_and_fencing() {
    let server = Server::start().await;
    let topic = "idem-producer";
    server.create_topic(topic, 2).await;
    server.wait_for_leaders(topic).await;
    let first = register(&server, Some(&json!({"name": "etl-worker-1"}))).await;
    assert_eq!(first["producer_epoch"], 0, "{first}");
    assert_eq!(first["name"], "etl-worker-1");
    let id = first["producer_id"].as_i64().unwrap();
    let unnamed = register(&server, None).await;
    assert_ne!(unnamed["producer_id"].as_i64().unwrap(), id, "{unnamed}");
    assert_eq!(unnamed["producer_epoch"], 0);

    let send = |epoch: i64, sequence: i64, values: &[&str]| {
        json!({
            "messages": values.iter().map(|v| json!({"value": v, "partition": 1})).collect::<Vec<_>>(),
            "producer_id": id,
            "producer_epoch": epoch,
            "sequence": sequence,
        })
    };
    let written = produce_ok(&server, topic, None, &send(0, 0, &["m0", "m1", "m2"])).await;
    assert!(written.get("duplicate").is_none(), "{written}");
    let retried = produce_ok(&server, topic, None, &send(0, 0, &["m0", "m1", "m2"])).await;
    assert_eq!(retried["offsets"], written["offsets"]);
    assert_eq!(retried["duplicate"], true);
    let next = produce_ok(&server, topic, None, &send(0, 3, &["m3", "m4"])).await;
    assert_eq!(next["offsets"][0]["offset"], 3, "{next}");

    // A gap is refused with the sequence the partition expects.
    let response = produce(&server, topic, "acks=all", None, &send(0, 10, &["m10"])).await;
    let problem = server
        .expect_problem(response, StatusCode::CONFLICT, "out_of_order_sequence")
        .await;
    assert_eq!(problem["expected_sequence"], 5, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains('5'),
        "{problem}"
    );

    // Registering the name again fences the old epoch, here and on partitions it never wrote.
    let second = register(&server, Some(&json!({"name": "etl-worker-1"}))).await;
    assert_eq!(second["producer_id"].as_i64(), Some(id));
    assert_eq!(second["producer_epoch"], 1);
    let response = produce(&server, topic, "acks=all", None, &send(0, 5, &["zombie"])).await;
    server
        .expect_problem(response, StatusCode::CONFLICT, "producer_fenced")
        .await;
    let elsewhere = json!({
        "messages": [{"value": "zombie", "partition": 0}],
        "producer_id": id, "producer_epoch": 0, "sequence": 0,
    });
    let response = produce(&server, topic, "acks=all", None, &elsewhere).await;
    server
        .expect_problem(response, StatusCode::CONFLICT, "producer_fenced")
        .await;
    // The new epoch continues the numbering.
    let continued = produce_ok(&server, topic, None, &send(1, 5, &["m5"])).await;
    assert_eq!(continued["offsets"][0]["offset"], 5, "{continued}");
    let replay = produce_ok(&server, topic, None, &send(1, 3, &["m3", "m4"])).await;
    assert_eq!(
        replay["offsets"], next["offsets"],
        "a replay by the new epoch is a duplicate"
    );
    assert_eq!(replay["duplicate"], true);

    let stored = server.read_all(topic, 1).await;
    let texts: Vec<&str> = stored.iter().map(RawMessage::value_text).collect();
    assert_eq!(
        texts,
        ["\"m0\"", "\"m1\"", "\"m2\"", "\"m3\"", "\"m4\"", "\"m5\""]
    );
    assert!(server.read_all(topic, 0).await.is_empty());
}

#[tokio::test]
async fn the_window_survives_a_restart() {
    let mut server = Server::start().await;
    let topic = "idem-restart";
    server.create_topic(topic, 2).await;
    server.wait_for_leaders(topic).await;
    let keyed =
        json!({"messages": [{"key": "a", "value": 1}, {"value": 2}, {"key": "b", "value": 3}]});
    let first = produce_ok(&server, topic, Some("restart-1"), &keyed).await;
    let producer = register(&server, Some(&json!({"name": "survivor"}))).await;
    let produced = json!({
        "messages": [{"value": "p0", "partition": 0}, {"value": "p1", "partition": 0}],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "sequence": 0,
    });
    let from_producer = produce_ok(&server, topic, None, &produced).await;
    let watermarks = server.high_watermarks(topic).await;

    server.kill();
    server.restart().await;
    server.wait_for_leaders(topic).await;

    let again = produce_ok(&server, topic, Some("restart-1"), &keyed).await;
    assert_eq!(again["offsets"], first["offsets"]);
    assert_eq!(again["duplicate"], true);
    let again = produce_ok(&server, topic, None, &produced).await;
    assert_eq!(again["offsets"], from_producer["offsets"]);
    assert_eq!(again["duplicate"], true);
    assert_eq!(server.high_watermarks(topic).await, watermarks);
    // The producer's registration survived too: the old epoch is fenced after a new one.
    let newer = register(&server, Some(&json!({"name": "survivor"}))).await;
    assert_eq!(newer["producer_id"], producer["producer_id"]);
    assert_eq!(newer["producer_epoch"], 1);
}

#[tokio::test]
async fn concurrent_idempotent_requests_each_write_once() {
    let server = Server::start().await;
    let topic = "idem-concurrent";
    server.create_topic(topic, 1).await;
    server.wait_for_leaders(topic).await;
    // Each key is sent twice at once, among the others: requests that queue together are
    // proposed together, each as its own entry, and a key's second copy is its duplicate.
    let requests = (0..20).flat_map(|n| [n, n]).map(|n| {
        let server = &server;
        async move {
            let key = format!("concurrent-{n}");
            let answer = produce_ok(server, topic, Some(&key), &batch(&[&key])).await;
            (n, answer)
        }
    });
    let answers = futures::future::join_all(requests).await;
    let mut by_key: BTreeMap<i32, Vec<Value>> = BTreeMap::new();
    for (n, answer) in answers {
        by_key.entry(n).or_default().push(answer);
    }
    for (n, answers) in &by_key {
        assert_eq!(
            answers[0]["offsets"], answers[1]["offsets"],
            "key {n}: {answers:?}"
        );
        let duplicates = answers.iter().filter(|a| a["duplicate"] == true).count();
        assert_eq!(
            duplicates, 1,
            "key {n}: one write, one duplicate: {answers:?}"
        );
    }
    let stored = server.read_all(topic, 0).await;
    assert_eq!(stored.len(), 20, "each key written once");
}

/// Partition 1 refuses its share of a request (its `Idempotency-Key` was used there for other
/// messages) while partition 0 writes its own: the answer is 207, each message with its offset
/// or its partition's problem, and a retry of exactly the failed message stores every message
/// once. A single error would have hidden that partition 0 was written, and a retry of the
/// whole request would have written it twice.
#[tokio::test]
async fn a_partly_written_request_says_which_messages_to_retry() {
    let server = Server::start().await;
    let topic = "idem-partial";
    server.create_topic(topic, 2).await;
    server.wait_for_leaders(topic).await;
    let first = json!({"messages": [{"value": "first", "partition": 1}]});
    produce_ok(&server, topic, Some("order-9"), &first).await;

    let body = json!({"messages": [
        {"value": "a", "partition": 0},
        {"value": "b", "partition": 1},
        {"value": "c", "partition": 0},
    ]});
    let response = produce(&server, topic, "acks=all", Some("order-9"), &body).await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::MULTI_STATUS, "{answer}");
    let offsets = answer["offsets"].as_array().expect("offsets");
    assert_eq!(offsets.len(), 3, "{answer}");
    assert_eq!(offsets[0], json!({"partition": 0, "offset": 0}));
    assert_eq!(offsets[2], json!({"partition": 0, "offset": 1}));
    let failed = &offsets[1];
    assert_eq!(failed["partition"], 1, "{answer}");
    assert_eq!(failed["offset"], Value::Null, "{answer}");
    let problem = &failed["error"];
    assert_eq!(problem["code"], "idempotency_key_reused", "{answer}");
    assert_eq!(problem["status"], 409, "{answer}");
    assert_eq!(problem["type"], "urn:herald:problem:idempotency_key_reused");
    assert_eq!(problem["title"], "Idempotency key reused");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("order-9")),
        "{answer}"
    );
    assert!(answer.get("duplicate").is_none(), "{answer}");

    // Retry exactly the message with an error: a new request, so a new key.
    let retry = json!({"messages": [{"value": "b", "partition": 1}]});
    let retried = produce_ok(&server, topic, Some("order-9-b"), &retry).await;
    assert_eq!(retried["offsets"], json!([{"partition": 1, "offset": 1}]));

    let stored = read_topic(&server, topic, 2).await;
    let texts = |partition: u32| -> Vec<String> {
        stored[&partition]
            .iter()
            .map(|message| message.value_text().to_string())
            .collect()
    };
    assert_eq!(texts(0), ["\"a\"", "\"c\""]);
    assert_eq!(texts(1), ["\"first\"", "\"b\""]);
}
