//! Availability while nodes are down, black box, on three real nodes: the metadata group
//! elects a new leader when its leader dies, so topics can still be created; a partition that
//! lost the majority of its replicas answers 503 `no_leader` with `Retry-After` instead of
//! hanging (through a follower), or 503/504 within the produce timeout (through the stranded
//! leader itself), and takes writes again once a majority is back, without losing what was
//! acknowledged.
//!
//! The harness (`common::cluster`) runs one cluster at a time, so these tests run one after the
//! other. Every message a test sends carries a unique id, so the log can be checked exactly.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::book::{batch, produce_ids, Book};
use crate::common::cluster::{
    assert_placement, create_replicated, messages_url, partition_of, produce_client, sorted_ids,
    Stored, TestCluster, CATCH_UP_DEADLINE, ELECTION_DEADLINE,
};
use crate::common::{poll, PROBLEM_JSON};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Sends a batch of 3 messages (ids `{prefix}-0..3`) whose outcome the test expects to be
/// unknown, booked as sent and unacknowledged; answers the response and how long it took.
async fn post_unacknowledged(
    cluster: &TestCluster,
    client: &reqwest::Client,
    book: &mut Book,
    url: &str,
    prefix: &str,
    situation: &str,
) -> (reqwest::Response, std::time::Duration) {
    let ids: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
    book.sent.extend(ids.iter().cloned());
    book.unacknowledged.extend(ids.iter().cloned());
    let sent_at = Instant::now();
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(batch(&ids, 0).to_string())
        .send()
        .await
        .unwrap_or_else(|err| cluster.fail(&format!("POST {url} {situation}: {err}")));
    (response, sent_at.elapsed())
}

#[tokio::test]
async fn metadata_leader_failover_allows_topic_creation() {
    let mut cluster = TestCluster::start(3).await;
    let old = cluster.metadata_leader().await;
    cluster.kill(old);
    let survivors: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let via = survivors[0];

    // The survivors elect a new metadata leader and report the killed node down.
    poll(ELECTION_DEADLINE, Duration::from_millis(100), || async {
        let view = cluster.cluster_view(via).await;
        let settled = view.as_ref().is_ok_and(|view| {
            let leader = view["metadata_leader"].as_u64();
            let down = view["nodes"]
                .as_array()
                .and_then(|nodes| nodes.iter().find(|n| n["id"] == old))
                .is_some_and(|n| n["status"] == "down");
            leader.is_some_and(|l| survivors.contains(&l)) && down
        });
        if settled {
            Ok(())
        } else {
            Err(format!("{view:?}"))
        }
    })
    .await
    .unwrap_or_else(|view| {
        panic!("no new metadata leader or node {old} not down within {ELECTION_DEADLINE:?}: {view}")
    });

    // Topic creation through a survivor succeeds (after 503s while the metadata group elects).
    let topic = "born-after-failover";
    let body = json!({"name": topic, "partitions": 2, "replication_factor": 2});
    let client = produce_client();
    // Whether an earlier attempt may have created the topic.
    let unknown_outcome = Cell::new(false);
    let created = poll(ELECTION_DEADLINE, Duration::from_millis(250), || async {
        let attempt = client
            .post(cluster.node(via).url("/v1/topics"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        match attempt {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                // 200: a retry found the topic an earlier attempt (with an unknown outcome)
                // created, exactly as asked.
                if status == StatusCode::CREATED
                    || (status == StatusCode::OK && unknown_outcome.get())
                {
                    return Ok(answer);
                }
                if status != StatusCode::SERVICE_UNAVAILABLE
                    && status != StatusCode::GATEWAY_TIMEOUT
                {
                    panic!("creating {topic} via node {via}: {status}: {text}");
                }
                if status == StatusCode::GATEWAY_TIMEOUT {
                    unknown_outcome.set(true);
                }
                Err(format!("{status}: {text}"))
            }
            Err(err) => {
                unknown_outcome.set(true);
                Err(err.to_string())
            }
        }
    })
    .await
    .unwrap_or_else(|last| panic!("creating {topic} via node {via} still fails: {last}"));
    assert_eq!(created["replication_factor"], 2, "{created}");
    for partition in 0..2 {
        let view = partition_of(&created, partition).unwrap_or_else(|e| panic!("{e}"));
        assert_placement(&view, 2, &[1, 2, 3]);
    }

    // The new topic takes writes and reads through both survivors.
    let produce_urls: Vec<String> = vec![messages_url(&cluster, via, topic)];
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    for partition in 0..2u32 {
        let ids: Vec<String> = (0..5).map(|i| format!("new-{partition}-{i}")).collect();
        let book = books.entry(partition).or_default();
        produce_ids(&client, book, &produce_urls, partition, ids).await;
    }
    let mut reads: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for partition in 0..2u32 {
        let mut first: Option<Vec<Stored>> = None;
        for &reader in &survivors {
            let stored = cluster.read_partition(reader, topic, partition).await;
            books[&partition].check(&stored);
            if let Some(first) = &first {
                assert_eq!(
                    first, &stored,
                    "{topic}/{partition}: survivors read differently"
                );
            }
            first.get_or_insert(stored);
        }
        reads.insert(partition, first.unwrap());
    }

    // The restarted node learns about the topic and serves it.
    cluster.restart(old).await;
    let described = poll(CATCH_UP_DEADLINE, Duration::from_millis(200), || {
        cluster.topic_view(old, topic)
    })
    .await
    .unwrap_or_else(|err| panic!("restarted node {old} does not know {topic}: {err}"));
    let survivor_view = cluster
        .topic_view(via, topic)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for partition in 0..2 {
        let a = partition_of(&described, partition).unwrap();
        let b = partition_of(&survivor_view, partition).unwrap();
        assert_eq!(
            sorted_ids(&a["replicas"]),
            sorted_ids(&b["replicas"]),
            "{described} vs {survivor_view}"
        );
    }
    let listed = cluster
        .get_ok(old, "/v1/topics")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        listed["topics"]
            .as_array()
            .is_some_and(|topics| topics.iter().any(|t| t["name"] == topic)),
        "restarted node {old} does not list {topic}: {listed}"
    );
    for partition in 0..2u32 {
        let stored = cluster.read_partition(old, topic, partition).await;
        assert_eq!(
            stored, reads[&partition],
            "{topic}/{partition} via node {old}"
        );
    }
    let everyone: BTreeSet<u64> = (1..=3).collect();
    cluster.wait_for_members(&everyone, CATCH_UP_DEADLINE).await;
}

#[tokio::test]
async fn lost_quorum_answers_no_leader_with_retry_after() {
    /// How long a request waits for a leader (`--leader-wait-ms`) before 503 `no_leader`.
    const LEADER_WAIT_MS: &str = "2000";
    /// How long the 503 may take: the leader wait, with room for a slow machine.
    const NO_LEADER_BOUND: Duration = Duration::from_secs(10);

    let mut cluster = TestCluster::start_with(3, &["--leader-wait-ms", LEADER_WAIT_MS]).await;
    let topic = "majority";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let followers = cluster.others_than(leader);
    let (survivor, other) = (followers[0], followers[1]);

    let client = produce_client();
    let mut book = Book::default();
    for via in 1..=3 {
        let urls = vec![messages_url(&cluster, via, topic)];
        let ids: Vec<String> = (0..5).map(|i| format!("before-{via}-{i}")).collect();
        produce_ids(&client, &mut book, &urls, 0, ids).await;
    }

    // Two of the three replicas die, the leader among them: no majority is left.
    cluster.kill(leader);
    cluster.kill(other);

    // A produce through the survivor is refused after the leader wait, not left hanging.
    let url = messages_url(&cluster, survivor, topic);
    let (response, took) = post_unacknowledged(
        &cluster,
        &client,
        &mut book,
        &url,
        "no-quorum",
        "without a majority",
    )
    .await;
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("<not text>").to_string())
    };
    let retry_after = header("retry-after");
    let content_type = header("content-type").unwrap_or_default();
    let text = response.text().await.unwrap_or_default();
    eprintln!("without a majority, node {survivor} answered {status} after {took:?}: {text}");
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "POST {url} without a majority, after {took:?}: {text}"
    );
    assert!(
        content_type.starts_with(PROBLEM_JSON),
        "content-type {content_type:?}: {text}"
    );
    let problem: Value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("the 503 is not JSON ({err}): {text}"));
    assert_eq!(problem["code"], "no_leader", "{problem}");
    assert_eq!(problem["status"], 503, "{problem}");
    let seconds: u64 = retry_after
        .as_deref()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("Retry-After is {retry_after:?}, not a number of seconds"));
    assert!(seconds >= 1, "Retry-After: {seconds}");
    assert!(
        took < NO_LEADER_BOUND,
        "the 503 took {took:?} (leader wait {LEADER_WAIT_MS} ms)"
    );

    // One of the dead nodes comes back (with its own flags, the leader wait included): a
    // majority again, so a produce through the survivor succeeds, after 503s while the
    // partition elects a leader.
    cluster.restart(leader).await;
    let urls = vec![url, messages_url(&cluster, leader, topic)];
    let back_at = Instant::now();
    let ids: Vec<String> = (0..5).map(|i| format!("after-{i}")).collect();
    produce_ids(&client, &mut book, &urls, 0, ids).await;
    eprintln!(
        "node {leader} restarted; a produce was acknowledged {:?} later",
        back_at.elapsed()
    );

    // Nothing acknowledged is lost, and both live nodes read the same log.
    let stored = cluster.read_partition(survivor, topic, 0).await;
    book.check(&stored);
    let through_restarted = cluster.read_partition(leader, topic, 0).await;
    assert_eq!(
        through_restarted, stored,
        "nodes {leader} and {survivor} read differently"
    );
}

#[tokio::test]
async fn a_leader_without_its_quorum_answers_instead_of_hanging() {
    /// `--leader-wait-ms` and `--produce-timeout-ms` of every node.
    const LEADER_WAIT_MS: &str = "2000";
    const PRODUCE_TIMEOUT_MS: &str = "3000";
    /// The answer may take the lease expiry plus the longer of the two waits, with room.
    const ANSWER_BOUND: Duration = Duration::from_secs(15);

    let mut cluster = TestCluster::start_with(
        3,
        &[
            "--leader-wait-ms",
            LEADER_WAIT_MS,
            "--produce-timeout-ms",
            PRODUCE_TIMEOUT_MS,
        ],
    )
    .await;
    let topic = "stranded";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let followers = cluster.others_than(leader);

    let client = produce_client();
    let mut book = Book::default();
    let url = messages_url(&cluster, leader, topic);
    let ids: Vec<String> = (0..5).map(|i| format!("before-{i}")).collect();
    produce_ids(&client, &mut book, std::slice::from_ref(&url), 0, ids).await;

    // Both followers die: the leader is alive but can commit nothing.
    for follower in &followers {
        cluster.kill(*follower);
    }
    let (response, took) = post_unacknowledged(
        &cluster,
        &client,
        &mut book,
        &url,
        "stranded",
        "without followers",
    )
    .await;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    eprintln!("the leader without followers answered {status} after {took:?}: {text}");
    assert!(
        status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::GATEWAY_TIMEOUT,
        "a leader without its quorum must refuse (503) or time out (504), got {status}: {text}"
    );
    let problem: Value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("the answer is not JSON ({err}): {text}"));
    let code = problem["code"].as_str().unwrap_or_default();
    assert!(
        code == "no_leader" || code == "timeout",
        "unexpected problem code: {problem}"
    );
    assert!(took < ANSWER_BOUND, "the answer took {took:?}");

    // The followers return: writes work again, and nothing acknowledged was lost (the stranded
    // batch may or may not have been written: its outcome was unknown).
    for follower in &followers {
        cluster.restart(*follower).await;
    }
    let ids: Vec<String> = (0..5).map(|i| format!("after-{i}")).collect();
    produce_ids(&client, &mut book, &[url], 0, ids).await;
    let stored = cluster.read_partition(followers[0], topic, 0).await;
    book.check(&stored);
}

/// A metadata leader that lost its quorum answers an admin change within its leader wait (504:
/// the change may still be applied) instead of hanging; once the quorum is back, the same
/// request retried succeeds (201, or 200 if the first attempt was applied after all).
#[tokio::test]
async fn a_metadata_leader_without_its_quorum_answers_and_a_retry_succeeds() {
    const LEADER_WAIT_MS: &str = "2000";
    /// The leader wait, the local apply wait and room for a loaded machine.
    const ANSWER_BOUND: Duration = Duration::from_secs(15);

    let mut cluster = TestCluster::start_with(3, &["--leader-wait-ms", LEADER_WAIT_MS]).await;
    let leader = cluster.metadata_leader().await;
    let others = cluster.others_than(leader);
    for other in &others {
        cluster.kill(*other);
    }
    let client = produce_client();
    let body = json!({"name": "while-alone", "partitions": 2, "replication_factor": 1});
    let url = cluster.node(leader).url("/v1/topics");
    let sent_at = Instant::now();
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|err| cluster.fail(&format!("POST {url} without a quorum: {err}")));
    let took = sent_at.elapsed();
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    eprintln!("the metadata leader without its quorum answered {status} after {took:?}: {text}");
    assert!(
        status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::GATEWAY_TIMEOUT,
        "expected 503 or 504 without a quorum, got {status}: {text}"
    );
    assert!(took < ANSWER_BOUND, "the answer took {took:?}");

    for other in &others {
        cluster.restart(*other).await;
    }
    let text = poll(ELECTION_DEADLINE, Duration::from_millis(250), || async {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        match response {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                if status == StatusCode::CREATED || status == StatusCode::OK {
                    return Ok(text);
                }
                assert!(
                    status == StatusCode::SERVICE_UNAVAILABLE
                        || status == StatusCode::GATEWAY_TIMEOUT,
                    "retrying the create: {status}: {text}"
                );
                Err(format!("{status}: {text}"))
            }
            Err(err) => Err(err.to_string()),
        }
    })
    .await
    .unwrap_or_else(|last| panic!("the retried create still fails: {last}"));
    let topic: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert_eq!(topic["name"], "while-alone", "{text}");
    assert_eq!(
        topic["partitions"].as_array().map(Vec::len),
        Some(2),
        "{text}"
    );
}
