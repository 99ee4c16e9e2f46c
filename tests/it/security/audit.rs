//! The audit log: administrative changes, failed authentications and denied requests are
//! recorded in the replicated `__audit` topic with who, what, which resource, from where and
//! the request id, and read back with `GET /v1/audit` (filters, paging, bad queries), after a
//! restart too; recording never holds up the request it records. What an anonymous client can
//! make it store is bounded: refusals of unauthenticated requests are counted per address and
//! window, not stored one by one, and an event's attacker-chosen text is cut short.

use std::io::Write;
use std::time::Duration;

use crate::common::auth::token;
use crate::common::{poll, Server};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// How long an event may take to be written and readable.
const WRITTEN_WITHIN: Duration = Duration::from_secs(20);

/// The audit events whose `request_id`s are all in `ids`, once all of them are readable.
async fn events_with_ids(server: &Server, ids: &[String]) -> Vec<Value> {
    let found = poll(WRITTEN_WITHIN, Duration::from_millis(100), || async {
        let (status, page) = server.json(server.get("/v1/audit?limit=1000").await).await;
        if status != StatusCode::OK {
            return Err(format!("GET /v1/audit answered {status}: {page}"));
        }
        let events: Vec<Value> = page["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|event| ids.iter().any(|id| event["request_id"] == id.as_str()))
            .collect();
        if ids.iter().all(|id| {
            events
                .iter()
                .any(|event| event["request_id"] == id.as_str())
        }) {
            Ok(events)
        } else {
            Err(format!("of {ids:?}, only these are audited: {events:?}"))
        }
    })
    .await;
    found.unwrap_or_else(|seen| server.fail(&seen))
}

fn request_id(response: &reqwest::Response) -> String {
    response.headers()["x-request-id"]
        .to_str()
        .expect("an ASCII request id")
        .to_string()
}

fn event_for<'e>(events: &'e [Value], id: &str) -> &'e Value {
    events
        .iter()
        .find(|event| event["request_id"] == id)
        .unwrap_or_else(|| panic!("no event for request {id}: {events:?}"))
}

#[tokio::test]
async fn admin_actions_and_failed_authentications_are_audited_with_who_where_and_which_request() {
    let server = Server::start().await;
    let client = server.http_client();

    // A client's well-formed id is kept; the others are given one.
    let create = client
        .post(server.url("/v1/topics"))
        .header("x-request-id", "create-orders-1")
        .json(&json!({"name": "orders"}))
        .send()
        .await
        .expect("create");
    assert_eq!(create.status(), StatusCode::CREATED);
    assert_eq!(request_id(&create), "create-orders-1");

    let produce = server
        .post_json(
            "/v1/topics/orders/messages",
            &json!({"messages": [{"value": 1}]}),
        )
        .await;
    assert_eq!(produce.status(), StatusCode::OK);
    let produce_id = request_id(&produce);
    assert_eq!(produce_id.len(), 32, "a generated id: {produce_id}");
    let list = server.get("/v1/topics").await;
    let list_id = request_id(&list);

    let create_client = server
        .post_json(
            "/v1/auth/clients",
            &json!({"client_id": "billing", "roles": ["producer"]}),
        )
        .await;
    assert_eq!(create_client.status(), StatusCode::CREATED);
    let create_client_id = request_id(&create_client);

    let bad_token = client
        .post(server.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials&client_id=billing&client_secret=wrong")
        .send()
        .await
        .expect("token request");
    assert_eq!(bad_token.status(), StatusCode::UNAUTHORIZED);
    let bad_token_id = request_id(&bad_token);

    let delete = client
        .delete(server.url("/v1/topics/orders"))
        .header("x-request-id", "has a space")
        .send()
        .await
        .expect("delete");
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    let delete_id = request_id(&delete);
    assert_ne!(delete_id, "has a space");

    let ids = [
        "create-orders-1".to_string(),
        create_client_id.clone(),
        bad_token_id.clone(),
        delete_id.clone(),
    ];
    let events = events_with_ids(&server, &ids).await;

    let created = event_for(&events, "create-orders-1");
    assert_eq!(created["principal"], "anonymous", "{created}");
    assert_eq!(created["action"], "create topic");
    assert_eq!(created["resource"], "topic:orders");
    assert_eq!(created["method"], "POST");
    assert_eq!(created["path"], "/v1/topics");
    assert_eq!(created["allowed"], true);
    assert_eq!(created["status"], 201);
    assert_eq!(created["remote_addr"], "127.0.0.1");
    assert_eq!(created["node_id"], 1);
    assert!(created["at_ms"].as_i64().expect("a time") > 0);

    let client_created = event_for(&events, &create_client_id);
    assert_eq!(client_created["action"], "create client");
    assert_eq!(client_created["resource"], "client:billing");
    assert_eq!(client_created["allowed"], true);

    let refused = event_for(&events, &bad_token_id);
    assert_eq!(refused["action"], "request token");
    assert_eq!(refused["allowed"], false);
    assert_eq!(refused["status"], 401);
    assert_eq!(refused["remote_addr"], "127.0.0.1");
    assert!(refused["reason"].as_str().is_some(), "{refused}");

    let deleted = event_for(&events, &delete_id);
    assert_eq!(deleted["action"], "delete topic");
    assert_eq!(deleted["resource"], "topic:orders");
    assert_eq!(deleted["status"], 204);

    // Oldest first, in the order they happened.
    let order: Vec<&str> = events
        .iter()
        .map(|event| event["request_id"].as_str().expect("an id"))
        .collect();
    assert_eq!(order, ids.iter().map(String::as_str).collect::<Vec<_>>());

    // Produces and reads are not audited.
    let (_, page) = server.json(server.get("/v1/audit?limit=1000").await).await;
    let all = page["events"].as_array().expect("events");
    for hot in [&produce_id, &list_id] {
        assert!(
            all.iter().all(|event| event["request_id"] != hot.as_str()),
            "{hot} was audited: {all:?}"
        );
    }
    // An error answer's problem carries the request id too.
    let missing = server.get("/v1/topics/missing").await;
    let missing_id = request_id(&missing);
    let (status, problem) = server.json(missing).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["request_id"], missing_id.as_str(), "{problem}");
    // The internal topic is not the users' to list, create or delete.
    let (_, topics) = server.json(server.get("/v1/topics").await).await;
    assert!(!topics.to_string().contains("__audit"), "{topics}");
    server
        .expect_problem(
            server.delete("/v1/topics/__audit").await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        )
        .await;
}

#[tokio::test]
async fn the_audit_log_filters_pages_and_refuses_bad_queries() {
    let server = Server::start().await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let response = server.post_json("/v1/topics", &json!({"name": name})).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        ids.push(request_id(&response));
    }
    let events = events_with_ids(&server, &ids).await;
    assert_eq!(events.len(), 4, "{events:?}");

    // `since`: from the third event's time on (an event in the same millisecond as the second
    // comes too).
    let third_at = events[2]["at_ms"].as_i64().expect("a time");
    let (status, page) = server
        .json(server.get(&format!("/v1/audit?since={third_at}")).await)
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let since: Vec<&Value> = page["events"].as_array().expect("events").iter().collect();
    assert!(since
        .iter()
        .all(|event| event["at_ms"].as_i64() >= Some(third_at)));
    for later in &events[2..] {
        assert!(since.contains(&later), "{later} missing from {page}");
    }

    // `principal`.
    let (_, anonymous) = server
        .json(server.get("/v1/audit?principal=anonymous").await)
        .await;
    assert_eq!(
        anonymous["events"].as_array().map(Vec::len),
        Some(4),
        "{anonymous}"
    );
    let (_, nobody) = server
        .json(server.get("/v1/audit?principal=nobody").await)
        .await;
    assert_eq!(nobody["events"], json!([]), "{nobody}");

    // `limit` and paging with `next_since` reach every event once.
    let mut paged = Vec::new();
    let mut since = 0i64;
    for _ in 0..10 {
        let (status, page) = server
            .json(
                server
                    .get(&format!("/v1/audit?limit=1&since={since}"))
                    .await,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let batch = page["events"].as_array().expect("events").clone();
        if batch.is_empty() {
            break;
        }
        // One event, or the events of one millisecond.
        let first_at = batch[0]["at_ms"].clone();
        assert!(
            batch.iter().all(|event| event["at_ms"] == first_at),
            "{page}"
        );
        since = page["next_since"].as_i64().expect("next_since");
        assert!(since > first_at.as_i64().expect("a time"), "{page}");
        paged.extend(batch);
    }
    assert_eq!(paged, events);

    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "since=-1",
        "since=yesterday",
        "principal=",
    ] {
        server
            .expect_problem(
                server.get(&format!("/v1/audit?{bad}")).await,
                StatusCode::BAD_REQUEST,
                "invalid_request",
            )
            .await;
    }
}

#[tokio::test]
async fn audit_events_survive_a_restart() {
    let mut server = Server::start().await;
    let response = server
        .post_json("/v1/topics", &json!({"name": "kept"}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = request_id(&response);
    events_with_ids(&server, std::slice::from_ref(&id)).await;

    server.restart().await;
    let events = events_with_ids(&server, std::slice::from_ref(&id)).await;
    assert_eq!(events[0]["resource"], "topic:kept");
}

#[tokio::test]
async fn a_full_audit_queue_drops_events_instead_of_holding_up_requests() {
    let mut config = tempfile::NamedTempFile::new().expect("a config file");
    writeln!(config, "[audit]\nqueue_capacity = 1\nmax_batch = 1").expect("write the config");
    let path = config.path().to_string_lossy().into_owned();
    let server = Server::start_with(&["--config", &path]).await;

    // A burst of audited requests (deletes of topics that do not exist, answered at once)
    // while the writer is still creating `__audit` for the first.
    const BURST: usize = 200;
    let started = std::time::Instant::now();
    let deletes = (0..BURST).map(|index| {
        let client = server.http_client().clone();
        let url = server.url(&format!("/v1/topics/missing-{index}"));
        async move {
            client
                .delete(url)
                .send()
                .await
                .map(|response| response.status())
        }
    });
    let statuses = futures::future::join_all(deletes).await;
    for status in &statuses {
        assert_eq!(
            status.as_ref().ok(),
            Some(&StatusCode::NOT_FOUND),
            "{status:?}"
        );
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(10),
        "the burst took {elapsed:?}"
    );

    let dropped = server
        .metric("herald_audit_dropped_total", &[("reason", "queue_full")])
        .await
        .unwrap_or(0.0);
    let recorded = server
        .metric("herald_audit_events_total", &[("allowed", "true")])
        .await
        .unwrap_or(0.0);
    assert!(dropped > 0.0, "nothing dropped; {recorded} recorded");
    assert_eq!(
        dropped + recorded,
        BURST as f64,
        "every audited request is recorded or counted as dropped"
    );
    // What was recorded is written, and the node still serves.
    let wanted = recorded;
    let written = poll(WRITTEN_WITHIN, Duration::from_millis(100), || async {
        let written = server
            .metric("herald_audit_written_total", &[])
            .await
            .unwrap_or(0.0);
        if written >= wanted {
            Ok(written)
        } else {
            Err(format!("{written} of {wanted} written"))
        }
    })
    .await;
    written.unwrap_or_else(|seen| server.fail(&seen));
}

/// Runs `herald auth audit <args> --server <url>` with a deadline; answers (success, stdout, stderr).
async fn herald_audit(server: &Server, args: &[&str]) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(["auth", "audit"])
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
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .unwrap_or_else(|_| server.fail("herald auth audit did not finish within 30 s"))
        .expect("run the herald CLI");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_prints_the_audit_log_one_event_per_line() {
    let server = Server::start().await;
    let mut ids = Vec::new();
    for name in ["one", "two", "three"] {
        let response = server.post_json("/v1/topics", &json!({"name": name})).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        ids.push(request_id(&response));
    }
    let events = events_with_ids(&server, &ids).await;

    let (ok, stdout, stderr) = herald_audit(&server, &["--limit", "1", "--all"]).await;
    assert!(ok, "{stderr}");
    let printed: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON event per line"))
        .collect();
    assert_eq!(printed, events, "{stdout}");

    let (ok, stdout, _) = herald_audit(&server, &["--principal", "someone-else"]).await;
    assert!(ok);
    assert_eq!(stdout, "");

    let (ok, _, stderr) = herald_audit(&server, &["--limit", "0"]).await;
    assert!(!ok);
    assert!(stderr.contains("invalid_request"), "{stderr}");
}

/// The bootstrap admin's secret, from the file its node writes soon after its first start.
async fn admin_secret(server: &Server) -> String {
    let path = server.data_dir().join("admin-credentials");
    let found = poll(WRITTEN_WITHIN, Duration::from_millis(100), || async {
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|credentials| {
                credentials
                    .lines()
                    .find_map(|line| line.strip_prefix("client_secret="))
                    .map(|secret| secret.trim().to_string())
            })
            .ok_or_else(|| format!("no secret in {} yet", path.display()))
    })
    .await;
    found.unwrap_or_else(|seen| server.fail(&seen))
}

#[tokio::test]
async fn refused_anonymous_requests_are_counted_in_few_short_events() {
    let mut config = tempfile::NamedTempFile::new().expect("a config file");
    writeln!(config, "[audit]\nrefusal_window_ms = 1000").expect("write the config");
    let path = config.path().to_string_lossy().into_owned();
    let server = Server::start_with(&["--auth", "--config", &path]).await;
    let admin = token(&server, "admin", &admin_secret(&server).await).await;

    // Tokens whose header names a 60 KB key id, on a route whose path is long too: what an
    // event would echo.
    let kid = "k".repeat(60_000);
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": "ES256", "kid": kid}).to_string());
    let forged = format!("{header}.e30.c2ln");
    let long_topic = "t".repeat(3_000);
    const REFUSED: usize = 300;
    for round in 0..REFUSED / 20 {
        let requests = (0..20).map(|index| {
            let path = if index % 2 == 0 {
                format!("/v1/topics/{long_topic}")
            } else {
                format!("/v1/topics/plain-{round}-{index}")
            };
            server
                .http_client()
                .get(server.url(&path))
                .bearer_auth(&forged)
                .send()
        });
        for answer in futures::future::join_all(requests).await {
            let status = answer.expect("a request").status();
            assert_eq!(status, StatusCode::UNAUTHORIZED);
        }
    }

    // Every refusal is counted in an event once its window closed; the events are few and
    // short.
    let refusals = poll(WRITTEN_WITHIN, Duration::from_millis(200), || async {
        let response = server
            .http_client()
            .get(server.url("/v1/audit?limit=1000&principal=anonymous"))
            .bearer_auth(&admin)
            .send()
            .await
            .map_err(|error| error.to_string())?;
        let (status, page) = server.json(response).await;
        if status != StatusCode::OK {
            return Err(format!("GET /v1/audit: {status}: {page}"));
        }
        let events: Vec<Value> = page["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|event| event["status"] == 401)
            .collect();
        let counted: u64 = events
            .iter()
            .map(|event| event["count"].as_u64().unwrap_or(1))
            .sum();
        if counted == REFUSED as u64 {
            Ok(events)
        } else {
            Err(format!(
                "{counted} of {REFUSED} refusals counted in {} events: {events:?}",
                events.len()
            ))
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    assert!(
        refusals.len() <= 12,
        "{} events for {REFUSED} refusals",
        refusals.len()
    );
    for event in &refusals {
        let size = event.to_string().len();
        assert!(size <= 2_048, "an event of {size} bytes: {event}");
        assert_eq!(event["remote_addr"], "127.0.0.1", "{event}");
        assert_eq!(event["allowed"], false, "{event}");
    }
    let summed = refusals
        .iter()
        .filter(|event| event["count"].as_u64().is_some())
        .count();
    assert!(
        summed >= 1,
        "no event counts repeated refusals: {refusals:?}"
    );
}

/// Only the node writes the audit log: no subscription reads an internal topic or dead-letters
/// into one (a dead-lettered message would land in `__audit` verbatim and read back as an
/// event). And the log pages by position: `next_offset` continues exactly after a page, so an
/// event whose own clock is off (a node's clock ahead) cannot make a reader skip the events
/// after it.
#[tokio::test]
async fn the_audit_log_cannot_be_forged_and_pages_by_position() {
    let server = Server::start().await;
    let mut ids = Vec::new();
    for name in ["jobs", "jobs-dead", "more"] {
        let response = server.post_json("/v1/topics", &json!({"name": name})).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        ids.push(request_id(&response));
    }
    events_with_ids(&server, &ids).await;
    for config in [
        json!({"topic": "jobs", "dead_letter_policy": {"topic": "__audit", "max_delivery_attempts": 1}}),
        json!({"topic": "__audit"}),
    ] {
        let response = server
            .http_client()
            .put(server.url("/v1/subscriptions/forger"))
            .json(&config)
            .send()
            .await
            .unwrap();
        // Refused, and audited (as every attempted administrative change is).
        ids.push(request_id(&response));
        let (status, body) = server.json(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{config}: {body}");
        assert_eq!(body["code"], "invalid_request", "{body}");
        assert!(
            body["detail"].as_str().unwrap().contains("__audit"),
            "{body}"
        );
    }
    assert_eq!(
        server.get("/v1/subscriptions/forger").await.status(),
        StatusCode::NOT_FOUND
    );

    // Paging by position, one event a page, reaches every event once and in order.
    let all = events_with_ids(&server, &ids).await;
    assert_eq!(all.len(), 5, "{all:?}");
    let mut paged = Vec::new();
    let mut offset = 0u64;
    for _ in 0..=all.len() {
        let (status, page) = server
            .json(
                server
                    .get(&format!("/v1/audit?limit=1&from_offset={offset}"))
                    .await,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let batch = page["events"].as_array().expect("events").clone();
        assert!(batch.len() <= 1, "{page}");
        let next = page["next_offset"].as_u64().expect("next_offset");
        if batch.is_empty() {
            assert_eq!(next, offset, "an empty page stays where it is: {page}");
            break;
        }
        assert!(next > offset, "{page}");
        offset = next;
        paged.extend(batch);
    }
    let ours: Vec<Value> = paged
        .iter()
        .filter(|event| ids.iter().any(|id| event["request_id"] == id.as_str()))
        .cloned()
        .collect();
    assert_eq!(ours, all, "each event once, in order: {paged:?}");
    server
        .expect_problem(
            server.get("/v1/audit?from_offset=x").await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        )
        .await;
}
