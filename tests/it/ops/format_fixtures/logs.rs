//! The partitions' logs: every message, the log starts, compaction, idempotent producing, and
//! new writes on the old data.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::api::{Api, Tokens};
use super::{array, int, text, ACT_DEADLINE};
use crate::common::poll;

/// Every topic's settings and partitions, and every message, as the fixture recorded them; the
/// compacted partition may have been cleaned since (`check_compaction`).
pub(super) async fn check_topics(api: &Api<'_>, tokens: &Tokens, expected: &Value) {
    let admin = &tokens["admin"];
    for (name, topic) in expected["topics"].as_object().expect("topics") {
        let described = api.get(&format!("/v1/topics/{name}"), admin).await;
        let recorded = &topic["described"];
        for field in ["name", "config", "replication_factor"] {
            assert_eq!(described[field], recorded[field], "{name}: {field}");
        }
        let partitions = array(&described["partitions"]);
        assert_eq!(
            partitions.len(),
            array(&recorded["partitions"]).len(),
            "{name}: {described}"
        );
        let compacted = text(&recorded["config"]["cleanup_policy"]).contains("compact");
        for (got, want) in partitions.iter().zip(array(&recorded["partitions"])) {
            let replicas =
                |p: &Value| -> BTreeSet<i64> { array(&p["replicas"]).iter().map(int).collect() };
            assert_eq!(replicas(got), replicas(want), "{name}: replicas of {got}");
            for field in ["partition", "log_start_offset", "high_watermark"] {
                assert_eq!(got[field], want[field], "{name}: {field} of {got}");
            }
        }
        for (partition, recorded) in topic["partitions"].as_object().expect("partitions") {
            let partition: u64 = partition.parse().expect("a partition number");
            let (messages, last_page) = api.read_partition(admin, name, partition).await;
            for field in ["log_start_offset", "high_watermark"] {
                assert_eq!(
                    last_page[field], recorded[field],
                    "{name}/{partition}: {field}"
                );
            }
            let want = array(&recorded["messages"]);
            if compacted {
                // Cleaned again or not yet: what is there is what was there, and the newest
                // message of every key is there.
                let by_offset: BTreeMap<i64, &Value> =
                    want.iter().map(|m| (int(&m["offset"]), m)).collect();
                for message in &messages {
                    assert_eq!(
                        Some(&message),
                        by_offset.get(&int(&message["offset"])),
                        "{name}/{partition}: a message that was not in the fixture"
                    );
                }
                let offsets: BTreeSet<i64> = messages.iter().map(|m| int(&m["offset"])).collect();
                for survivor in newest_per_key(want) {
                    assert!(
                        offsets.contains(&int(&survivor["offset"])),
                        "{name}/{partition}: the newest message of its key is gone: {survivor}"
                    );
                }
            } else {
                assert_eq!(&messages, want, "{name}/{partition}: the messages");
            }
            let log_start = int(&recorded["log_start_offset"]);
            if log_start > 0 {
                let (status, answer) = api
                    .send(
                        Method::GET,
                        &format!("/v1/topics/{name}/partitions/{partition}/messages?offset=0"),
                        Some(admin),
                        None,
                        &[],
                    )
                    .await;
                assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{answer}");
                assert_eq!(answer["code"], "offset_out_of_range", "{answer}");
            }
        }
    }
}

/// The newest message of each key (by offset), in offset order: what compaction keeps.
fn newest_per_key(messages: &[Value]) -> Vec<&Value> {
    let mut newest: BTreeMap<String, &Value> = BTreeMap::new();
    for message in messages {
        let key = message
            .get("key")
            .or_else(|| message.get("key_b64"))
            .map(Value::to_string)
            .unwrap_or_default();
        newest.insert(key, message);
    }
    let mut kept: Vec<&Value> = newest.into_values().collect();
    kept.sort_by_key(|m| int(&m["offset"]));
    kept
}

/// The idempotent producer's state survived: a re-send is a duplicate, a gap and the fenced
/// epoch are refused, the next sequence is written; so is an Idempotency-Key's.
pub(super) async fn check_idempotent_producing(api: &Api<'_>, tokens: &Tokens, expected: &Value) {
    let producer = &tokens["fixture-producer"];
    let admin = &tokens["admin"];
    let recorded = &expected["producer"];
    let request = &recorded["last_request"];
    let partition = int(&request["messages"][0]["partition"]);
    let watermarks = |described: &Value| -> Vec<Value> {
        array(&described["partitions"])
            .iter()
            .map(|p| p["high_watermark"].clone())
            .collect()
    };
    let before = watermarks(&api.get("/v1/topics/payments", admin).await);

    let again = api
        .post("/v1/topics/payments/messages", producer, request)
        .await;
    assert_eq!(again["duplicate"], true, "a re-send: {again}");
    assert_eq!(
        again["offsets"], recorded["last_answer"]["offsets"],
        "{again}"
    );

    let next = int(&recorded["next_sequence"][partition.to_string()]);
    let mut gap = request.clone();
    gap["sequence"] = json!(next + 2);
    let (status, answer) = api
        .send(
            Method::POST,
            "/v1/topics/payments/messages",
            Some(producer),
            Some(&gap),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["code"], "out_of_order_sequence", "{answer}");
    assert_eq!(int(&answer["expected_sequence"]), next, "{answer}");
    let mut fenced = request.clone();
    fenced["producer_epoch"] = json!(int(&request["producer_epoch"]) - 1);
    fenced["sequence"] = json!(next);
    let (status, answer) = api
        .send(
            Method::POST,
            "/v1/topics/payments/messages",
            Some(producer),
            Some(&fenced),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["code"], "producer_fenced", "{answer}");

    let keyed = &expected["idempotency_key"];
    let (status, answer) = api
        .send(
            Method::POST,
            "/v1/topics/payments/messages",
            Some(producer),
            Some(&keyed["request"]),
            &[("idempotency-key", text(&keyed["key"]))],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["duplicate"], true,
        "an Idempotency-Key re-send: {answer}"
    );
    assert_eq!(answer["offsets"], keyed["answer"]["offsets"], "{answer}");
    assert_eq!(
        watermarks(&api.get("/v1/topics/payments", admin).await),
        before,
        "the re-sends wrote nothing"
    );

    let mut following = request.clone();
    following["sequence"] = json!(next);
    following["messages"] =
        json!([{"partition": partition, "key": "after-upgrade", "value": {"amount": 1}}]);
    let written = api
        .post("/v1/topics/payments/messages", producer, &following)
        .await;
    assert_eq!(
        written["offsets"],
        json!([{"partition": partition, "offset": before[partition as usize]}]),
        "the next sequence: {written}"
    );
    let registered = &recorded["registered"];
    let again = api
        .post(
            "/v1/producers",
            producer,
            &json!({"name": registered["name"]}),
        )
        .await;
    assert_eq!(again["producer_id"], registered["producer_id"], "{again}");
    assert_eq!(
        int(&again["producer_epoch"]),
        int(&registered["producer_epoch"]) + 1,
        "{again}"
    );
}

/// The node writes on the old data: a produce the policy grants, a new topic, a message read
/// back from each.
pub(super) async fn check_new_writes(api: &Api<'_>, tokens: &Tokens, expected: &Value) {
    let admin = &tokens["admin"];
    let message = json!({"partition": 1, "key": "after-upgrade", "value": {"written": "now"},
        "headers": {"by": "format_fixtures"}, "timestamp": 1893456000000_i64});
    let written = api
        .post(
            "/v1/topics/orders/messages",
            &tokens["fixture-orders-writer"],
            &json!({"messages": [message.clone()]}),
        )
        .await;
    let offset = int(&written["offsets"][0]["offset"]);
    assert_eq!(
        offset,
        int(&expected["topics"]["orders"]["partitions"]["1"]["high_watermark"]),
        "{written}"
    );
    let read = api
        .get(
            &format!("/v1/topics/orders/partitions/1/messages?offset={offset}"),
            admin,
        )
        .await;
    let mut want = message;
    want["topic"] = json!("orders");
    want["offset"] = json!(offset);
    assert_eq!(read["messages"], json!([want]), "{read}");

    let replicas = api.nodes.len();
    api.expect(
        StatusCode::CREATED,
        Method::POST,
        "/v1/topics",
        admin,
        Some(&json!({"name": "after-upgrade", "partitions": 2, "replication_factor": replicas})),
    )
    .await;
    let written = api
        .post(
            "/v1/topics/after-upgrade/messages",
            &tokens["fixture-producer"],
            &json!({"messages": [{"partition": 0, "value": "new"}, {"partition": 1, "value": "topic"}]}),
        )
        .await;
    assert_eq!(
        written["offsets"],
        json!([{"partition": 0, "offset": 0}, {"partition": 1, "offset": 0}])
    );
    let (messages, _) = api.read_partition(admin, "after-upgrade", 1).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["value"], "topic");
}

/// The compacted partition is cleaned on the old data: every key keeps its newest message
/// (a tombstone may have gone), nothing else is left.
pub(super) async fn check_compaction(api: &Api<'_>, tokens: &Tokens, expected: &Value) {
    for (name, topic) in expected["topics"].as_object().expect("topics") {
        if !text(&topic["described"]["config"]["cleanup_policy"]).contains("compact") {
            continue;
        }
        for (partition, recorded) in topic["partitions"].as_object().expect("partitions") {
            let partition: u64 = partition.parse().expect("a partition number");
            let survivors = newest_per_key(array(&recorded["messages"]));
            let kept: Vec<&Value> = survivors
                .iter()
                .copied()
                .filter(|m| !m["value"].is_null())
                .collect();
            let cleaned = poll(ACT_DEADLINE, Duration::from_millis(250), || async {
                let (messages, _) = api.read_partition(&tokens["admin"], name, partition).await;
                let live: Vec<&Value> = messages.iter().filter(|m| !m["value"].is_null()).collect();
                let tombstones_kept = messages
                    .iter()
                    .filter(|m| m["value"].is_null())
                    .all(|m| survivors.contains(&m));
                if live == kept && tombstones_kept {
                    Ok(())
                } else {
                    Err(format!("{messages:?}"))
                }
            })
            .await;
            if let Err(messages) = cleaned {
                panic!(
                    "{name}/{partition} was not cleaned down to the newest message of each key \
                     {kept:?}: {messages}"
                );
            }
        }
    }
}
