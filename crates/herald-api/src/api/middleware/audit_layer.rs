//! The audit log's part of the envelope (`api::middleware::envelope`): after each response, decides whether the request is audited and, if
//! so, records who did what to which resource, from where, with which outcome
//! ([`crate::broker::audit`]). Audited: every administrative change ([`ADMIN_ACTIONS`], and
//! any other change under `/v1/auth/` or `/v1/cluster/`), every 401 (a failed authentication,
//! the token endpoint's `invalid_client` included) and every 403 (a denied request). Reads,
//! produces and consumes are not (they are the hot path), unless refused.
//!
//! The principal is the [`Principal`] authentication (in the route guard, inside) put in the
//! response's extensions, or `anonymous`. Recording only queues the event: the answer is not
//! delayed by the write.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;

use crate::api::middleware::client_address::client_address;
use crate::api::middleware::request_id::RequestId;
use crate::broker::audit::event::ANONYMOUS;
use crate::broker::audit::{AuditEvent, AuditLog};
use crate::broker::auth::tokens::Principal;

/// The administrative actions: method, route pattern, what it does. A route's path parameters
/// name the resource (see [`resource_of`]).
pub const ADMIN_ACTIONS: &[(Method, &str, &str)] = &[
    (Method::POST, "/v1/topics", "create topic"),
    (Method::PATCH, "/v1/topics/{topic}", "update topic"),
    (Method::DELETE, "/v1/topics/{topic}", "delete topic"),
    (Method::DELETE, "/v1/groups/{group}", "delete group"),
    (
        Method::POST,
        "/v1/groups/{group}/offsets/reset",
        "reset group offsets",
    ),
    (Method::PUT, "/v1/subscriptions/{sub}", "put subscription"),
    (
        Method::DELETE,
        "/v1/subscriptions/{sub}",
        "delete subscription",
    ),
    (
        Method::POST,
        "/v1/subscriptions/{sub}/seek",
        "seek subscription",
    ),
    (
        Method::POST,
        "/v1/subscriptions/{sub}/redrive",
        "start redrive",
    ),
    (
        Method::DELETE,
        "/v1/subscriptions/{sub}/redrive",
        "cancel redrive",
    ),
    (Method::POST, "/v1/cluster/nodes", "add node"),
    (Method::DELETE, "/v1/cluster/nodes/{id}", "remove node"),
    (Method::POST, "/v1/cluster/rebalance", "rebalance"),
    (Method::POST, "/v1/auth/clients", "create client"),
    (
        Method::DELETE,
        "/v1/auth/clients/{client_id}",
        "delete client",
    ),
    (
        Method::POST,
        "/v1/auth/clients/{client_id}/secret",
        "rotate client secret",
    ),
    (Method::PUT, "/v1/auth/policies", "set policies"),
    (
        Method::POST,
        "/schema-registry/subjects/{subject}/versions",
        "register schema",
    ),
    (
        Method::DELETE,
        "/schema-registry/subjects/{subject}",
        "delete subject",
    ),
    (
        Method::DELETE,
        "/schema-registry/subjects/{subject}/versions/{version}",
        "delete schema version",
    ),
    (Method::PUT, "/schema-registry/config", "set compatibility"),
    (
        Method::DELETE,
        "/schema-registry/config",
        "reset compatibility",
    ),
    (
        Method::PUT,
        "/schema-registry/config/{subject}",
        "set subject compatibility",
    ),
    (
        Method::DELETE,
        "/schema-registry/config/{subject}",
        "clear subject compatibility",
    ),
];

/// Route prefixes where every change is administrative, those not in the table included
/// (signing keys, future settings).
const ADMIN_PREFIXES: &[&str] = &["/v1/auth/", "/v1/cluster/"];

/// The route of the OAuth2 token endpoint: its 401 is a failed client authentication.
const TOKEN_ROUTE: &str = "/oauth/token";

/// The largest answer body read for a refusal's reason or a created resource's name.
const MAX_INSPECTED_BODY: usize = 1 << 20;

/// What the audit middleware needs.
#[derive(Clone)]
pub struct Auditing {
    pub log: AuditLog,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Arc<[IpAddr]>,
}

/// What a request is audited as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedAction {
    pub action: String,
    /// Whether the resource's name is in the answer's body (a create names it there).
    pub named_in_answer: bool,
}

/// Whether (and as what) a request is audited, from its method, its matched route (None: no
/// route matched) and its answer's status.
pub fn audited_action(
    method: &Method,
    route: Option<&str>,
    status: StatusCode,
) -> Option<AuditedAction> {
    let refused = status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN;
    if let Some(route) = route {
        if let Some((_, pattern, action)) = ADMIN_ACTIONS
            .iter()
            .find(|(admin_method, pattern, _)| admin_method == method && *pattern == route)
        {
            return Some(AuditedAction {
                action: (*action).to_string(),
                named_in_answer: !pattern.contains('{') && *method == Method::POST,
            });
        }
        let admin_prefix = ADMIN_PREFIXES
            .iter()
            .any(|prefix| route.starts_with(prefix));
        if admin_prefix && !is_read(method) {
            return Some(AuditedAction {
                action: format!("{method} {route}"),
                named_in_answer: false,
            });
        }
        if route == TOKEN_ROUTE && refused {
            return Some(AuditedAction {
                action: "request token".into(),
                named_in_answer: false,
            });
        }
    }
    refused.then(|| AuditedAction {
        action: format!("{method} {}", route.unwrap_or("(no route)")),
        named_in_answer: false,
    })
}

fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The resource a request acts on: its route's first path parameter (the topic, group,
/// subscription, client or node the rest of the path is part of), named by kind
/// (`topic:orders`, `group:billing`, `subscription:jobs`, `client:svc`, `node:3`); a route
/// without one names itself (`topics`, `cluster/nodes`).
pub fn resource_of(route: Option<&str>, path: &str) -> String {
    let Some(route) = route else {
        return path.to_string();
    };
    let named = route
        .split('/')
        .zip(path.split('/'))
        .filter_map(|(pattern, value)| {
            let parameter = pattern.strip_prefix('{')?.strip_suffix('}')?;
            Some((parameter, value))
        })
        .next();
    match named {
        Some((parameter, value)) => format!("{}:{value}", kind_of(parameter)),
        None => route
            .trim_start_matches("/v1/")
            .trim_start_matches('/')
            .to_string(),
    }
}

fn kind_of(parameter: &str) -> &str {
    match parameter {
        "sub" => "subscription",
        "client_id" => "client",
        "id" => "node",
        other => other,
    }
}

/// What the audit log needs of a request, taken by the envelope before the request runs.
pub(crate) struct AuditStart {
    method: Method,
    uri: Uri,
    request_id: Option<RequestId>,
    peer: Option<IpAddr>,
    forwarded_for: Option<HeaderValue>,
}

impl AuditStart {
    pub(crate) fn of(auditing: &Auditing, request: &Request) -> AuditStart {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| address.ip());
        // Copied only from a trusted proxy (rare), so the common path allocates nothing here.
        let forwarded_for: Option<HeaderValue> = peer
            .filter(|peer| auditing.trusted_proxies.contains(peer))
            .and_then(|_| request.headers().get("x-forwarded-for").cloned());
        AuditStart {
            method: request.method().clone(),
            uri: request.uri().clone(),
            request_id: request.extensions().get::<RequestId>().cloned(),
            peer,
            forwarded_for,
        }
    }

    /// Records the request in the audit log when its action is audited, once its answer is
    /// known (the principal, which authentication put on the response; the created resource's
    /// name, from the body).
    pub(crate) async fn finish(self, auditing: &Auditing, response: Response) -> Response {
        let AuditStart {
            method,
            uri,
            request_id,
            peer,
            forwarded_for,
        } = self;
        let status = response.status();
        // A shared string: cloning it costs no allocation on the (unaudited) hot path.
        let matched = response.extensions().get::<MatchedPath>().cloned();
        let route = matched.as_ref().map(MatchedPath::as_str);
        let Some(audited) = audited_action(&method, route, status) else {
            return response;
        };
        let allowed = status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN;
        let (principal, roles) = match response.extensions().get::<Principal>() {
            Some(principal) => (principal.subject.clone(), Some(principal.roles.clone())),
            None => (ANONYMOUS.to_string(), None),
        };
        let inspect_body = !allowed || (audited.named_in_answer && status.is_success());
        let (response, body) = if inspect_body {
            read_body(response).await
        } else {
            (response, None)
        };
        let mut resource = resource_of(route, uri.path());
        if audited.named_in_answer && status.is_success() {
            if let Some(name) = body.as_ref().and_then(created_name) {
                resource = format!("{}:{name}", created_kind(route));
            }
        }
        let reason = if allowed {
            None
        } else {
            body.as_ref().and_then(refusal_reason)
        };
        let remote_addr = client_address(
            peer,
            forwarded_for.as_ref().and_then(|value| value.to_str().ok()),
            &auditing.trusted_proxies,
        );
        auditing.log.record(AuditEvent {
            at_ms: now_ms(),
            principal,
            roles,
            action: audited.action,
            method: method.to_string(),
            path: uri.path().to_string(),
            resource,
            allowed,
            status: status.as_u16(),
            remote_addr: remote_addr.map(|address| address.to_string()),
            request_id: request_id
                .map(|id| id.as_str().to_string())
                .unwrap_or_default(),
            reason,
            node_id: 0,
            count: None,
            since_ms: None,
        });
        response
    }
}

/// The client's address of a request (the peer's, or behind a trusted proxy the one it names),
/// for events recorded outside this layer (refused WebSocket operations).
pub fn remote_address(
    auditing: &Auditing,
    extensions: &axum::http::Extensions,
    headers: &axum::http::HeaderMap,
) -> Option<String> {
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip());
    let forwarded_for = headers
        .get("x-forwarded-for")
        .and_then(|value| value.to_str().ok());
    client_address(peer, forwarded_for, &auditing.trusted_proxies)
        .map(|address| address.to_string())
}

/// Reads a (small) answer body and puts it back; a body too large or failing is answered
/// as it was read, without inspecting it.
async fn read_body(response: Response) -> (Response, Option<serde_json::Value>) {
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, MAX_INSPECTED_BODY).await {
        Ok(bytes) => {
            let json = serde_json::from_slice(&bytes).ok();
            (Response::from_parts(parts, Body::from(bytes)), json)
        }
        Err(error) => {
            tracing::debug!(%error, "an audited answer's body could not be read");
            (Response::from_parts(parts, Body::empty()), None)
        }
    }
}

/// The name a create answers: a topic's `name`, a client's `client_id`, a node's `node_id`.
fn created_name(body: &serde_json::Value) -> Option<String> {
    ["name", "client_id", "node_id"]
        .iter()
        .find_map(|field| match body.get(field)? {
            serde_json::Value::String(text) => Some(text.clone()),
            serde_json::Value::Number(number) => Some(number.to_string()),
            _ => None,
        })
}

fn created_kind(route: Option<&str>) -> &'static str {
    match route {
        Some("/v1/topics") => "topic",
        Some("/v1/auth/clients") => "client",
        Some("/v1/cluster/nodes") => "node",
        _ => "resource",
    }
}

/// Why a request was refused: a problem's `detail`, or an OAuth2 error's description.
fn refusal_reason(body: &serde_json::Value) -> Option<String> {
    ["detail", "error_description", "error"]
        .iter()
        .find_map(|field| body.get(field)?.as_str().map(str::to_string))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(method: Method, route: &str, status: u16) -> Option<String> {
        audited_action(
            &method,
            Some(route),
            StatusCode::from_u16(status).expect("status"),
        )
        .map(|audited| audited.action)
    }

    /// Every change the rights table says needs `admin` (what an operator would call an
    /// administrative action) is audited, whatever its outcome: the two tables cannot drift.
    #[test]
    fn administrative_changes_are_audited_whatever_their_outcome() {
        let admin_changes: Vec<_> = crate::api::middleware::rights::ROUTES
            .iter()
            .filter(|(method, _, requirement)| {
                *method != "GET"
                    && matches!(
                        requirement,
                        crate::api::middleware::rights::Requirement::Right(
                            crate::broker::auth::policy::Action::Admin,
                            _
                        )
                    )
            })
            .collect();
        assert!(admin_changes.len() >= 12, "{admin_changes:?}");
        for (method, route, _) in admin_changes {
            let method = Method::from_bytes(method.as_bytes()).expect("a method");
            for status in [200, 201, 204, 400, 403, 404, 409, 503] {
                assert!(
                    action(method.clone(), route, status).is_some(),
                    "{method} {route} {status} is not audited"
                );
            }
        }
        assert_eq!(
            action(Method::POST, "/v1/topics", 201).as_deref(),
            Some("create topic")
        );
        // A change under /v1/auth/ not in the table is still audited.
        assert_eq!(
            action(Method::POST, "/v1/auth/keys/rotate", 200).as_deref(),
            Some("POST /v1/auth/keys/rotate")
        );
    }

    #[test]
    fn reads_produces_and_consumes_are_not_audited_unless_refused() {
        let hot = [
            (Method::GET, "/v1/topics"),
            (Method::GET, "/v1/topics/{topic}"),
            (Method::GET, "/v1/auth/clients"),
            (Method::GET, "/v1/cluster"),
            (Method::POST, "/v1/topics/{topic}/messages"),
            (
                Method::GET,
                "/v1/topics/{topic}/partitions/{partition}/messages",
            ),
            (Method::POST, "/v1/groups/{group}/members/{member}/poll"),
            (Method::POST, "/v1/groups/{group}/offsets"),
            (Method::POST, "/v1/subscriptions/{sub}/pull"),
            (Method::POST, "/v1/subscriptions/{sub}/ack"),
            (Method::POST, "/v1/producers"),
            (Method::POST, "/oauth/token"),
            (Method::GET, "/v1/ws"),
            (Method::GET, "/v1/audit"),
        ];
        for (method, route) in hot {
            for status in [200, 201, 400, 404, 429, 503] {
                assert_eq!(
                    action(method.clone(), route, status),
                    None,
                    "{method} {route}"
                );
            }
            assert_eq!(
                action(method.clone(), route, 403),
                Some(if route == TOKEN_ROUTE {
                    "request token".to_string()
                } else {
                    format!("{method} {route}")
                }),
                "{method} {route} denied"
            );
            assert!(
                action(method.clone(), route, 401).is_some(),
                "{method} {route} 401"
            );
        }
        assert_eq!(
            action(Method::POST, "/oauth/token", 401).as_deref(),
            Some("request token")
        );
        let unrouted = audited_action(&Method::GET, None, StatusCode::UNAUTHORIZED);
        assert_eq!(
            unrouted.map(|a| a.action).as_deref(),
            Some("GET (no route)")
        );
        assert_eq!(
            audited_action(&Method::GET, None, StatusCode::NOT_FOUND),
            None
        );
    }

    #[test]
    fn resources_are_named_by_their_path_parameters() {
        let cases = [
            ("/v1/topics/{topic}", "/v1/topics/orders", "topic:orders"),
            (
                "/v1/groups/{group}/offsets/reset",
                "/v1/groups/billing/offsets/reset",
                "group:billing",
            ),
            (
                "/v1/subscriptions/{sub}/redrive",
                "/v1/subscriptions/jobs/redrive",
                "subscription:jobs",
            ),
            (
                "/v1/auth/clients/{client_id}/secret",
                "/v1/auth/clients/svc/secret",
                "client:svc",
            ),
            ("/v1/cluster/nodes/{id}", "/v1/cluster/nodes/3", "node:3"),
            (
                "/v1/topics/{topic}/partitions/{partition}/messages",
                "/v1/topics/t/partitions/2/messages",
                "topic:t",
            ),
            ("/v1/topics", "/v1/topics", "topics"),
            ("/oauth/token", "/oauth/token", "oauth/token"),
        ];
        for (route, path, expected) in cases {
            assert_eq!(resource_of(Some(route), path), expected, "{route}");
        }
        assert_eq!(resource_of(None, "/v1/nowhere"), "/v1/nowhere");
    }
}
