//! Authentication and authorization with `--auth`: every route of the OpenAPI document refuses
//! a request without a token (401 with `WWW-Authenticate`) and one whose roles lack its right
//! (403); the built-in roles against produce, consume, group, subscription and admin operations
//! with a policy scoping the producer to `orders-*`; tampered, foreign, expired and absent
//! tokens; a policy change taking effect on the next request.

use crate::common;
mod tenants;

use std::collections::BTreeMap;

use crate::common::auth::{create_client, token};
use crate::common::Server;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A node with authentication on, the topics `orders-1` and `payments`, and one client per
/// role named after it (its token in `tokens`).
struct Secured {
    server: Server,
    tokens: BTreeMap<String, String>,
    /// Each client's secret, for fresh tokens.
    secrets: BTreeMap<String, String>,
    /// Holds the configuration file `with_config` wrote.
    _config_dir: Option<tempfile::TempDir>,
}

impl Secured {
    /// Clients are made with authentication off (as the bootstrap admin would), then the node
    /// restarts with `--auth` and `extra`.
    async fn start(roles: &[&str], extra: &[&str]) -> Secured {
        let mut server = Server::start().await;
        server.create_topic("orders-1", 1).await;
        server.create_topic("payments", 1).await;
        let mut secrets = BTreeMap::new();
        for role in roles {
            secrets.insert(
                role.to_string(),
                create_client(&server, role, &[role]).await,
            );
        }
        let mut args = vec!["--auth".to_string()];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        server.set_extra_args(args);
        server.restart().await;
        let mut tokens = BTreeMap::new();
        for (role, secret) in &secrets {
            tokens.insert(role.clone(), token(&server, role, secret).await);
        }
        Secured {
            server,
            tokens,
            secrets,
            _config_dir: None,
        }
    }

    /// `start` with a configuration file holding `toml`.
    async fn with_config(roles: &[&str], toml: &str) -> Secured {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, toml).unwrap();
        let mut secured = Secured::start(roles, &["--config", path.to_str().unwrap()]).await;
        secured._config_dir = Some(dir);
        secured
    }

    /// A new token for the client of `role`.
    async fn fresh_token(&self, role: &str) -> String {
        token(&self.server, role, &self.secrets[role]).await
    }

    fn token(&self, role: &str) -> &str {
        &self.tokens[role]
    }

    /// Replaces the policy, as the `admin` client, with rules of (role, resource, action).
    async fn set_policy(&self, rules: &[(String, String, &str)]) {
        let rules: Vec<Value> = rules
            .iter()
            .map(|(role, resource, action)| {
                json!({"role": role, "resource": resource, "action": action})
            })
            .collect();
        let (status, _, body) = self
            .call(
                Method::PUT,
                "/v1/auth/policies",
                Some(self.token("admin")),
                Some(&json!({ "rules": rules })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .server
            .http_client()
            .request(method.clone(), self.server.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|err| panic!("{method} {path}: {err}"));
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, headers, body)
    }
}

fn assert_unauthorized(
    what: &str,
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: &Value,
) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {body}");
    assert_eq!(body["code"], "unauthorized", "{what}: {body}");
    let challenge = headers
        .get("www-authenticate")
        .unwrap_or_else(|| panic!("{what}: no WWW-Authenticate"))
        .to_str()
        .unwrap();
    assert!(
        challenge.starts_with(r#"Bearer realm="herald""#),
        "{what}: {challenge}"
    );
}

/// A concrete path for a template of the OpenAPI document.
fn concrete(path: &str) -> String {
    let filled = path
        .replace("{topic}", "orders-1")
        .replace("{partition}", "0")
        .replace("{group}", "g1")
        .replace("{member}", "m1")
        .replace("{sub}", "s1")
        .replace("{client_id}", "c1")
        .replace("{id}", "2")
        .replace("{subject}", "orders-1-value")
        .replace("{version}", "1");
    if path == "/v1/groups/{group}/events" {
        format!("{filled}?topics=orders-1")
    } else {
        filled
    }
}

#[tokio::test]
async fn every_route_needs_a_token_and_its_right() {
    let secured = Secured::start(&["viewer", "nobody"], &[]).await;
    let document: Value = secured
        .server
        .get("/openapi.json")
        .await
        .json()
        .await
        .unwrap();
    let mut protected = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            let url = concrete(path);
            let what = format!("{method} {path}");
            let body = (method != Method::GET && method != Method::DELETE).then(|| json!({}));
            let (status, headers, answer) = secured
                .call(method.clone(), &url, None, body.as_ref())
                .await;
            let public = operation["security"] == json!([{}]);
            if public || path == "/metrics" {
                assert_ne!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{what} is public: {answer}"
                );
                continue;
            }
            protected += 1;
            assert_unauthorized(&what, status, &headers, &answer);

            let right = operation["x-herald-right"]
                .as_str()
                .unwrap_or_else(|| panic!("{what} declares no x-herald-right"));
            assert!(operation["responses"]["401"].is_object(), "{what}");
            if right.starts_with("any valid token") {
                continue;
            }
            assert!(operation["responses"]["403"].is_object(), "{what}");
            // The viewer may read nearly everything; a role without rules may do nothing.
            let role = if right.starts_with("view ") || right.contains("auth:") {
                "nobody"
            } else {
                "viewer"
            };
            let (status, _, answer) = secured
                .call(method, &url, Some(secured.token(role)), body.as_ref())
                .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{what} as {role}: {answer}");
            assert_eq!(answer["code"], "forbidden", "{what}: {answer}");
        }
    }
    assert!(protected >= 40, "only {protected} protected operations");
}

#[tokio::test]
async fn bad_tokens_are_refused_and_good_ones_work() {
    let secured = Secured::start(&["admin"], &[]).await;
    let good = secured.token("admin").to_string();
    let path = "/v1/topics";

    let (status, _, body) = secured.call(Method::GET, path, Some(&good), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Absent.
    let (status, headers, body) = secured.call(Method::GET, path, None, None).await;
    assert_unauthorized("no token", status, &headers, &body);
    assert_eq!(
        headers["www-authenticate"].to_str().unwrap(),
        r#"Bearer realm="herald""#
    );

    // Tampered: the claims say another client.
    let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[1]).unwrap()).unwrap();
    claims["sub"] = json!("someone-else");
    parts[1] = URL_SAFE_NO_PAD.encode(claims.to_string());
    let tampered = parts.join(".");
    // Expired: the same claims an hour in the past, signature and all unchanged otherwise.
    claims["sub"] = json!("admin");
    claims["exp"] = json!(claims["iat"].as_i64().unwrap() - 3600);
    parts[1] = URL_SAFE_NO_PAD.encode(claims.to_string());
    let expired_claims = parts.join(".");
    // Signed by another cluster's key.
    let other = Server::start().await;
    let other_secret = create_client(&other, "admin", &["admin"]).await;
    let foreign = token(&other, "admin", &other_secret).await;

    for (what, bad) in [
        ("tampered", tampered.as_str()),
        ("expired claims", expired_claims.as_str()),
        ("another key", foreign.as_str()),
        ("not a JWT", "garbage"),
    ] {
        let (status, headers, body) = secured.call(Method::GET, path, Some(bad), None).await;
        assert_unauthorized(what, status, &headers, &body);
        assert!(
            headers["www-authenticate"]
                .to_str()
                .unwrap()
                .contains(r#"error="invalid_token""#),
            "{what}"
        );
    }

    // Public routes need nothing.
    for public in ["/healthz", "/oauth/jwks.json", "/openapi.json", "/metrics"] {
        let (status, _, _) = secured.call(Method::GET, public, None, None).await;
        assert_eq!(status, StatusCode::OK, "{public}");
    }
}

/// A role, and whether it may do an operation on `orders-1` and on `payments`.
type RoleOutcome = (&'static str, bool, bool);

/// The built-in roles against each kind of operation on a topic the producer is scoped to
/// (`orders-1`) and on another (`payments`).
#[tokio::test]
async fn built_in_roles_against_operations_on_allowed_and_other_topics() {
    let secured = Secured::start(&["admin", "producer", "consumer", "viewer"], &[]).await;
    let admin = secured.token("admin").to_string();
    let (status, _, policy) = secured
        .call(Method::GET, "/v1/auth/policies", Some(&admin), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    assert_eq!(policy["built_in"], true);
    let mut rules: Vec<Value> = policy["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| {
            !(rule["role"] == "producer"
                && rule["action"] == "produce"
                && rule["resource"] == "topic:*")
        })
        .cloned()
        .collect();
    rules.push(json!({"role": "producer", "resource": "topic:orders-*", "action": "produce"}));
    let (status, _, set) = secured
        .call(
            Method::PUT,
            "/v1/auth/policies",
            Some(&admin),
            Some(&json!({"rules": rules})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["built_in"], false);

    // (operation, role -> allowed on orders-1, allowed on payments)
    let expected: &[(&str, &[RoleOutcome])] = &[
        (
            "produce",
            &[
                ("admin", true, true),
                ("producer", true, false),
                ("consumer", false, false),
                ("viewer", false, false),
            ],
        ),
        (
            "consume",
            &[
                ("admin", true, true),
                ("producer", false, false),
                ("consumer", true, true),
                ("viewer", false, false),
            ],
        ),
        (
            "group",
            &[
                ("admin", true, true),
                ("producer", false, false),
                ("consumer", true, true),
                ("viewer", false, false),
            ],
        ),
        (
            "subscription",
            &[
                ("admin", true, true),
                ("producer", false, false),
                ("consumer", false, false),
                ("viewer", false, false),
            ],
        ),
        (
            "pull",
            &[
                ("admin", true, true),
                ("producer", false, false),
                ("consumer", true, true),
                ("viewer", false, false),
            ],
        ),
        (
            "admin",
            &[
                ("admin", true, true),
                ("producer", false, false),
                ("consumer", false, false),
                ("viewer", false, false),
            ],
        ),
        (
            "describe",
            &[
                ("admin", true, true),
                ("producer", true, true),
                ("consumer", true, true),
                ("viewer", true, true),
            ],
        ),
    ];
    // Subscriptions to pull from, made by the admin.
    for topic in ["orders-1", "payments"] {
        let (status, _, body) = secured
            .call(
                Method::PUT,
                &format!("/v1/subscriptions/pull-{topic}"),
                Some(&admin),
                Some(&json!({"topic": topic})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for (operation, roles) in expected {
        for (role, on_orders, on_payments) in *roles {
            for (topic, allowed) in [("orders-1", *on_orders), ("payments", *on_payments)] {
                let (method, path, body) = match *operation {
                    "produce" => (
                        Method::POST,
                        format!("/v1/topics/{topic}/messages"),
                        Some(json!({"messages": [{"value": "x"}]})),
                    ),
                    "consume" => (
                        Method::GET,
                        format!("/v1/topics/{topic}/partitions/0/messages"),
                        None,
                    ),
                    "group" => (
                        Method::POST,
                        format!("/v1/groups/g-{role}-{topic}/members"),
                        Some(json!({"topics": [topic]})),
                    ),
                    "subscription" => (
                        Method::PUT,
                        format!("/v1/subscriptions/s-{role}-{topic}"),
                        Some(json!({"topic": topic})),
                    ),
                    "pull" => (
                        Method::POST,
                        format!("/v1/subscriptions/pull-{topic}/pull"),
                        Some(json!({"max_messages": 1, "max_wait_ms": 0})),
                    ),
                    "admin" => (
                        Method::PATCH,
                        format!("/v1/topics/{topic}"),
                        Some(json!({})),
                    ),
                    "describe" => (Method::GET, format!("/v1/topics/{topic}"), None),
                    other => unreachable!("{other}"),
                };
                let (status, _, answer) = secured
                    .call(method, &path, Some(secured.token(role)), body.as_ref())
                    .await;
                let what = format!("{operation} on {topic} as {role}");
                if allowed {
                    assert!(status.is_success(), "{what}: {status} {answer}");
                } else {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {answer}");
                    assert_eq!(answer["code"], "forbidden", "{what}");
                }
            }
        }
    }
}

#[tokio::test]
async fn policies_are_validated() {
    let secured = Secured::start(&["admin"], &[]).await;
    let admin = secured.token("admin").to_string();
    for bad in [
        json!({"rules": [{"role": "r", "resource": "topic:x", "action": "write"}]}),
        json!({"rules": [{"role": "r", "resource": "queue:x", "action": "view"}]}),
        json!({"rules": [{"role": "r", "resource": "topic:*-eu", "action": "view"}]}),
        json!({"rules": [{"role": "a b", "resource": "topic:x", "action": "view"}]}),
        json!({"rules": [{"role": "r", "resource": "topic:x"}]}),
    ] {
        let (status, _, body) = secured
            .call(Method::PUT, "/v1/auth/policies", Some(&admin), Some(&bad))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["code"], "invalid_request");
    }
    let (_, _, policy) = secured
        .call(Method::GET, "/v1/auth/policies", Some(&admin), None)
        .await;
    assert_eq!(policy["built_in"], true, "a refused policy changes nothing");
}

/// When a token expires (`exp`, in milliseconds).
fn expires_at_ms(token: &str) -> i64 {
    let claims = token.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
    claims["exp"].as_i64().unwrap() * 1000
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Sleeps until the wall clock reaches `at_ms`.
async fn sleep_until_ms(at_ms: i64) {
    let left = at_ms - now_ms();
    if left > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(left as u64)).await;
    }
}

async fn ws_with_token(server: &Server, token: &str, in_query: bool) -> common::ws::Socket {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = if in_query {
        format!("ws://{}/v1/ws?access_token={token}", server.http_addr())
    } else {
        format!("ws://{}/v1/ws", server.http_addr())
    };
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.v1".parse().unwrap());
    if !in_query {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let (socket, _) = tokio::time::timeout(
        common::ws::FRAME_DEADLINE,
        tokio_tungstenite::connect_async(request),
    )
    .await
    .expect("the handshake within the deadline")
    .expect("the handshake succeeds");
    socket
}

const SHORT_TOKENS: &str = "[auth]\ntoken_lifetime_ms = 4000\nclock_leeway_ms = 0\n";

#[tokio::test]
async fn a_socket_closes_when_its_token_expires_unless_renewed() {
    use crate::common::ws::{next_close, next_frame, send};
    let secured = Secured::with_config(&["producer"], SHORT_TOKENS).await;
    let server = &secured.server;

    // Not renewed: closed with 4001 once the token expires, not before.
    let first = secured.fresh_token("producer").await;
    let mut socket = ws_with_token(server, &first, false).await;
    let (code, reason) = next_close(&mut socket).await;
    assert_eq!(code, 4001, "{reason}");
    assert!(reason.contains("token expired"), "{reason}");
    assert!(
        now_ms() >= expires_at_ms(&first) - 50,
        "closed before the token expired"
    );
    // The expired token is refused everywhere (JWT times are whole seconds: `exp` is the
    // first second it is invalid in).
    sleep_until_ms(expires_at_ms(&first) + 1000).await;
    let (status, headers, body) = secured
        .call(Method::GET, "/v1/topics/orders-1", Some(&first), None)
        .await;
    assert_unauthorized("expired", status, &headers, &body);

    // Renewed in time: the socket outlives its first token.
    let first = secured.fresh_token("producer").await;
    let mut socket = ws_with_token(server, &first, true).await;
    // A token that lasts longer: JWT times are whole seconds, so one issued in a later second.
    let second = common::poll(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(100),
        || async {
            let second = secured.fresh_token("producer").await;
            if expires_at_ms(&second) > expires_at_ms(&first) {
                Ok(second)
            } else {
                Err("no later-expiring token yet".to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|seen| panic!("{seen}"));
    send(
        &mut socket,
        json!({"op": "auth", "id": "renew", "token": second}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["op"], "authenticated", "{answer}");
    assert_eq!(answer["id"], "renew");
    assert_eq!(answer["subject"], "producer");
    assert_eq!(answer["expires_at_ms"], expires_at_ms(&second));
    // Past the first token's expiry (a time, not an event to wait for): the socket must still
    // serve on the renewed token.
    sleep_until_ms(expires_at_ms(&first) + 300).await;
    send(
        &mut socket,
        json!({"op": "publish", "id": "p", "topic": "orders-1", "messages": [{"value": 1}]}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["op"], "published", "{answer}");
    // A bad token in an auth frame is refused; the socket keeps its token.
    send(
        &mut socket,
        json!({"op": "auth", "id": "bad", "token": "garbage"}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["op"], "error", "{answer}");
    assert_eq!(answer["error"]["code"], "unauthorized");
    let (code, _) = next_close(&mut socket).await;
    assert_eq!(code, 4001);
    assert!(now_ms() >= expires_at_ms(&second) - 50);
}

#[tokio::test]
async fn socket_ops_and_streams_need_their_rights() {
    use crate::common::ws::{next_frame, send};
    let secured = Secured::start(&["viewer", "consumer"], &[]).await;
    let server = &secured.server;
    let mut socket = ws_with_token(server, secured.token("viewer"), false).await;
    for (id, frame) in [
        (
            "p",
            json!({"op": "publish", "id": "p", "topic": "orders-1", "messages": [{"value": 1}]}),
        ),
        (
            "s",
            json!({"op": "subscribe", "id": "s", "topic": "orders-1"}),
        ),
        (
            "g",
            json!({"op": "subscribe", "id": "g", "group": "workers", "topics": ["orders-1"]}),
        ),
        (
            "q",
            json!({"op": "subscribe", "id": "q", "subscription": "jobs"}),
        ),
    ] {
        send(&mut socket, frame).await;
        let answer = next_frame(&mut socket).await;
        assert_eq!(answer["op"], "error", "{id}: {answer}");
        assert_eq!(answer["id"], id);
        assert_eq!(answer["error"]["status"], 403, "{answer}");
        assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
    }
    // Still open, and the consumer may subscribe.
    let mut socket = ws_with_token(server, secured.token("consumer"), true).await;
    send(
        &mut socket,
        json!({"op": "subscribe", "id": "s", "topic": "orders-1"}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["op"], "ok", "{answer}");
    // A consumer may not publish.
    send(
        &mut socket,
        json!({"op": "publish", "id": "p", "topic": "orders-1", "messages": [{"value": 1}]}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["error"]["code"], "forbidden", "{answer}");

    // Server-sent event streams: checked when they open; browsers pass the token in the query.
    for (role, expected) in [
        ("viewer", StatusCode::FORBIDDEN),
        ("consumer", StatusCode::OK),
    ] {
        let url = format!(
            "/v1/topics/orders-1/events?access_token={}",
            secured.token(role)
        );
        let response = server
            .http_client()
            .get(server.url(&url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected, "{role}");
        let url = format!(
            "/v1/groups/workers/events?topics=orders-1,payments&access_token={}",
            secured.token(role)
        );
        let response = server
            .http_client()
            .get(server.url(&url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected, "group stream as {role}");
    }
    // The query token is for streams only.
    let response = server
        .http_client()
        .get(server.url(&format!(
            "/v1/topics?access_token={}",
            secured.token("consumer")
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

/// Denied requests, over REST and over a WebSocket, are in the audit log with who was refused,
/// which right on which resource, and the request id; reading the log needs its own right.
#[tokio::test]
async fn denied_requests_are_audited_with_the_principal() {
    use crate::common::ws::{next_frame, send};
    let secured = Secured::start(&["admin", "viewer"], &[]).await;
    let (status, headers, _) = secured
        .call(
            Method::DELETE,
            "/v1/topics/payments",
            Some(secured.token("viewer")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let rest_request_id = headers["x-request-id"].to_str().unwrap().to_string();
    let mut socket = ws_with_token(&secured.server, secured.token("viewer"), false).await;
    send(
        &mut socket,
        json!({"op": "publish", "id": "p", "topic": "orders-1", "messages": [{"value": 1}]}),
    )
    .await;
    assert_eq!(next_frame(&mut socket).await["error"]["code"], "forbidden");
    // A refused `auth` frame is audited too: a bad token, and another client's token.
    send(
        &mut socket,
        json!({"op": "auth", "id": "a", "token": "not-a-token"}),
    )
    .await;
    assert_eq!(
        next_frame(&mut socket).await["error"]["code"],
        "unauthorized"
    );
    send(
        &mut socket,
        json!({"op": "auth", "id": "b", "token": secured.token("admin")}),
    )
    .await;
    assert_eq!(next_frame(&mut socket).await["error"]["code"], "forbidden");

    // The viewer may not read the audit log; the admin may.
    let (status, _, _) = secured
        .call(
            Method::GET,
            "/v1/audit",
            Some(secured.token("viewer")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let admin = secured.token("admin").to_string();
    let events = common::poll(
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(100),
        || {
            let admin = admin.clone();
            let secured = &secured;
            async move {
                let (status, _, page) = secured
                    .call(
                        Method::GET,
                        "/v1/audit?principal=viewer&limit=1000",
                        Some(&admin),
                        None,
                    )
                    .await;
                if status != StatusCode::OK {
                    return Err(format!("GET /v1/audit answered {status}: {page}"));
                }
                let events = page["events"].as_array().cloned().unwrap_or_default();
                if events.len() >= 5 {
                    Ok(events)
                } else {
                    Err(format!("not yet five of the viewer's events: {page}"))
                }
            }
        },
    )
    .await
    .unwrap_or_else(|seen| panic!("{seen}"));
    let delete = events
        .iter()
        .find(|event| event["method"] == "DELETE")
        .unwrap_or_else(|| panic!("no DELETE among {events:?}"));
    assert_eq!(delete["allowed"], false);
    assert_eq!(delete["status"], 403);
    assert_eq!(delete["resource"], "topic:payments");
    assert_eq!(delete["request_id"], rest_request_id.as_str());
    assert_eq!(delete["roles"], json!(["viewer"]));
    assert_eq!(delete["remote_addr"], "127.0.0.1");
    let publish = events
        .iter()
        .find(|event| event["method"] == "WS")
        .unwrap_or_else(|| panic!("no WebSocket refusal among {events:?}"));
    assert_eq!(publish["allowed"], false);
    assert_eq!(publish["action"], "websocket produce");
    assert_eq!(publish["resource"], "topic:orders-1");
    assert!(publish["reason"].as_str().is_some(), "{publish}");
    let refused_auth: Vec<&Value> = events
        .iter()
        .filter(|event| event["action"] == "websocket auth")
        .collect();
    assert_eq!(refused_auth.len(), 2, "{events:?}");
    assert_eq!(refused_auth[0]["status"], 401, "{}", refused_auth[0]);
    assert_eq!(refused_auth[0]["method"], "WS");
    assert_eq!(refused_auth[1]["status"], 403, "{}", refused_auth[1]);
    assert!(
        refused_auth.iter().all(|event| event["reason"]
            .as_str()
            .is_some_and(|reason| !reason.is_empty())),
        "{refused_auth:?}"
    );
    assert!(events
        .iter()
        .all(|event| event["principal"] == "viewer" && event["allowed"] == false));
    // Nothing was deleted.
    let (status, _, _) = secured
        .call(Method::GET, "/v1/topics/payments", Some(&admin), None)
        .await;
    assert_eq!(status, StatusCode::OK);
}

/// An event stream opened with a token ends with a `token_expired` event when the token
/// expires (not before), so a stream never outlives its credentials.
#[tokio::test]
async fn an_event_stream_ends_when_its_token_expires() {
    let secured = Secured::with_config(&["consumer"], SHORT_TOKENS).await;
    let server = &secured.server;
    let token = secured.fresh_token("consumer").await;
    let mut stream = common::sse::open(
        &server.base_url(),
        &format!("/v1/topics/orders-1/events?access_token={token}"),
        None,
    )
    .await;
    let last = loop {
        match stream.next().await {
            Some(event) if event.event == "token_expired" => break event,
            Some(_) => continue,
            None => panic!("the stream ended without a token_expired event"),
        }
    };
    assert!(
        now_ms() >= expires_at_ms(&token) - 50,
        "ended before the token expired"
    );
    assert_eq!(last.message()["code"], "unauthorized", "{}", last.data);
    assert!(
        stream.next().await.is_none(),
        "nothing follows token_expired"
    );
}
