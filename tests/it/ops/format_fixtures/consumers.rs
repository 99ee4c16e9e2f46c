//! Consumer groups and subscriptions: committed offsets, leases, delays, dead letters and the
//! redrive job, with the time-based state judged by the times the fixture recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::api::{Api, Tokens};
use super::{array, int, text, without, ACT_DEADLINE, CLOCK_MARGIN_MS};
use crate::common::{now_ms, poll};

/// The groups' committed offsets are the fixture's, a member left alive in it expires, and new
/// members continue from the committed offsets.
pub(super) async fn check_groups(api: &Api<'_>, tokens: &Tokens, expected: &Value) {
    let admin = &tokens["admin"];
    let consumer = &tokens["fixture-consumer"];
    for (group, recorded) in expected["groups"].as_object().expect("groups") {
        let path = format!("/v1/groups/{group}");
        let described = api.get(&path, admin).await;
        assert_eq!(
            described["offsets"], recorded["offsets"],
            "{group}: offsets"
        );
        if array(&recorded["members"]).is_empty() {
            assert_eq!(&described, recorded, "{group}");
        } else {
            // Alive when the fixture was made: it gets a session from the start, then expires.
            let members = &described["members"];
            assert!(
                members == &recorded["members"] || array(members).is_empty(),
                "{group}: members {members}, recorded {}",
                recorded["members"]
            );
            let expired = poll(ACT_DEADLINE, Duration::from_millis(250), || async {
                let described = api.get(&path, admin).await;
                if array(&described["members"]).is_empty() {
                    Ok(())
                } else {
                    Err(described.to_string())
                }
            })
            .await;
            if let Err(described) = expired {
                panic!("{group}: the fixture's member did not expire: {described}");
            }
        }

        // A new member reads from the committed offsets.
        let topics: BTreeSet<&str> = array(&recorded["offsets"])
            .iter()
            .map(|o| text(&o["topic"]))
            .collect();
        let mut want: Vec<Value> = Vec::new();
        for offset in array(&recorded["offsets"]) {
            let topic = text(&offset["topic"]);
            let messages = &expected["topics"][topic]["partitions"]
                [offset["partition"].to_string()]["messages"];
            want.extend(
                array(messages)
                    .iter()
                    .filter(|m| int(&m["offset"]) >= int(&offset["committed"]))
                    .cloned(),
            );
        }
        let joined = api
            .post(
                &format!("/v1/groups/{group}/members"),
                consumer,
                &json!({"topics": topics, "session_timeout_ms": 10000}),
            )
            .await;
        let member = text(&joined["member_id"]).to_string();
        let mut got: Vec<Value> = Vec::new();
        let mut cursor = Value::Null;
        let deadline = Instant::now() + ACT_DEADLINE;
        while got.len() < want.len() {
            assert!(
                Instant::now() < deadline,
                "{group}: a new member polled {got:?}, not {want:?}"
            );
            let polled = api
                .post(
                    &format!("/v1/groups/{group}/members/{member}/poll"),
                    consumer,
                    &json!({"max_messages": 100, "max_wait_ms": 500, "cursor": cursor}),
                )
                .await;
            got.extend(array(&polled["messages"]).iter().cloned());
            cursor = polled["cursor"].clone();
        }
        let order = |m: &Value| {
            (
                text(&m["topic"]).to_string(),
                int(&m["partition"]),
                int(&m["offset"]),
            )
        };
        got.sort_by_key(order);
        want.sort_by_key(order);
        assert_eq!(got, want, "{group}: what a new member polls");
        api.expect(
            StatusCode::NO_CONTENT,
            Method::DELETE,
            &format!("/v1/groups/{group}/members/{member}"),
            consumer,
            None,
        )
        .await;
    }
}

/// How a recorded time compares with now: waits while now is too close to tell.
async fn passed(what: &str, earliest_ms: i64, latest_ms: i64) -> bool {
    let now = now_ms();
    if now < earliest_ms - CLOCK_MARGIN_MS {
        return false;
    }
    if now <= latest_ms + CLOCK_MARGIN_MS {
        let wait = latest_ms + CLOCK_MARGIN_MS + 1 - now;
        eprintln!("{what} is due about now: waiting {wait} ms until it has passed");
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    true
}

/// The subscriptions' settings, counts and redrive job are the fixture's; its lease and its nack
/// delay are still held or redelivered (one more attempt) as their times say; the message
/// delayed for ever stays; the redriven dead letters are delivered; acks work.
pub(super) async fn check_subscriptions(api: &Api<'_>, tokens: &Tokens, expected: &Value) {
    let admin = &tokens["admin"];
    let consumer = &tokens["fixture-consumer"];
    let timely = [
        "oldest_unacked_age_seconds",
        "backlog",
        "in_flight",
        "delayed",
    ];
    for (name, recorded) in expected["subscriptions"]
        .as_object()
        .expect("subscriptions")
    {
        let described = api.get(&format!("/v1/subscriptions/{name}"), admin).await;
        assert_eq!(
            without(&described, &timely),
            without(&recorded["described"], &timely),
            "{name}"
        );
        assert_eq!(
            described["backlog"], recorded["described"]["backlog"],
            "{name}: backlog"
        );
        if let Some(redrive) = recorded.get("redrive") {
            let got = api
                .get(&format!("/v1/subscriptions/{name}/redrive"), admin)
                .await;
            assert_eq!(&got, redrive, "{name}: the redrive job");
        }
    }
    let keyed = &expected["subscriptions"]["jobs-keyed"]["described"];
    let described = api.get("/v1/subscriptions/jobs-keyed", admin).await;
    assert_eq!(
        without(&described, &["oldest_unacked_age_seconds"]),
        without(keyed, &["oldest_unacked_age_seconds"]),
        "jobs-keyed was never pulled: its counts do not depend on time"
    );

    let sub = "/v1/subscriptions/jobs-workers";
    // Per offset, whether the time its lease or its nack delay named has passed.
    let mut leases: BTreeMap<i64, (&Value, bool)> = BTreeMap::new();
    for (name, lease) in expected["leases"].as_object().expect("leases") {
        let deadline = int(&lease["ack_deadline_ms"]);
        let from = int(&lease["leased_from_ms"]) + deadline;
        let to = int(&lease["leased_to_ms"]) + deadline;
        let expired = passed(&format!("{name}'s lease"), from, to).await;
        leases.insert(int(&lease["offset"]), (lease, expired));
    }
    let mut nacks: BTreeMap<i64, (&Value, bool)> = BTreeMap::new();
    for (name, nack) in expected["nacks"].as_object().expect("nacks") {
        let delay = int(&nack["delay_ms"]);
        let from = int(&nack["nacked_from_ms"]) + delay;
        let to = int(&nack["nacked_to_ms"]) + delay;
        let due = passed(&format!("{name}'s nack delay"), from, to).await;
        nacks.insert(int(&nack["offset"]), (nack, due));
    }
    eprintln!(
        "leases expired: {:?}; nack delays over: {:?}",
        leases
            .iter()
            .map(|(offset, (_, expired))| (offset, expired))
            .collect::<Vec<_>>(),
        nacks
            .iter()
            .map(|(offset, (_, due))| (offset, due))
            .collect::<Vec<_>>()
    );
    // Waiting for their time: the nacks not due yet, and the message delayed for ever.
    let delayed = 1 + nacks.values().filter(|(_, due)| !due).count() as i64;
    if leases.values().all(|(_, expired)| !expired) {
        let described = api.get(sub, admin).await;
        assert_eq!(
            int(&described["in_flight"]),
            leases.len() as i64,
            "{described}"
        );
        assert_eq!(int(&described["delayed"]), delayed, "{described}");
    }

    // The ack id of a fixture's lease acks it while the lease lives, and is refused after.
    for (lease, expired) in leases.values() {
        let old_ack = text(&lease["ack_id"]);
        let acked = api
            .post(
                &format!("{sub}/ack"),
                consumer,
                &json!({"ack_ids": [old_ack]}),
            )
            .await;
        let (took, refused) = if *expired {
            (json!([]), json!([old_ack]))
        } else {
            (json!([old_ack]), json!([]))
        };
        assert_eq!(acked["acked"], took, "a lease of the fixture: {acked}");
        assert_eq!(acked["expired"], refused, "a lease of the fixture: {acked}");
    }

    // What a pull delivers now: the redriven dead letters, and what time released, with one
    // more delivery attempt; never the message delayed for ever.
    let jobs = array(&expected["topics"]["jobs"]["partitions"]["0"]["messages"]);
    let message_at = |offset: i64| jobs.iter().find(|m| int(&m["offset"]) == offset).cloned();
    let mut want: BTreeMap<i64, i64> = BTreeMap::new(); // offset -> delivery attempt
    for message in jobs {
        if message["headers"].get("herald-redrive-count").is_some() {
            want.insert(int(&message["offset"]), 1);
        }
    }
    for (offset, (state, released)) in leases.iter().chain(nacks.iter()) {
        if *released {
            want.insert(*offset, int(&state["delivery_attempt"]) + 1);
        }
    }
    let later = int(&expected["delayed_for_ever"]["offset"]);
    assert!(
        int(&expected["delayed_for_ever"]["deliver_at"]) > now_ms(),
        "the message delayed for ever is due: {}",
        expected["delayed_for_ever"]
    );
    let mut got: BTreeMap<i64, i64> = BTreeMap::new();
    let mut ack_ids = Vec::new();
    let pull_deadline = Instant::now() + ACT_DEADLINE;
    while got.len() < want.len() {
        assert!(
            Instant::now() < pull_deadline,
            "jobs-workers delivered {got:?}, not {want:?}"
        );
        let pulled = api
            .post(
                &format!("{sub}/pull"),
                consumer,
                &json!({"max_messages": 10, "max_wait_ms": 1000}),
            )
            .await;
        for lease in array(&pulled["messages"]) {
            let offset = int(&lease["message"]["offset"]);
            assert_ne!(offset, later, "the message delayed for ever was delivered");
            assert_eq!(
                Some(&lease["message"]),
                message_at(offset).as_ref(),
                "a delivered message is not the fixture's"
            );
            assert!(
                got.insert(offset, int(&lease["delivery_attempt"]))
                    .is_none(),
                "offset {offset} was delivered twice"
            );
            ack_ids.push(text(&lease["ack_id"]).to_string());
        }
    }
    assert_eq!(
        got, want,
        "jobs-workers: (offset, delivery attempt) delivered"
    );
    let more = api
        .post(
            &format!("{sub}/pull"),
            consumer,
            &json!({"max_messages": 10, "max_wait_ms": 500}),
        )
        .await;
    assert_eq!(more["messages"], json!([]), "nothing else is due");
    let live_leases = leases.values().filter(|(_, expired)| !expired).count() as i64;
    let described = api.get(sub, admin).await;
    assert_eq!(
        int(&described["in_flight"]),
        got.len() as i64,
        "the live leases of the fixture were acked above: {described}"
    );
    assert_eq!(int(&described["delayed"]), delayed, "{described}");
    assert_eq!(
        int(&described["backlog"]),
        int(&expected["subscriptions"]["jobs-workers"]["described"]["backlog"]) - live_leases,
        "{described}"
    );
    assert_eq!(int(&described["dead_lettered"]), 2, "{described}");
    let acked = api
        .post(
            &format!("{sub}/ack"),
            consumer,
            &json!({"ack_ids": ack_ids}),
        )
        .await;
    assert_eq!(
        array(&acked["acked"]).len(),
        ack_ids.len(),
        "acks of the new leases: {acked}"
    );
    let described = api.get(sub, admin).await;
    assert_eq!(int(&described["in_flight"]), 0, "{described}");
    assert_eq!(int(&described["backlog"]), delayed, "{described}");
}
