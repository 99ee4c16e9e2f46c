//! Consumer group offsets on one node, black box: lag, commits that stay within the log (a
//! commit past the high watermark is refused and changes nothing; a commit can answer what it
//! stored), operator resets, and offsets surviving a restart.

use crate::common;

use std::collections::BTreeSet;

use crate::common::group_flow::{
    commit_body, committed_offsets, consume, id_of, join_body, poll_ok, produce_ids, topic_with,
};
use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_is_the_high_watermark_minus_the_committed_offset() {
    let server = Server::start().await;
    topic_with(&server, "orders", 3).await;
    for (partition, count) in [(0u32, 10u64), (1, 20), (2, 30)] {
        let messages: Vec<Value> = (0..count)
            .map(|id| json!({"partition": partition, "value": {"id": id}}))
            .collect();
        server
            .produce_ok("orders", &json!({ "messages": messages }))
            .await;
    }
    let member = server.join_group("lagging", &join_body(10_000)).await;
    let offsets: Vec<Value> = [(0, 4), (1, 5), (2, 6)]
        .iter()
        .map(|(partition, offset)| json!({"topic": "orders", "partition": partition, "offset": offset}))
        .collect();
    let (status, answer) = server
        .commit(
            "lagging",
            &json!({"member_id": member.id, "generation": member.generation, "offsets": offsets}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let described = server.describe_group("lagging").await;
    let offsets = described["offsets"].as_array().expect("offsets");
    assert_eq!(offsets.len(), 3);
    for (offset, (high_watermark, committed)) in offsets.iter().zip([(10, 4), (20, 5), (30, 6)]) {
        assert_eq!(offset["high_watermark"], high_watermark, "{described}");
        assert_eq!(offset["committed"], committed);
        assert_eq!(offset["lag"], high_watermark - committed);
    }
    let (status, listed) = server.json(server.get("/v1/groups").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["groups"][0]["group"], "lagging");
    assert_eq!(listed["groups"][0]["lag"], 6 + 15 + 24);
    assert_eq!(listed["groups"][0]["members"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_reset_only_without_members_to_earliest_offset_or_time() {
    let server = Server::start().await;
    topic_with(&server, "orders", 1).await;
    produce_ids(&server, "orders", 1, 0..10).await;
    // The second half carries explicit, later timestamps: the reset by time lands between.
    let middle = common::now_ms() + 60_000;
    let later: Vec<Value> = (10..20)
        .map(|id| json!({"partition": 0, "timestamp": middle + id, "value": {"id": id}}))
        .collect();
    server
        .produce_ok("orders", &json!({ "messages": later }))
        .await;
    let member = server.join_group("g", &join_body(10_000)).await;
    consume(&server, "g", &member.id, 20).await;
    assert_eq!(server.committed("g", "orders", 0).await, Some(20));

    let server_ref = &server;
    let reset = |body: Value| async move {
        server_ref
            .post_json("/v1/groups/g/offsets/reset", &body)
            .await
    };
    let refused = reset(json!({"to": "earliest"})).await;
    server
        .expect_problem(refused, StatusCode::CONFLICT, "group_not_empty")
        .await;
    server
        .delete(&format!("/v1/groups/g/members/{}", member.id))
        .await;
    for (body, expected) in [
        (json!({"to": "earliest"}), 0),
        (json!({"to": "offset", "offset": 7}), 7),
        (json!({"to": "offset", "offset": 999}), 20),
        (json!({"to": "timestamp", "timestamp": middle}), 10),
        (json!({"to": "latest", "topics": ["orders"]}), 20),
    ] {
        let (status, answer) = server.json(reset(body.clone()).await).await;
        assert_eq!(status, StatusCode::OK, "{body}: {answer}");
        assert_eq!(
            answer["offsets"][0]["committed"], expected,
            "{body}: {answer}"
        );
    }
    let invalid = reset(json!({"to": "offset"})).await;
    server
        .expect_problem(invalid, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    reset(json!({"to": "offset", "offset": 7})).await;
    let next = server.join_group("g", &join_body(10_000)).await;
    let polled = poll_ok(&server, "g", &next.id, json!({"max_messages": 100})).await;
    assert_eq!(
        polled.messages.first().map(|message| message.offset),
        Some(7)
    );
    // An empty group can be deleted, with its offsets.
    server
        .delete(&format!("/v1/groups/g/members/{}", next.id))
        .await;
    let deleted = server.delete("/v1/groups/g").await;
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let gone = server.get("/v1/groups/g").await;
    server
        .expect_problem(gone, StatusCode::NOT_FOUND, "group_not_found")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_survive_a_restart_with_members_and_offsets() {
    let mut server = Server::start().await;
    topic_with(&server, "orders", 2).await;
    produce_ids(&server, "orders", 2, 0..40).await;
    let member = server.join_group("g", &join_body(30_000)).await;
    let polled = poll_ok(&server, "g", &member.id, json!({"max_messages": 10})).await;
    let (status, _) = server.commit("g", &polled.commit_body(&member.id)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let before = server.describe_group("g").await;

    server.restart().await;
    server.wait_for_leaders("orders").await;
    let after = server.describe_group("g").await;
    assert_eq!(before["offsets"], after["offsets"]);
    assert_eq!(before["members"], after["members"]);
    let alive = server
        .heartbeat("g", &member.id)
        .await
        .expect("the member survives");
    assert_eq!(alive.generation, member.generation);
    let seen: BTreeSet<u64> = polled
        .messages
        .iter()
        .map(|message| id_of(&message.value))
        .collect();
    let rest = consume(&server, "g", &member.id, 30).await;
    assert_eq!(rest.len(), 30, "the poll resumed after what was committed");
    assert!(rest.iter().all(|id| !seen.contains(id)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_past_the_log_is_refused_and_changes_nothing() {
    let server = Server::start().await;
    topic_with(&server, "orders", 2).await;
    produce_ids(&server, "orders", 1, 0..10).await;
    let member = server
        .join_group(
            "g",
            &json!({"topics": ["orders"], "session_timeout_ms": 30_000}),
        )
        .await;
    let commit = |offsets: &[(u32, u64)]| {
        commit_body(
            &member.id,
            member.generation,
            &offsets.iter().copied().collect(),
        )
    };
    for offsets in [vec![(0, u64::MAX)], vec![(0, 1010)], vec![(0, 5), (1, 1)]] {
        let (status, problem) = server.commit("g", &commit(&offsets)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{offsets:?}: {problem}");
        assert_eq!(problem["code"], "offset_out_of_range");
        assert!(problem["high_watermark"].is_u64(), "{problem}");
        assert!(
            committed_offsets(&server, "g").await.is_empty(),
            "{offsets:?}: nothing of a refused commit is stored"
        );
    }
    // The high watermark itself is the end of what a group can have read.
    let (status, answer) = server.commit("g", &commit(&[(0, 10)])).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    // With `Prefer: return=representation`, the answer is the offsets as stored: a late,
    // lower commit shows the higher offset it did not undo.
    let (status, applied, stored) = server
        .commit_returning("g", &commit(&[(0, 4), (1, 0)]))
        .await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(applied.as_deref(), Some("return=representation"));
    assert_eq!(
        stored,
        json!({"offsets": [
            {"topic": "orders", "partition": 0, "committed": 10},
            {"topic": "orders", "partition": 1, "committed": 0},
        ]})
    );
    // The group is not pinned: the log grows and commits follow it.
    produce_ids(&server, "orders", 1, 10..15).await;
    let (status, _) = server.commit("g", &commit(&[(0, 15)])).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let described = server.describe_group("g").await;
    assert_eq!(described["offsets"][0]["committed"], 15, "{described}");
    assert_eq!(described["offsets"][0]["lag"], 0, "{described}");
}
