//! What one authenticated tenant cannot do to another, or to the node's own records (issue 30):
//! read the audit log through topic routes, drive another principal's group member, keep a
//! deleted client's socket or stream, crash a request with a name the policy cannot match, or
//! re-register (and fence) another team's named producer.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::{ws_with_token, Secured};

/// Every place a topic is named for reading answers 400 for an internal one.
fn assert_reserved(what: &str, status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
    assert_eq!(body["code"], "invalid_request", "{what}: {body}");
}

/// The audit log is an internal topic: no role, not even `admin`, reads or describes `__audit`
/// by fetch, offsets, event streams, WebSocket or group joins, nor makes a subscription of it.
/// It is read through `GET /v1/audit` (with `view` on `audit:log`) only.
#[tokio::test]
async fn internal_topics_are_not_readable_through_topic_routes() {
    use crate::common::ws::{next_frame, send};
    let secured = Secured::start(&["admin", "consumer", "viewer"], &[]).await;
    let admin = secured.token("admin").to_string();
    // A refused request is audited, which makes the audit log's topic.
    let (status, _, _) = secured
        .call(
            Method::DELETE,
            "/v1/topics/payments",
            Some(secured.token("viewer")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    crate::common::poll(Duration::from_secs(20), Duration::from_millis(100), || {
        let (secured, admin) = (&secured, &admin);
        async move {
            let (status, _, page) = secured
                .call(Method::GET, "/v1/audit", Some(admin), None)
                .await;
            match page["events"].as_array() {
                Some(events) if status == StatusCode::OK && !events.is_empty() => Ok(()),
                _ => Err(format!("no audit event yet: {status} {page}")),
            }
        }
    })
    .await
    .unwrap_or_else(|seen| secured.server.fail(&seen));

    for role in ["consumer", "admin"] {
        let token = secured.token(role);
        for (method, path, body) in [
            (
                Method::GET,
                "/v1/topics/__audit/partitions/0/messages?offset=earliest",
                None,
            ),
            (
                Method::GET,
                "/v1/topics/__audit/partitions/0/offsets?timestamp=0",
                None,
            ),
            (Method::GET, "/v1/topics/__audit/events?from=earliest", None),
            (
                Method::POST,
                "/v1/groups/spies/members",
                Some(json!({"topics": ["__audit"]})),
            ),
            (Method::GET, "/v1/groups/spies/events?topics=__audit", None),
        ] {
            let (status, _, answer) = secured
                .call(method.clone(), path, Some(token), body.as_ref())
                .await;
            assert_reserved(&format!("{method} {path} as {role}"), status, &answer);
        }
        let mut socket = ws_with_token(&secured.server, token, false).await;
        for frame in [
            json!({"op": "subscribe", "id": "t", "topic": "__audit", "from": "earliest"}),
            json!({"op": "subscribe", "id": "g", "group": "spies", "topics": ["__audit"]}),
        ] {
            send(&mut socket, frame.clone()).await;
            let answer = next_frame(&mut socket).await;
            assert_eq!(answer["op"], "error", "{frame} as {role}: {answer}");
            assert_eq!(answer["error"]["status"], 400, "{frame}: {answer}");
        }
    }
    for role in ["viewer", "admin"] {
        let (status, _, answer) = secured
            .call(
                Method::GET,
                "/v1/topics/__audit",
                Some(secured.token(role)),
                None,
            )
            .await;
        assert_reserved(&format!("describe as {role}"), status, &answer);
    }
    let (status, _, answer) = secured
        .call(
            Method::PUT,
            "/v1/subscriptions/spy",
            Some(&admin),
            Some(&json!({"topic": "__audit"})),
        )
        .await;
    assert_reserved("a subscription of __audit", status, &answer);
    // The audit log's own route still answers.
    let (status, _, page) = secured
        .call(Method::GET, "/v1/audit", Some(&admin), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
}

/// A group member belongs to the principal that joined it: another principal (which can read
/// the member's id with `view` on the group) is refused its polls, heartbeats, commits and
/// leave, over REST whether it joined over REST or a WebSocket; and each poll checks the
/// member's topic rights as they are now.
#[tokio::test]
async fn a_group_member_belongs_to_the_principal_that_joined_it() {
    use crate::common::ws::{next_frame, send};
    let secured = Secured::start(&["admin", "team-a", "team-b"], &[]).await;
    let admin = secured.token("admin").to_string();
    for topic in ["a-orders", "b-secret"] {
        let (status, _, body) = secured
            .call(
                Method::POST,
                "/v1/topics",
                Some(&admin),
                Some(&json!({"name": topic})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, _, body) = secured
        .call(
            Method::POST,
            "/v1/topics/b-secret/messages",
            Some(&admin),
            Some(&json!({"messages": [{"value": "team b only"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let team_rules = |team: &str| {
        vec![
            (
                team.to_string(),
                format!("topic:{}-*", &team[5..]),
                "consume",
            ),
            (team.to_string(), "group:*".to_string(), "consume"),
            (team.to_string(), "group:*".to_string(), "view"),
        ]
    };
    let mut rules = vec![("admin".to_string(), "*".to_string(), "*")];
    rules.extend(team_rules("team-a"));
    rules.extend(team_rules("team-b"));
    secured.set_policy(&rules).await;

    let (status, _, joined) = secured
        .call(
            Method::POST,
            "/v1/groups/shared/members",
            Some(secured.token("team-b")),
            Some(&json!({"topics": ["b-secret"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{joined}");
    let member = joined["member_id"].as_str().unwrap().to_string();
    let generation = joined["generation"].clone();
    // Team A can see the member's id...
    let (status, _, group) = secured
        .call(
            Method::GET,
            "/v1/groups/shared",
            Some(secured.token("team-a")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{group}");
    assert!(group.to_string().contains(&member), "{group}");
    // ...but not act as it.
    let poll = json!({"max_messages": 10, "max_wait_ms": 0});
    let commit = json!({"member_id": member, "generation": generation,
                        "offsets": [{"topic": "b-secret", "partition": 0, "offset": 1}]});
    let impersonations = |member: &str| {
        vec![
            (
                Method::POST,
                format!("/v1/groups/shared/members/{member}/poll"),
                Some(poll.clone()),
            ),
            (
                Method::POST,
                format!("/v1/groups/shared/members/{member}/heartbeat"),
                None,
            ),
            (
                Method::POST,
                "/v1/groups/shared/offsets".to_string(),
                Some(commit.clone()),
            ),
            (
                Method::DELETE,
                format!("/v1/groups/shared/members/{member}"),
                None,
            ),
        ]
    };
    for (method, path, body) in impersonations(&member) {
        let (status, _, answer) = secured
            .call(
                method.clone(),
                &path,
                Some(secured.token("team-a")),
                body.as_ref(),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "{method} {path} as team-a: {answer}"
        );
        assert!(
            !answer.to_string().contains("team b only"),
            "{method} {path}: {answer}"
        );
    }
    // The member's own principal polls it.
    let (status, _, polled) = secured
        .call(
            Method::POST,
            &format!("/v1/groups/shared/members/{member}/poll"),
            Some(secured.token("team-b")),
            Some(&poll),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{polled}");
    assert_eq!(polled["messages"][0]["value"], "team b only", "{polled}");

    // A member a WebSocket joined is its socket principal's too.
    let mut socket = ws_with_token(&secured.server, secured.token("team-b"), false).await;
    send(
        &mut socket,
        json!({"op": "subscribe", "id": "g", "group": "ws-shared", "topics": ["b-secret"]}),
    )
    .await;
    assert_eq!(next_frame(&mut socket).await["op"], "ok");
    let assignment = next_frame(&mut socket).await;
    assert_eq!(assignment["op"], "assignment", "{assignment}");
    let socket_member = assignment["member_id"].as_str().unwrap().to_string();
    for path in [
        format!("/v1/groups/ws-shared/members/{socket_member}/poll"),
        format!("/v1/groups/ws-shared/members/{socket_member}/heartbeat"),
    ] {
        let (status, _, answer) = secured
            .call(
                Method::POST,
                &path,
                Some(secured.token("team-a")),
                Some(&poll),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
    }

    // Team B loses its topics: its member's next poll is refused, though it joined with them.
    let mut rules = vec![("admin".to_string(), "*".to_string(), "*")];
    rules.extend(team_rules("team-a"));
    rules.extend(team_rules("team-b").into_iter().skip(1));
    secured.set_policy(&rules).await;
    let (status, _, answer) = secured
        .call(
            Method::POST,
            &format!("/v1/groups/shared/members/{member}/poll"),
            Some(secured.token("team-b")),
            Some(&poll),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
}

/// Deleting a client, or rotating its secret, ends what its tokens opened at once (not when the
/// tokens expire, an hour later): its sockets close with 4001 and its event streams end with
/// `token_expired`; the tokens themselves are refused from then on.
#[tokio::test]
async fn deleting_or_rotating_a_client_ends_its_sockets_and_streams() {
    use crate::common::ws::{next_close, next_frame, send};
    let secured = Secured::start(&["admin", "producer", "consumer"], &[]).await;
    let admin = secured.token("admin").to_string();
    let producer = secured.token("producer").to_string();
    let mut socket = ws_with_token(&secured.server, &producer, false).await;
    send(
        &mut socket,
        json!({"op": "publish", "id": "p", "topic": "orders-1", "messages": [{"value": 1}]}),
    )
    .await;
    assert_eq!(next_frame(&mut socket).await["op"], "published");
    let consumer = secured.token("consumer").to_string();
    let mut stream = crate::common::sse::open(
        &secured.server.base_url(),
        &format!("/v1/topics/orders-1/events?from=earliest&access_token={consumer}"),
        None,
    )
    .await;
    let first = stream.next().await.expect("the message produced above");
    assert_eq!(first.event, "message", "{}", first.data);

    let deleted = Instant::now();
    let (status, _, body) = secured
        .call(
            Method::DELETE,
            "/v1/auth/clients/producer",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (code, reason) = next_close(&mut socket).await;
    assert_eq!(code, 4001, "{reason}");
    assert!(
        deleted.elapsed() < Duration::from_secs(5),
        "closed {:?} after the deletion",
        deleted.elapsed()
    );

    let (status, _, body) = secured
        .call(
            Method::POST,
            "/v1/auth/clients/consumer/secret",
            Some(&admin),
            Some(&json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let last = loop {
        match stream.next().await {
            Some(event) if event.event == "token_expired" => break event,
            Some(_) => continue,
            None => panic!("the stream ended without a token_expired event"),
        }
    };
    assert_eq!(last.message()["code"], "unauthorized", "{}", last.data);
    assert!(
        stream.next().await.is_none(),
        "nothing follows token_expired"
    );
    // The consumer's old token is refused; a new one from the new secret is not.
    let (status, _, _) = secured
        .call(Method::GET, "/v1/topics/orders-1", Some(&consumer), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A name outside the name alphabet is refused with 400 before any policy rule is matched
/// against it: a prefix rule whose `*` falls inside a multi-byte character of the name made the
/// matcher panic (a 500, a dropped socket).
#[tokio::test]
async fn a_name_no_rule_can_match_is_refused_before_authorizing() {
    use crate::common::ws::{next_frame, send};
    let secured = Secured::start(&["admin", "orders-reader"], &[]).await;
    secured
        .set_policy(&[
            ("admin".into(), "*".into(), "*"),
            ("orders-reader".into(), "topic:orders-*".into(), "consume"),
            ("orders-reader".into(), "topic:orders-*".into(), "view"),
            ("orders-reader".into(), "group:orders-*".into(), "consume"),
        ])
        .await;
    let token = secured.token("orders-reader");
    // `topic:orders-*` cuts `topic:ordersé1` in the middle of its `é`.
    for path in [
        "/v1/topics/orders%C3%A91",
        "/v1/topics/orders%C3%A91/partitions/0/messages",
        "/v1/groups/orders-g/events?topics=orders%C3%A91",
        "/v1/groups/orders%C3%A9x/members/m/heartbeat",
    ] {
        let method = if path.ends_with("heartbeat") {
            Method::POST
        } else {
            Method::GET
        };
        let (status, _, answer) = secured.call(method, path, Some(token), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer["code"], "invalid_request", "{path}: {answer}");
    }
    let mut socket = ws_with_token(&secured.server, token, false).await;
    send(
        &mut socket,
        json!({"op": "subscribe", "id": "bad", "topic": "ordersé1"}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["op"], "error", "{answer}");
    assert_eq!(answer["error"]["status"], 400, "{answer}");
    // The socket is still open and serves the reader's topics.
    send(
        &mut socket,
        json!({"op": "subscribe", "id": "good", "topic": "orders-1"}),
    )
    .await;
    assert_eq!(next_frame(&mut socket).await["op"], "ok");
}

/// A named idempotent producer is registered (and its previous holder fenced) only by a role
/// with `produce` on `producer:{name}`: one team cannot take over another's producer.
#[tokio::test]
async fn a_named_producer_is_registered_only_with_a_right_on_its_name() {
    let secured = Secured::start(&["admin", "team-a", "team-b"], &[]).await;
    secured
        .set_policy(&[
            ("admin".into(), "*".into(), "*"),
            ("team-a".into(), "cluster:producers".into(), "produce"),
            ("team-a".into(), "producer:a-*".into(), "produce"),
            ("team-b".into(), "cluster:producers".into(), "produce"),
            ("team-b".into(), "producer:b-*".into(), "produce"),
        ])
        .await;
    let register = |role: &'static str, name: Option<&'static str>| {
        let body = match name {
            Some(name) => json!({"name": name}),
            None => json!({}),
        };
        let secured = &secured;
        async move {
            secured
                .call(
                    Method::POST,
                    "/v1/producers",
                    Some(secured.token(role)),
                    Some(&body),
                )
                .await
        }
    };
    let (status, _, first) = register("team-b", Some("b-ingest")).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, _, answer) = register("team-a", Some("b-ingest")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["code"], "forbidden");
    // Team B's producer was not fenced: its next registration is the next epoch.
    let (status, _, again) = register("team-b", Some("b-ingest")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["producer_id"], first["producer_id"]);
    assert_eq!(
        again["producer_epoch"].as_u64(),
        first["producer_epoch"].as_u64().map(|epoch| epoch + 1),
        "{first} then {again}"
    );
    // Its own names, and anonymous producers, team A still registers.
    assert_eq!(register("team-a", Some("a-ingest")).await.0, StatusCode::OK);
    assert_eq!(register("team-a", None).await.0, StatusCode::OK);
}
