//! Consumer group delivery guarantees on one node, black box: poll answers dropped at random
//! (aborted requests, discarded answers, a client that forgets its cursor) lose no message and
//! never move a committed offset back; a cursor speaks only for its member and for partitions
//! it kept; one poll's bytes are bounded by one budget; a group's metric series go with the
//! group and are capped.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::time::{Duration, Instant};

use crate::common::group_flow::{
    commit_body, committed_offsets, id_of, poll_ok, produce_ids, topic_with,
};
use crate::common::{poll, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_millis(100);

/// A tiny seeded generator (xorshift64*): the test prints its seed, and `HERALD_TEST_SEED`
/// replays one.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }
}

fn seed() -> u64 {
    std::env::var("HERALD_TEST_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| common::now_ms() as u64 | 1)
}

/// A node started with a TOML configuration (kept alive by the returned file).
async fn server_with(toml: &str) -> (Server, tempfile::NamedTempFile) {
    let mut file = tempfile::NamedTempFile::new().expect("a config file");
    file.write_all(toml.as_bytes()).expect("write the config");
    let path = file.path().to_string_lossy().to_string();
    (Server::start_with(&["--config", &path]).await, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_dropped_at_random_lose_no_message_and_commits_never_go_back() {
    const PARTITIONS: u32 = 3;
    const MESSAGES: u64 = 300;
    const ROUNDS: usize = 240;
    let seed = seed();
    eprintln!("seed {seed} (HERALD_TEST_SEED={seed} replays it)");
    let mut random = Random(seed);
    let server = Server::start().await;
    topic_with(&server, "orders", PARTITIONS).await;
    let member = server
        .join_group(
            "g",
            &json!({"topics": ["orders"], "session_timeout_ms": 60_000}),
        )
        .await;
    let url = server.url(&format!("/v1/groups/g/members/{}/poll", member.id));
    let client = common::client();

    let mut produced = 0u64;
    let mut cursor = Value::Null;
    let mut seen = BTreeSet::new();
    let mut uncommitted: BTreeMap<u32, u64> = BTreeMap::new();
    let mut committed_before: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut aborted, mut discarded, mut forgotten, mut kept) = (0, 0, 0, 0);
    let check_commits = |now: &BTreeMap<u64, u64>, before: &BTreeMap<u64, u64>| {
        for (partition, offset) in before {
            let current = now.get(partition).copied().unwrap_or(0);
            assert!(
                current >= *offset,
                "seed {seed}: partition {partition}'s committed offset went back from {offset} to {current}"
            );
        }
    };
    for round in 0..ROUNDS {
        if round % 8 == 0 && produced < MESSAGES {
            produce_ids(&server, "orders", PARTITIONS, produced..produced + 10).await;
            produced += 10;
        }
        let body =
            json!({"max_messages": 1 + random.below(12), "max_wait_ms": 50, "cursor": cursor});
        match random.below(100) {
            // The client gives up before the answer (a timeout, a dropped future).
            0..=24 => {
                aborted += 1;
                let timeout = Duration::from_millis(1 + random.below(40));
                let _ = client.post(&url).timeout(timeout).json(&body).send().await;
            }
            // The answer arrives and is lost anyway (a proxy, a crash before it is handled).
            25..=44 => {
                discarded += 1;
                poll_ok(&server, "g", &member.id, body).await;
            }
            // The client restarts: it forgets its cursor and what it did not commit.
            45..=49 => {
                forgotten += 1;
                cursor = Value::Null;
                uncommitted.clear();
            }
            _ => {
                kept += 1;
                let polled = poll_ok(&server, "g", &member.id, body).await;
                cursor = json!(polled.cursor);
                for message in &polled.messages {
                    seen.insert(id_of(&message.value));
                    let next = uncommitted.entry(message.partition).or_default();
                    *next = (*next).max(message.offset + 1);
                }
                if !uncommitted.is_empty() && random.below(3) == 0 {
                    let body = commit_body(&member.id, polled.generation, &uncommitted);
                    let (status, answer) = server.commit("g", &body).await;
                    assert_eq!(
                        status,
                        StatusCode::NO_CONTENT,
                        "seed {seed}: commit: {answer}"
                    );
                    uncommitted.clear();
                }
            }
        }
        if round % 20 == 0 {
            let now = committed_offsets(&server, "g").await;
            check_commits(&now, &committed_before);
            committed_before = now;
        }
    }
    // Then the client keeps every answer until it has seen everything.
    let deadline = Instant::now() + DEADLINE;
    while (seen.len() as u64) < produced && Instant::now() < deadline {
        let polled = poll_ok(
            &server,
            "g",
            &member.id,
            json!({"max_messages": 100, "max_wait_ms": 100, "cursor": cursor}),
        )
        .await;
        cursor = json!(polled.cursor);
        seen.extend(polled.messages.iter().map(|message| id_of(&message.value)));
    }
    let missing: Vec<u64> = (0..produced).filter(|id| !seen.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: {} of {produced} messages never reached the group: {missing:?} \
         ({aborted} aborted, {discarded} discarded, {forgotten} forgotten, {kept} kept)",
        missing.len()
    );
    assert!(
        aborted > 0 && discarded > 0 && kept > 0,
        "seed {seed}: every kind of round ran"
    );
    check_commits(&committed_offsets(&server, "g").await, &committed_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_speaks_only_for_its_member_and_the_partitions_it_kept() {
    let server = Server::start().await;
    topic_with(&server, "orders", 2).await;
    produce_ids(&server, "orders", 2, 0..20).await;
    let join = json!({"topics": ["orders"], "session_timeout_ms": 30_000});
    let first = server.join_group("g", &join).await;
    let read = poll_ok(&server, "g", &first.id, json!({"max_messages": 100})).await;
    assert_eq!(read.messages.len(), 20);
    // Another member's cursor is ignored: that poll starts at the committed offsets.
    let other = server.join_group("other", &join).await;
    let ignored = poll_ok(
        &server,
        "other",
        &other.id,
        read.next_poll(json!({"max_messages": 100})),
    )
    .await;
    assert_eq!(
        ignored.messages.len(),
        20,
        "another member's cursor skipped messages"
    );

    // A second member takes one partition and leaves: the partition comes back to the first
    // member, whose old cursor no longer speaks for it (its client may have dropped the work
    // when the partition went away), so it restarts at the committed offset (none: earliest).
    let second = server.join_group("g", &join).await;
    let returned = second.assignments.iter().next().expect("a partition").1;
    let (status, _) = server
        .json(
            server
                .delete(&format!("/v1/groups/g/members/{}", second.id))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let again = poll_ok(
        &server,
        "g",
        &first.id,
        read.next_poll(json!({"max_messages": 100})),
    )
    .await;
    let partitions: BTreeSet<u32> = again
        .messages
        .iter()
        .map(|message| message.partition)
        .collect();
    assert_eq!(
        partitions,
        BTreeSet::from([returned]),
        "only the partition that went away is read again: {:?}",
        again.messages
    );
    assert_eq!(again.messages.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_poll_reads_one_byte_budget_across_all_its_partitions() {
    const BUDGET: usize = 65_536;
    let (server, _config) = server_with(&format!("fetch_max_bytes = {BUDGET}\n")).await;
    topic_with(&server, "wide", 8).await;
    // 8 partitions of 16 messages of 4000 characters: one partition's worth is one budget.
    let text = "x".repeat(4000);
    for partition in 0..8 {
        let messages: Vec<Value> = (0..16)
            .map(|_| json!({"partition": partition, "value": text}))
            .collect();
        server
            .produce_ok("wide", &json!({ "messages": messages }))
            .await;
    }
    let member = server.join_group("g", &json!({"topics": ["wide"]})).await;
    assert_eq!(member.assignments.len(), 8);
    let (mut cursor, mut read, mut polls) = (Value::Null, 0, 0);
    while read < 8 * 16 {
        polls += 1;
        assert!(
            polls <= 50,
            "the polls stopped progressing after {read} messages"
        );
        let polled = poll_ok(
            &server,
            "g",
            &member.id,
            json!({"max_messages": 10_000, "cursor": cursor}),
        )
        .await;
        let bytes: usize = polled
            .messages
            .iter()
            .map(|message| message.value.len())
            .sum();
        assert!(
            bytes <= BUDGET,
            "one poll answered {bytes} bytes in {} messages, over the budget of {BUDGET}",
            polled.messages.len()
        );
        assert!(!polled.messages.is_empty(), "poll {polls} answered nothing");
        read += polled.messages.len();
        cursor = json!(polled.cursor);
    }
    assert_eq!(read, 8 * 16, "each message once");

    // A message larger than the budget still goes, alone.
    topic_with(&server, "big", 1).await;
    let big = "y".repeat(100_000);
    server
        .produce_ok(
            "big",
            &json!({"messages": [{"value": big}, {"value": "small"}, {"value": "small"}]}),
        )
        .await;
    let member = server.join_group("b", &json!({"topics": ["big"]})).await;
    let first = poll_ok(&server, "b", &member.id, json!({"max_messages": 100})).await;
    assert_eq!(first.messages.len(), 1);
    assert_eq!(first.messages[0].value.len(), 100_002);
    let rest = poll_ok(
        &server,
        "b",
        &member.id,
        first.next_poll(json!({"max_messages": 100})),
    )
    .await;
    assert_eq!(rest.messages.len(), 2);
}

/// The `/metrics` lines of one metric.
async fn series(server: &Server, name: &str) -> Vec<String> {
    let text = server
        .get("/metrics")
        .await
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|line| {
            !line.starts_with('#')
                && (line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} ")))
        })
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_metric_series_go_with_it_and_only_so_many_groups_get_series() {
    let (server, _config) = server_with("[groups]\nmax_metric_groups = 2\n").await;
    topic_with(&server, "orders", 1).await;
    produce_ids(&server, "orders", 1, 0..10).await;
    let join = json!({"topics": ["orders"], "session_timeout_ms": 30_000});
    let mut members = BTreeMap::new();
    for group in ["m-a", "m-b", "m-c"] {
        members.insert(group, server.join_group(group, &join).await);
    }
    let a = &members["m-a"];
    let (status, _) = server
        .commit(
            "m-a",
            &commit_body(&a.id, a.generation, &BTreeMap::from([(0, 4)])),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let listed = poll(DEADLINE, EVERY, || async {
        let lines = [
            series(&server, "herald_group_members").await,
            series(&server, "herald_group_lag").await,
            series(&server, "herald_groups").await,
            series(&server, "herald_group_series_omitted").await,
        ];
        let expected = [
            vec![
                "herald_group_members{group=\"m-a\"} 1".to_string(),
                "herald_group_members{group=\"m-b\"} 1".to_string(),
            ],
            vec!["herald_group_lag{group=\"m-a\",topic=\"orders\"} 6".to_string()],
            vec!["herald_groups 3".to_string()],
            vec!["herald_group_series_omitted 1".to_string()],
        ];
        if lines == expected {
            Ok(())
        } else {
            Err(format!("{lines:?}"))
        }
    })
    .await;
    listed.unwrap_or_else(|seen| server.fail(&format!("the capped series: {seen}")));

    // m-a is deleted (its member leaves, its offsets go with the group); m-b's only member
    // leaves, and with no offsets the group disappears: their series go too.
    for group in ["m-a", "m-b"] {
        let path = format!("/v1/groups/{group}/members/{}", members[group].id);
        assert_eq!(server.delete(&path).await.status(), StatusCode::NO_CONTENT);
    }
    assert_eq!(
        server.delete("/v1/groups/m-a").await.status(),
        StatusCode::NO_CONTENT
    );
    let gone = poll(DEADLINE, EVERY, || async {
        let lines = [
            series(&server, "herald_group_members").await,
            series(&server, "herald_group_generation").await,
            series(&server, "herald_group_lag").await,
            series(&server, "herald_groups").await,
        ];
        let expected = [
            vec!["herald_group_members{group=\"m-c\"} 1".to_string()],
            vec!["herald_group_generation{group=\"m-c\"} 1".to_string()],
            vec![],
            vec!["herald_groups 1".to_string()],
        ];
        if lines == expected {
            Ok(())
        } else {
            Err(format!("{lines:?}"))
        }
    })
    .await;
    gone.unwrap_or_else(|seen| server.fail(&format!("after the deletes: {seen}")));
}
