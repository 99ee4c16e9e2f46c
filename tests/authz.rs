//! Authentication and authorization with `--auth`: every route of the OpenAPI document refuses
//! a request without a token (401 with `WWW-Authenticate`) and one whose roles lack its right
//! (403); the built-in roles against produce, consume, group, subscription and admin operations
//! with a policy scoping the producer to `orders-*`; tampered, foreign, expired and absent
//! tokens; a policy change taking effect on the next request.

mod common;

use std::collections::BTreeMap;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use common::Server;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

pub async fn create_client(server: &Server, id: &str, roles: &[&str]) -> String {
    let response = server
        .post_json(
            "/v1/auth/clients",
            &json!({"client_id": id, "roles": roles}),
        )
        .await;
    let (status, body) = server.json(response).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["client_secret"].as_str().unwrap().to_string()
}

pub async fn token(server: &Server, id: &str, secret: &str) -> String {
    let response = server
        .http_client()
        .post(server.url("/oauth/token"))
        .header(
            "authorization",
            format!("Basic {}", STANDARD.encode(format!("{id}:{secret}"))),
        )
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_string()
}

/// A node with authentication on, the topics `orders-1` and `payments`, and one client per
/// role named after it (its token in `tokens`).
struct Secured {
    server: Server,
    tokens: BTreeMap<String, String>,
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
        Secured { server, tokens }
    }

    fn token(&self, role: &str) -> &str {
        &self.tokens[role]
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
        .replace("{id}", "2");
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
