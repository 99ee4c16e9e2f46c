//! Redrive on one node, black box: dead letters come back to their topic once, with their key,
//! value and headers, without the `herald-dlq-*` headers and with `herald-redrive-count`; the
//! rate bound; offsets bound the range; another subscription's dead letters in a shared
//! dead-letter topic stay; a SIGKILL in the middle of a redrive and the job resumed republishes
//! nothing twice; a batch already written before its checkpoint moved is not written again; a
//! deleted dead-letter topic fails the job with its reason; the CLI; bad requests are refused
//! and change nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::poll;
use crate::common::queues::{describe, pull, subscribe, topics};
use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(60);

/// A subscription on `topic` that dead-letters to `dlq` after one delivery.
async fn subscribe_with_dlq(server: &Server, name: &str, topic: &str, dlq: &str) {
    subscribe(
        server,
        name,
        json!({"topic": topic, "retry_policy": {"min_backoff_ms": 0, "max_backoff_ms": 0},
               "dead_letter_policy": {"topic": dlq, "max_delivery_attempts": 1}}),
    )
    .await;
}

async fn post(server: &Server, path: &str, body: Value) -> (StatusCode, Value) {
    server.json(server.post_json(path, &body).await).await
}

/// Pulls and nacks until `count` messages were dead-lettered (attempts are 1: the pull after
/// the nack dead-letters).
async fn dead_letter(server: &Server, name: &str, count: u64) {
    let seen = poll(DEADLINE, Duration::from_millis(10), || async {
        let messages = pull(server, name, 100, 200).await;
        if !messages.is_empty() {
            let ack_ids: Vec<&str> = messages
                .iter()
                .map(|m| m["ack_id"].as_str().expect("an ack id"))
                .collect();
            let (status, answer) = post(
                server,
                &format!("/v1/subscriptions/{name}/nack"),
                json!({"ack_ids": ack_ids, "delay_ms": 0}),
            )
            .await;
            if status != StatusCode::OK {
                return Err(format!("nack: {status}: {answer}"));
            }
        }
        let described = describe(server, name).await;
        if described["dead_lettered"] == count {
            Ok(())
        } else {
            Err(format!("not all dead-lettered: {described}"))
        }
    })
    .await;
    if let Err(seen) = seen {
        server.fail(&seen);
    }
}

async fn start_redrive(server: &Server, name: &str, body: Value) -> Value {
    let (status, job) = post(server, &format!("/v1/subscriptions/{name}/redrive"), body).await;
    if status != StatusCode::ACCEPTED {
        server.fail(&format!("POST redrive {name}: {status}: {job}"));
    }
    job
}

async fn redrive_status(server: &Server, name: &str) -> Result<Value, String> {
    let response = server
        .http_client()
        .get(server.url(&format!("/v1/subscriptions/{name}/redrive")))
        .send()
        .await
        .map_err(|err| format!("GET redrive: {err}"))?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|err| err.to_string())?;
    if status != StatusCode::OK {
        return Err(format!("GET redrive {name}: {status}: {body}"));
    }
    Ok(body)
}

async fn wait_done(server: &Server, name: &str) -> Value {
    let done = poll(DEADLINE, Duration::from_millis(20), || async {
        let job = redrive_status(server, name).await?;
        match job["state"].as_str() {
            Some("done") => Ok(job),
            Some("running") => Err(format!("still running: {job}")),
            _ => Err(format!("ended otherwise: {job}")),
        }
    })
    .await;
    done.unwrap_or_else(|seen| server.fail(&seen))
}

/// Dead letters as a subscription writes them, produced directly (faster than pulling each
/// one to its end): id `i` goes to dead-letter partition `i % partitions`.
async fn produce_dead_letters(
    server: &Server,
    dlq: &str,
    partitions: u32,
    subscription: &str,
    source: &str,
    ids: std::ops::Range<u64>,
) {
    let messages: Vec<Value> = ids
        .map(|id| {
            json!({
                "partition": (id % u64::from(partitions)) as u32,
                "key": format!("k{id}"),
                "value": {"id": id},
                "headers": {
                    "trace": format!("t{id}"),
                    "herald-dlq-reason": "max_attempts",
                    "herald-dlq-source-topic": source,
                    "herald-dlq-source-partition": "0",
                    "herald-dlq-source-offset": id.to_string(),
                    "herald-dlq-attempts": "1",
                    "herald-dlq-subscription": subscription,
                },
            })
        })
        .collect();
    for chunk in messages.chunks(500) {
        server.produce_ok(dlq, &json!({ "messages": chunk })).await;
    }
}

/// How many times each id is in the topic's partition 0.
async fn ids_in(server: &Server, topic: &str) -> BTreeMap<u64, usize> {
    let mut ids = BTreeMap::new();
    for message in server.read_all(topic, 0).await {
        let value: Value = serde_json::from_str(message.value_text()).expect("a JSON value");
        *ids.entry(value["id"].as_u64().expect("an id")).or_insert(0) += 1;
    }
    ids
}

#[tokio::test]
async fn dead_letters_are_redriven_once_with_their_key_value_and_headers() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    let messages: Vec<Value> = (0..3)
        .map(|id| json!({"key": format!("k{id}"), "value": {"id": id}, "headers": {"trace": format!("t{id}")}}))
        .collect();
    server
        .produce_ok("jobs", &json!({ "messages": messages }))
        .await;
    dead_letter(&server, "workers", 3).await;

    let job = start_redrive(&server, "workers", json!({})).await;
    assert_eq!(job["max_per_second"], 100, "{job}");
    assert_eq!(job["total"], 3, "{job}");
    let done = wait_done(&server, "workers").await;
    assert_eq!(done["redriven"], 3, "{done}");
    assert_eq!(done["skipped"], 0, "{done}");
    assert!(done["finished_at"].as_i64() >= done["started_at"].as_i64());
    // The subscription shows it too.
    let described = describe(&server, "workers").await;
    assert_eq!(described["redrive"]["id"], done["id"], "{described}");
    assert_eq!(described["redrive"]["state"], "done", "{described}");

    // Back in the topic once each, after the originals.
    let stored = server.read_all("jobs", 0).await;
    assert_eq!(stored.len(), 6, "{stored:?}");
    for (id, message) in stored[3..].iter().enumerate() {
        assert_eq!(message.key.as_deref(), Some(format!("k{id}").as_str()));
        let value: Value = serde_json::from_str(message.value_text()).unwrap();
        assert_eq!(value, json!({"id": id}));
        let headers = message.headers.clone().unwrap_or_default();
        assert_eq!(headers.get("trace"), Some(&json!(format!("t{id}"))));
        assert_eq!(headers.get("herald-redrive-count"), Some(&json!("1")));
        assert!(
            headers.keys().all(|name| !name.starts_with("herald-dlq-")),
            "{headers:?}"
        );
    }

    // The subscription delivers them again, as new messages.
    let again = pull(&server, "workers", 10, 5_000).await;
    assert_eq!(again.len(), 3, "{again:?}");
    assert!(again.iter().all(|m| m["delivery_attempt"] == 1));
    assert!(again
        .iter()
        .all(|m| m["message"]["headers"]["herald-redrive-count"] == "1"));
    // Failing again, they are dead-lettered with their count, and a redrive of only the new
    // dead letters (from offset 3) counts on.
    let ack_ids: Vec<&str> = again
        .iter()
        .map(|m| m["ack_id"].as_str().unwrap())
        .collect();
    let (status, _) = post(
        &server,
        "/v1/subscriptions/workers/nack",
        json!({"ack_ids": ack_ids, "delay_ms": 0}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    dead_letter(&server, "workers", 6).await;
    let job = start_redrive(&server, "workers", json!({"from_offset": 3})).await;
    assert_eq!(job["total"], 3, "{job}");
    let done = wait_done(&server, "workers").await;
    assert_eq!(done["redriven"], 3, "{done}");
    let stored = server.read_all("jobs", 0).await;
    assert_eq!(stored.len(), 9);
    for message in &stored[6..] {
        let headers = message.headers.clone().unwrap_or_default();
        assert_eq!(headers.get("herald-redrive-count"), Some(&json!("2")));
    }
}

#[tokio::test]
async fn the_rate_bound_holds_and_other_subscriptions_dead_letters_stay() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("shared-dlq", 1)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "shared-dlq").await;
    subscribe_with_dlq(&server, "auditors", "jobs", "shared-dlq").await;
    produce_dead_letters(&server, "shared-dlq", 1, "workers", "jobs", 0..20).await;
    produce_dead_letters(&server, "shared-dlq", 1, "auditors", "jobs", 100..105).await;
    produce_dead_letters(&server, "shared-dlq", 1, "workers", "jobs", 20..22).await;

    let started = Instant::now();
    start_redrive(&server, "workers", json!({"max_per_second": 10})).await;
    let done = wait_done(&server, "workers").await;
    let took = started.elapsed();
    assert_eq!(done["redriven"], 22, "{done}");
    assert_eq!(done["skipped"], 5, "{done}");
    // 22 messages at 10 a second: the last batch goes out 2 s after the first at the earliest.
    assert!(
        took >= Duration::from_millis(1_900),
        "22 messages at 10/s took {took:?}"
    );
    let ids = ids_in(&server, "jobs").await;
    let expected: BTreeMap<u64, usize> = (0..22).map(|id| (id, 1)).collect();
    assert_eq!(ids, expected);
    // The auditors' dead letters are theirs to redrive.
    start_redrive(&server, "auditors", json!({"max_per_second": 1000})).await;
    let done = wait_done(&server, "auditors").await;
    assert_eq!(done["redriven"], 5, "{done}");
    assert_eq!(done["skipped"], 22, "{done}");
}

#[tokio::test]
async fn offsets_bound_the_redrive_in_every_dead_letter_partition() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 2)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    // Ids 0, 2, .. 18 at offsets 0..10 of partition 0; 1, 3, .. 19 in partition 1.
    produce_dead_letters(&server, "jobs-dlq", 2, "workers", "jobs", 0..20).await;
    let job = start_redrive(
        &server,
        "workers",
        json!({"from_offset": 2, "to_offset": 5, "max_per_second": 1000}),
    )
    .await;
    assert_eq!(job["from_offset"], 2);
    assert_eq!(job["to_offset"], 5);
    assert_eq!(job["total"], 8, "{job}");
    let done = wait_done(&server, "workers").await;
    assert_eq!(done["redriven"], 8, "{done}");
    let ids: Vec<u64> = ids_in(&server, "jobs").await.into_keys().collect();
    assert_eq!(ids, vec![4, 5, 6, 7, 8, 9, 10, 11]);
    // A range past the end is empty: done at once, nothing republished.
    let job = start_redrive(&server, "workers", json!({"from_offset": 50})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["total"], 0, "{job}");
}

#[tokio::test]
async fn bad_redrives_are_refused_and_change_nothing() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    subscribe(&server, "plain", json!({"topic": "jobs"})).await;
    produce_dead_letters(&server, "jobs-dlq", 1, "workers", "jobs", 0..20).await;
    let path = "/v1/subscriptions/workers/redrive";
    for body in [
        json!({"max_per_second": 0}),
        json!({"max_per_second": 10001}),
        json!({"max_per_second": -1}),
        json!({"from_offset": -1}),
        json!({"from_offset": 5, "to_offset": 4}),
        json!({"rate": 5}),
    ] {
        let response = server.post_json(path, &body).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    let response = server.get(path).await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "redrive_not_found")
        .await;
    let response = server
        .post_json("/v1/subscriptions/missing/redrive", &json!({}))
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "subscription_not_found")
        .await;
    let response = server
        .post_json("/v1/subscriptions/plain/redrive", &json!({}))
        .await;
    server
        .expect_problem(response, StatusCode::CONFLICT, "no_dead_letter_policy")
        .await;
    // Nothing was republished.
    assert!(ids_in(&server, "jobs").await.is_empty());

    // One at a time: 20 messages at 1 a second run for long.
    let job = start_redrive(&server, "workers", json!({"max_per_second": 1})).await;
    let response = server.post_json(path, &json!({})).await;
    server
        .expect_problem(response, StatusCode::CONFLICT, "redrive_in_progress")
        .await;
    let running = redrive_status(&server, "workers").await.unwrap();
    assert_eq!(running["id"], job["id"]);
    assert_eq!(running["max_per_second"], 1);
    // Cancel stops it; a second cancel finds nothing running.
    let response = server.delete(path).await;
    let (status, cancelled) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["state"], "cancelled");
    assert!(cancelled["finished_at"].is_i64());
    let response = server.delete(path).await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "redrive_not_found")
        .await;
    // It republishes nothing more after the cancel but the batch in flight then: watched for
    // longer than three more batches would take at 1 a second.
    let after_cancel = redrive_status(&server, "workers").await.unwrap()["redriven"]
        .as_u64()
        .unwrap();
    assert!(after_cancel < 20);
    let watched = Instant::now();
    let quiet = poll(DEADLINE, Duration::from_millis(250), || async {
        let count = ids_in(&server, "jobs").await.values().sum::<usize>() as u64;
        if count > after_cancel + 1 {
            return Ok(Err(format!(
                "{count} republished after a cancel at {after_cancel}"
            )));
        }
        if watched.elapsed() >= Duration::from_secs(3) {
            Ok(Ok(()))
        } else {
            Err("still watching".to_string())
        }
    })
    .await;
    if let Err(seen) = quiet.unwrap_or_else(Err) {
        server.fail(&seen);
    }
}

/// Whether any log of the node says a redrive batch was answered from the dedup window.
fn replay_logged(server: &Server) -> bool {
    let Some(dir) = server.data_dir().parent().map(|dir| dir.to_path_buf()) else {
        return false;
    };
    (0..8).any(|index| {
        std::fs::read_to_string(dir.join(format!("herald-{index}.log")))
            .is_ok_and(|log| log.contains("answered from the dedup window"))
    })
}

#[tokio::test]
async fn a_redrive_killed_in_the_middle_resumes_and_republishes_nothing_twice() {
    const MESSAGES: u64 = 2_000;
    let mut server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 2)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    produce_dead_letters(&server, "jobs-dlq", 2, "workers", "jobs", 0..MESSAGES).await;
    // 500/s is batches of 100, five a second: about 20 chances to catch a gap in 4 s.
    start_redrive(&server, "workers", json!({"max_per_second": 500})).await;
    // Aim the kill between a batch's write and its checkpoint: the topic holds more than the
    // checkpoint counts (read in that order, so the gap is real when seen). The gap lasts one
    // checkpoint round and may be missed on every batch; then the kill comes three quarters
    // through, still mid-job (the gap itself is made on purpose by the next test).
    let midway = poll(DEADLINE, Duration::from_millis(1), || async {
        let (_, read) = server
            .fetch("jobs", 0, "offset=latest&max_messages=1")
            .await;
        let written = read["high_watermark"].as_u64().unwrap_or(0);
        let job = redrive_status(&server, "workers").await?;
        let redriven = job["redriven"].as_u64().unwrap_or(0);
        if job["state"] != "running" {
            return Ok(redriven);
        }
        if (written > redriven && redriven > 0) || redriven >= MESSAGES * 3 / 4 {
            Ok(redriven)
        } else {
            Err(format!("no batch between write and checkpoint seen: {job}"))
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    server.kill();
    assert!(midway < MESSAGES, "finished before the kill");
    server.restart().await;
    server.wait_for_leaders("jobs").await;
    let done = wait_done(&server, "workers").await;
    assert_eq!(done["redriven"], MESSAGES, "{done}");
    let ids = ids_in(&server, "jobs").await;
    let expected: BTreeMap<u64, usize> = (0..MESSAGES).map(|id| (id, 1)).collect();
    assert_eq!(ids, expected, "every dead letter once in the topic");
    eprintln!(
        "killed at {midway} redriven; a batch replayed from the dedup window: {}",
        replay_logged(&server)
    );
}

/// The state a crash leaves between a batch's write and its checkpoint, made on purpose: the
/// batch a runner is about to republish is already in the topic under the batch's
/// idempotency key (`herald-redrive-{job}-{partition}-{first offset}`), as a runner killed just
/// after writing it would have left it. The runner's own write of it is answered from the
/// dedup window, and the message is in the topic once.
#[tokio::test]
async fn a_batch_written_before_its_checkpoint_moved_is_not_written_again() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    produce_dead_letters(&server, "jobs-dlq", 1, "workers", "jobs", 0..3).await;
    // One message a second, one per batch: the batch at offset 2 goes out 2 s from now.
    let job = start_redrive(&server, "workers", json!({"max_per_second": 1})).await;
    let key = format!("herald-redrive-{}-0-2", job["id"]);
    let body = r#"{"messages":[{"partition":0,"key":"k2","value":{"id":2},"headers":{"trace":"t2","herald-redrive-count":"1"}}]}"#;
    let response = server
        .http_client()
        .post(server.url("/v1/topics/jobs/messages"))
        .header("content-type", "application/json")
        .header("idempotency-key", &key)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|err| server.fail(&format!("produce: {err}")));
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let before = redrive_status(&server, "workers").await.unwrap();
    assert!(
        before["redriven"].as_u64() < Some(3),
        "the runner got there first: {before}"
    );
    let done = wait_done(&server, "workers").await;
    assert_eq!(done["redriven"], 3, "{done}");
    let ids = ids_in(&server, "jobs").await;
    let expected: BTreeMap<u64, usize> = (0..3).map(|id| (id, 1)).collect();
    assert_eq!(
        ids, expected,
        "the batch written before is not written again"
    );
    assert!(replay_logged(&server), "{}", server.log_tail());
}

/// Runs `herald <args> --server <url>` with a deadline; answers (success, stdout, stderr).
async fn herald_cli(server: &Server, args: &[&str]) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(args)
        .arg("--server")
        .arg(server.base_url())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERALD_") {
            command.env_remove(name);
        }
    }
    let output = tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| server.fail(&format!("herald {args:?} did not finish")))
        .expect("run the herald CLI");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_starts_a_redrive_and_waits_for_it() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    produce_dead_letters(&server, "jobs-dlq", 1, "workers", "jobs", 0..10).await;
    let (ok, stdout, stderr) = herald_cli(
        &server,
        &[
            "subscriptions",
            "redrive",
            "workers",
            "--from-offset",
            "2",
            "--max-per-second",
            "5",
            "--wait",
        ],
    )
    .await;
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    let job: Value = serde_json::from_str(stdout.trim()).expect("the job as JSON");
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["redriven"], 8, "{job}");
    assert!(stderr.contains("redriven"), "progress on stderr: {stderr}");
    let ids: Vec<u64> = ids_in(&server, "jobs").await.into_keys().collect();
    assert_eq!(ids, (2..10).collect::<Vec<u64>>());
    // A refusal is an error with its problem code.
    let (ok, _, stderr) = herald_cli(&server, &["subscriptions", "redrive", "missing"]).await;
    assert!(!ok);
    assert!(stderr.contains("subscription_not_found"), "{stderr}");
}

#[tokio::test]
async fn a_redrive_whose_dead_letter_topic_is_deleted_fails_with_the_reason() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    subscribe_with_dlq(&server, "workers", "jobs", "jobs-dlq").await;
    produce_dead_letters(&server, "jobs-dlq", 1, "workers", "jobs", 0..20).await;
    start_redrive(&server, "workers", json!({"max_per_second": 1})).await;
    let response = server.delete("/v1/topics/jobs-dlq").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let failed = poll(DEADLINE, Duration::from_millis(50), || async {
        let job = redrive_status(&server, "workers").await?;
        match job["state"].as_str() {
            Some("failed") => Ok(job),
            _ => Err(format!("not failed: {job}")),
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    let reason = failed["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("jobs-dlq"), "{failed}");
    assert!(failed["redriven"].as_u64() < Some(20), "{failed}");
    // A new redrive is refused with the reason: the dead-letter topic is gone.
    let response = server
        .post_json("/v1/subscriptions/workers/redrive", &json!({}))
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
}
