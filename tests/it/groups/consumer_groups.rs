//! Consumer groups on one node, black box: assignment and rebalancing as members join, leave
//! and expire; polls from the cursor or the committed offset, a lost answer delivered again;
//! commit-after-processing loses nothing across a rebalance; generation fencing; auto-commit;
//! `latest`; bad input. Offsets (lag, resets, restarts, commit bounds) are in
//! `consumer_group_offsets.rs`, randomized delivery checks in `consumer_group_delivery.rs`.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::group_flow::{consume, id_of, join_body, poll_ok, produce_ids, topic_with};
use crate::common::{poll, Member, Polled, Server};
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// How long a test waits for a rebalance or for every message to arrive.
const DEADLINE: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_millis(100);

fn assert_partitioned(members: &[&Member], partitions: u32) {
    let mut seen = BTreeSet::new();
    for member in members {
        for assignment in &member.assignments {
            assert!(
                seen.insert(assignment.clone()),
                "{assignment:?} assigned twice"
            );
        }
    }
    assert_eq!(
        seen.len(),
        partitions as usize,
        "every partition has an owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_split_rebalance_on_join_and_expiry_and_nothing_is_lost() {
    let server = Server::start().await;
    topic_with(&server, "orders", 6).await;
    produce_ids(&server, "orders", 6, 0..600).await;

    let first = server.join_group("g", &join_body(2000)).await;
    assert_eq!((first.generation, first.assignments.len()), (1, 6));
    let second = server.join_group("g", &join_body(2000)).await;
    let first = server.heartbeat("g", &first.id).await.expect("alive");
    assert_eq!(second.generation, 2);
    assert_eq!((first.assignments.len(), second.assignments.len()), (3, 3));
    assert_partitioned(&[&first, &second], 6);

    let third = server.join_group("g", &join_body(2000)).await;
    let first = server.heartbeat("g", &first.id).await.expect("alive");
    let second = server.heartbeat("g", &second.id).await.expect("alive");
    assert_eq!(third.generation, 3);
    assert_eq!(first.generation, 3);
    for member in [&first, &second, &third] {
        assert_eq!(member.assignments.len(), 2, "2/2/2: {member:?}");
    }
    assert_partitioned(&[&first, &second, &third], 6);
    // Stickiness: the new member's partitions came one from each of the others.
    let described = server.describe_group("g").await;
    assert_eq!(described["state"], "stable");
    assert_eq!(described["members"].as_array().map(Vec::len), Some(3));

    // The third member takes messages and dies before committing them.
    let lost_work = poll_ok(&server, "g", &third.id, json!({"max_messages": 40})).await;
    assert!(!lost_work.messages.is_empty());
    for message in &lost_work.messages {
        assert!(third
            .assignments
            .contains(&(message.topic.clone(), message.partition)));
    }

    // The others process and commit until everything is seen: the dead member's partitions
    // come to them once its session expires, from its last commit (none), so its
    // uncommitted messages are delivered again, and nothing is lost.
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mut workers = Vec::new();
    for member in [first.id.clone(), second.id.clone()] {
        let (seen, url) = (seen.clone(), server.url(""));
        workers.push(tokio::spawn(async move {
            let client = common::client();
            let deadline = Instant::now() + DEADLINE;
            while seen.lock().len() < 600 && Instant::now() < deadline {
                let answer: Value = client
                    .post(format!("{url}/v1/groups/g/members/{member}/poll"))
                    .json(&json!({"max_messages": 50, "max_wait_ms": 200}))
                    .send()
                    .await
                    .expect("poll")
                    .json()
                    .await
                    .expect("poll answer");
                let messages = answer["messages"].as_array().cloned().unwrap_or_default();
                if messages.is_empty() {
                    continue;
                }
                let mut next = std::collections::BTreeMap::new();
                for message in &messages {
                    seen.lock().insert(id_of(&message["value"].to_string()));
                    let key = (
                        message["topic"].as_str().unwrap().to_string(),
                        message["partition"].as_u64().unwrap(),
                    );
                    next.insert(key, message["offset"].as_u64().unwrap() + 1);
                }
                let offsets: Vec<Value> = next
                    .iter()
                    .map(|((topic, partition), offset)| {
                        json!({"topic": topic, "partition": partition, "offset": offset})
                    })
                    .collect();
                // A commit may meet a rebalance (409): the messages were processed anyway.
                client
                    .post(format!("{url}/v1/groups/g/offsets"))
                    .json(&json!({"member_id": member, "generation": answer["generation"], "offsets": offsets}))
                    .send()
                    .await
                    .expect("commit");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 600, "every message reached the group");
    for message in &lost_work.messages {
        assert!(seen.contains(&id_of(&message.value)));
    }
    let (status, _) = server
        .heartbeat("g", &third.id)
        .await
        .expect_err("the silent member expired");
    assert_eq!(status, StatusCode::NOT_FOUND);
    let first = server.heartbeat("g", &first.id).await.expect("alive");
    let second = server.heartbeat("g", &second.id).await.expect("alive");
    assert_eq!(first.generation, 4);
    assert_eq!((first.assignments.len(), second.assignments.len()), (3, 3));
    assert_partitioned(&[&first, &second], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_generation_is_refused_and_members_commit_only_their_partitions() {
    let server = Server::start().await;
    topic_with(&server, "orders", 2).await;
    produce_ids(&server, "orders", 2, 0..10).await;
    let first = server.join_group("g", &join_body(10_000)).await;
    let polled = poll_ok(&server, "g", &first.id, json!({"max_messages": 4})).await;
    assert_eq!(polled.generation, 1);
    let second = server.join_group("g", &join_body(10_000)).await;

    // The first member's commit names generation 1: the group is at 2 now.
    let (status, problem) = server.commit("g", &polled.commit_body(&first.id)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "stale_generation");
    let stale_poll = server
        .poll_group("g", &first.id, &json!({"generation": 1}))
        .await
        .expect_err("a poll naming generation 1");
    assert_eq!(stale_poll.0, StatusCode::CONFLICT);
    assert_eq!(stale_poll.1["code"], "stale_generation");
    // The first poll recorded where `earliest` started (0); the refused commit moved nothing.
    let described = server.describe_group("g").await;
    assert!(
        described["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|offset| offset["committed"] == 0),
        "nothing was committed: {described}"
    );

    let first = server.heartbeat("g", &first.id).await.expect("alive");
    let (mine, theirs) = (
        first.assignments.iter().next().unwrap().1,
        second.assignments.iter().next().unwrap().1,
    );
    let commit = |partition: u32, offset: u64| {
        json!({"member_id": first.id, "generation": 2,
               "offsets": [{"topic": "orders", "partition": partition, "offset": offset}]})
    };
    let (status, problem) = server.commit("g", &commit(theirs, 3)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["code"], "partition_not_assigned");
    assert_eq!(
        server.commit("g", &commit(mine, 3)).await.0,
        StatusCode::NO_CONTENT
    );
    // A late, lower commit does not move the group backwards.
    assert_eq!(
        server.commit("g", &commit(mine, 1)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(server.committed("g", "orders", mine).await, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_commits_before_answering_and_a_poll_resumes_from_its_cursor() {
    let server = Server::start().await;
    topic_with(&server, "orders", 1).await;
    produce_ids(&server, "orders", 1, 0..20).await;
    let member = server.join_group("g", &join_body(10_000)).await;
    let polled = poll_ok(
        &server,
        "g",
        &member.id,
        json!({"max_messages": 5, "auto_commit": true}),
    )
    .await;
    let offsets: Vec<u64> = polled
        .messages
        .iter()
        .map(|message| message.offset)
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    assert_eq!(server.committed("g", "orders", 0).await, Some(5));
    // Without auto-commit, the cursor moves on and the commit stays.
    let polled = poll_ok(
        &server,
        "g",
        &member.id,
        polled.next_poll(json!({"max_messages": 5})),
    )
    .await;
    assert_eq!(polled.messages[0].offset, 5);
    let polled = poll_ok(
        &server,
        "g",
        &member.id,
        polled.next_poll(json!({"max_messages": 5})),
    )
    .await;
    assert_eq!(polled.messages[0].offset, 10);
    assert_eq!(server.committed("g", "orders", 0).await, Some(5));
    // A poll without a cursor starts at the committed offset: what was not committed comes
    // again.
    let again = poll_ok(&server, "g", &member.id, json!({"max_messages": 5})).await;
    assert_eq!(again.messages[0].offset, 5);
    // A member that leaves without committing hands over from the committed offset.
    let (status, _) = server
        .json(
            server
                .delete(&format!("/v1/groups/g/members/{}", member.id))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let next = server.join_group("g", &join_body(10_000)).await;
    let polled = poll_ok(&server, "g", &next.id, json!({"max_messages": 100})).await;
    assert_eq!(
        polled.messages.first().map(|message| message.offset),
        Some(5)
    );
    assert_eq!(polled.messages.len(), 15);
}

/// Sends a poll on a raw connection, waits until the answer is there, and hangs up without
/// reading it: an answer lost on the way (a client timeout, a dropped connection).
async fn poll_and_hang_up(server: &Server, group: &str, member: &str, body: &Value) {
    use tokio::io::AsyncWriteExt;
    let body = body.to_string();
    let request = format!(
        "POST /v1/groups/{group}/members/{member}/poll HTTP/1.1\r\nhost: {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        server.http_addr(),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(server.http_addr())
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    tokio::time::timeout(DEADLINE, stream.readable())
        .await
        .expect("an answer within the deadline")
        .expect("readable");
    drop(stream);
}

fn values(polled: &Polled) -> Vec<&str> {
    polled
        .messages
        .iter()
        .map(|message| message.value.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_answer_lost_on_the_way_is_delivered_again() {
    let server = Server::start().await;
    topic_with(&server, "orders", 1).await;
    let produce = |values: &[&str]| {
        let messages: Vec<Value> = values
            .iter()
            .map(|value| json!({ "value": value }))
            .collect();
        json!({ "messages": messages })
    };
    server
        .produce_ok("orders", &produce(&["a", "b", "c"]))
        .await;
    let member = server.join_group("g", &join_body(10_000)).await;
    let first = poll_ok(&server, "g", &member.id, json!({"max_messages": 100})).await;
    assert_eq!(values(&first), ["\"a\"", "\"b\"", "\"c\""]);
    let (status, _) = server.commit("g", &first.commit_body(&member.id)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    server.produce_ok("orders", &produce(&["d", "e"])).await;
    poll_and_hang_up(&server, "g", &member.id, &first.next_poll(json!({}))).await;
    // Without a cursor the poll starts at the committed offset; with the cursor of the last
    // answer received, after that answer: either way, d and e come again.
    let again = poll_ok(&server, "g", &member.id, json!({})).await;
    assert_eq!(values(&again), ["\"d\"", "\"e\""], "without a cursor");
    let again = poll_ok(&server, "g", &member.id, first.next_poll(json!({}))).await;
    assert_eq!(
        values(&again),
        ["\"d\"", "\"e\""],
        "with the last cursor received"
    );
    // The cursor of an answer received moves on past it.
    let after = poll_ok(&server, "g", &member.id, again.next_poll(json!({}))).await;
    assert!(after.messages.is_empty(), "{:?}", after.messages);
    assert_eq!(
        server.committed("g", "orders", 0).await,
        Some(3),
        "polls commit nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_shares_its_messages_fairly_between_partitions_and_long_polls() {
    let server = Server::start().await;
    topic_with(&server, "orders", 2).await;
    let busy: Vec<Value> = (0..500)
        .map(|id| json!({"partition": 0, "value": {"id": id}}))
        .collect();
    server
        .produce_ok("orders", &json!({ "messages": busy }))
        .await;
    server
        .produce_ok(
            "orders",
            &json!({"messages": [{"partition": 1, "value": {"id": 9999}}]}),
        )
        .await;
    let member = server.join_group("g", &join_body(10_000)).await;
    let polled = poll_ok(&server, "g", &member.id, json!({"max_messages": 20})).await;
    assert!(polled.messages.len() <= 20);
    assert!(
        polled.messages.iter().any(|message| message.partition == 1),
        "the quiet partition is not starved by the busy one"
    );
    let (status, _) = server.commit("g", &polled.commit_body(&member.id)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Drain, then a long poll answers as soon as a message arrives.
    let drained = consume(&server, "g", &member.id, 501 - polled.messages.len()).await;
    assert_eq!(drained.len() + polled.messages.len(), 501);
    let started = Instant::now();
    let waiting = {
        let url = server.url(&format!("/v1/groups/g/members/{}/poll", member.id));
        tokio::spawn(async move {
            common::client()
                .post(url)
                .json(&json!({"max_wait_ms": 20_000}))
                .send()
                .await
                .expect("long poll")
                .json::<Value>()
                .await
                .expect("poll answer")
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    produce_ids(&server, "orders", 2, 1000..1001).await;
    let answer = waiting.await.expect("long poll task");
    assert_eq!(
        answer["messages"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_auto_commit_polls_of_one_member_never_deliver_a_message_twice() {
    let server = Server::start().await;
    topic_with(&server, "orders", 1).await;
    produce_ids(&server, "orders", 1, 0..300).await;
    let member = server.join_group("g", &join_body(10_000)).await;
    let mut pollers = Vec::new();
    for _ in 0..3 {
        let url = server.url(&format!("/v1/groups/g/members/{}/poll", member.id));
        pollers.push(tokio::spawn(async move {
            let client = common::client();
            let mut offsets = Vec::new();
            for _ in 0..40 {
                let answer: Value = client
                    .post(&url)
                    .json(&json!({"max_messages": 7, "auto_commit": true}))
                    .send()
                    .await
                    .expect("poll")
                    .json()
                    .await
                    .expect("answer");
                offsets.extend(
                    answer["messages"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .map(|message| message["offset"].as_u64().unwrap()),
                );
            }
            offsets
        }));
    }
    let mut all = Vec::new();
    for poller in pollers {
        all.extend(poller.await.expect("poller"));
    }
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "a message was delivered twice");
    // Each auto-commit moved the committed offset past exactly what its poll answered.
    let committed = server.committed("g", "orders", 0).await.unwrap_or(0);
    assert_eq!(distinct, (0..committed).collect::<BTreeSet<u64>>());
    assert!(committed > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_starts_at_the_end_and_added_partitions_are_assigned() {
    let server = Server::start().await;
    topic_with(&server, "orders", 2).await;
    produce_ids(&server, "orders", 2, 0..10).await;
    let body = json!({"topics": ["orders"], "auto_offset_reset": "latest"});
    let first = server.join_group("g", &body).await;
    let polled = poll_ok(&server, "g", &first.id, json!({})).await;
    assert!(polled.messages.is_empty(), "latest skips what was there");
    produce_ids(&server, "orders", 2, 10..14).await;
    // The start `latest` chose was recorded: a poll without a cursor starts there too.
    let polled = poll_ok(&server, "g", &first.id, json!({"max_wait_ms": 1000})).await;
    let mut ids: Vec<u64> = polled
        .messages
        .iter()
        .map(|message| id_of(&message.value))
        .collect();
    if ids.len() < 4 {
        let more = poll_ok(
            &server,
            "g",
            &first.id,
            polled.next_poll(json!({"max_wait_ms": 1000})),
        )
        .await;
        ids.extend(more.messages.iter().map(|message| id_of(&message.value)));
    }
    ids.sort();
    assert_eq!(ids, vec![10, 11, 12, 13]);

    let second = server.join_group("g", &body).await;
    assert_eq!(second.assignments.len(), 1);
    let grown = server
        .patch_json("/v1/topics/orders", &json!({"partitions": 4}))
        .await;
    assert_eq!(grown.status(), StatusCode::OK);
    let (first, second) = poll(DEADLINE, EVERY, || async {
        let first = server
            .heartbeat("g", &first.id)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let second = server
            .heartbeat("g", &second.id)
            .await
            .map_err(|e| format!("{e:?}"))?;
        if first.assignments.len() == 2 && second.assignments.len() == 2 {
            Ok((first, second))
        } else {
            Err(format!("not rebalanced yet: {first:?} {second:?}"))
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    assert_eq!(first.generation, 3);
    assert_partitioned(&[&first, &second], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_group_requests_get_clear_errors_and_change_nothing() {
    let server = Server::start().await;
    topic_with(&server, "orders", 1).await;
    let cases: Vec<(&str, Value, StatusCode, &str)> = vec![
        (
            "/v1/groups/g/members",
            json!({"topics": ["nope"]}),
            StatusCode::NOT_FOUND,
            "topic_not_found",
        ),
        (
            "/v1/groups/g/members",
            json!({"topics": []}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/groups/g/members",
            json!({"topics": ["orders"], "session_timeout_ms": 10}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/groups/g/members",
            json!({"topics": ["orders"], "auto_offset_reset": "middle"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/groups/g/members",
            json!({"topics": ["orders"], "surprise": 1}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/groups/bad%20name/members",
            json!({"topics": ["orders"]}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/groups/g/members/nobody/heartbeat",
            json!({}),
            StatusCode::NOT_FOUND,
            "unknown_member",
        ),
        (
            "/v1/groups/g/members/nobody/poll",
            json!({}),
            StatusCode::NOT_FOUND,
            "unknown_member",
        ),
        (
            "/v1/groups/g/offsets",
            json!({"member_id": "nobody", "generation": 1, "offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}),
            StatusCode::NOT_FOUND,
            "unknown_member",
        ),
        (
            "/v1/groups/g/offsets",
            json!({"member_id": "nobody", "generation": 1, "offsets": []}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "/v1/groups/g/offsets/reset",
            json!({"to": "earliest"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
    ];
    for (path, body, status, code) in cases {
        let response = server.post_json(path, &body).await;
        let problem = server.expect_problem(response, status, code).await;
        assert!(!problem["detail"].as_str().unwrap_or_default().is_empty());
    }
    let member = server.join_group("g", &json!({"topics": ["orders"]})).await;
    for body in [
        json!({"max_messages": 0}),
        json!({"max_wait_ms": 60_001}),
        json!({"cursor": "not a cursor!"}),
        json!({"cursor": "AAAA"}),
        json!({"cursor": "A".repeat(65_537)}),
    ] {
        let response = server
            .post_json(&format!("/v1/groups/g/members/{}/poll", member.id), &body)
            .await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    let missing = server.get("/v1/groups/other").await;
    server
        .expect_problem(missing, StatusCode::NOT_FOUND, "group_not_found")
        .await;
    let (_, listed) = server.json(server.get("/v1/groups").await).await;
    assert_eq!(
        listed["groups"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let described = server.describe_group("g").await;
    assert_eq!(
        described["generation"], 1,
        "refused requests changed nothing"
    );
}
