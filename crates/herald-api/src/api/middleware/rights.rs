//! What each route needs when authentication is on: one table, read by the access middleware
//! (`api::middleware::access`) and written into the OpenAPI document (`security`, `x-herald-right`).
//!
//! A resource is a template filled from the matched route's path parameters
//! (`topic:{topic}` on `/v1/topics/orders/messages` is `topic:orders`). Listing and creating
//! routes name the kind's wildcard (`topic:*`): only a role with the right on every name of
//! the kind may list them or create new ones.

use axum::http::Method;

use crate::broker::auth::policy::Action;

/// What one route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// No token (the token endpoint, key discovery, health, documentation).
    Public,
    /// Public unless `[auth] public_metrics` is false; then `view` on `cluster:metrics`.
    Metrics,
    /// Any valid token; each operation sent over the connection is checked on its own
    /// (`GET /v1/ws`).
    Authenticated,
    /// `action` on the resource the template names.
    Right(Action, &'static str),
}

use Action::{Admin, Consume, Produce, View};
use Requirement::{Authenticated, Metrics, Public, Right};

/// Every route of the API, by method and path template.
pub const ROUTES: &[(&str, &str, Requirement)] = &[
    ("GET", "/.well-known/openid-configuration", Public),
    ("GET", "/oauth/jwks.json", Public),
    ("POST", "/oauth/token", Public),
    ("GET", "/healthz", Public),
    ("GET", "/readyz", Public),
    ("GET", "/metrics", Metrics),
    ("GET", "/v1/auth/clients", Right(Admin, "auth:clients")),
    ("POST", "/v1/auth/clients", Right(Admin, "auth:clients")),
    (
        "GET",
        "/v1/auth/clients/{client_id}",
        Right(Admin, "auth:clients"),
    ),
    (
        "DELETE",
        "/v1/auth/clients/{client_id}",
        Right(Admin, "auth:clients"),
    ),
    (
        "POST",
        "/v1/auth/clients/{client_id}/secret",
        Right(Admin, "auth:clients"),
    ),
    ("GET", "/v1/auth/policies", Right(View, "auth:policies")),
    // Who did what: only a role given `audit:*` (admin in the built-in policy) reads it.
    ("GET", "/v1/audit", Right(View, "audit:log")),
    ("PUT", "/v1/auth/policies", Right(Admin, "auth:policies")),
    ("GET", "/v1/cluster", Right(View, "cluster:info")),
    ("POST", "/v1/cluster/nodes", Right(Admin, "cluster:nodes")),
    ("GET", "/v1/cluster/rebalance", Right(View, "cluster:info")),
    (
        "POST",
        "/v1/cluster/rebalance",
        Right(Admin, "cluster:nodes"),
    ),
    (
        "DELETE",
        "/v1/cluster/nodes/{id}",
        Right(Admin, "cluster:nodes"),
    ),
    // A backup copies every topic's messages and the cluster secret: admins only, to list too.
    (
        "POST",
        "/v1/cluster/nodes/{id}/backups",
        Right(Admin, "cluster:backups"),
    ),
    (
        "GET",
        "/v1/cluster/nodes/{id}/backups",
        Right(Admin, "cluster:backups"),
    ),
    ("GET", "/v1/groups", Right(View, "group:*")),
    ("GET", "/v1/groups/{group}", Right(View, "group:{group}")),
    (
        "DELETE",
        "/v1/groups/{group}",
        Right(Admin, "group:{group}"),
    ),
    (
        "GET",
        "/v1/groups/{group}/events",
        Right(Consume, "group:{group}"),
    ),
    (
        "POST",
        "/v1/groups/{group}/members",
        Right(Consume, "group:{group}"),
    ),
    (
        "DELETE",
        "/v1/groups/{group}/members/{member}",
        Right(Consume, "group:{group}"),
    ),
    (
        "POST",
        "/v1/groups/{group}/members/{member}/heartbeat",
        Right(Consume, "group:{group}"),
    ),
    (
        "POST",
        "/v1/groups/{group}/members/{member}/poll",
        Right(Consume, "group:{group}"),
    ),
    (
        "POST",
        "/v1/groups/{group}/offsets",
        Right(Consume, "group:{group}"),
    ),
    (
        "POST",
        "/v1/groups/{group}/offsets/reset",
        Right(Admin, "group:{group}"),
    ),
    ("POST", "/v1/producers", Right(Produce, "cluster:producers")),
    ("POST", "/v1/replies", Right(Produce, "cluster:replies")),
    ("GET", "/v1/subscriptions", Right(View, "subscription:*")),
    (
        "GET",
        "/v1/subscriptions/{sub}",
        Right(View, "subscription:{sub}"),
    ),
    (
        "PUT",
        "/v1/subscriptions/{sub}",
        Right(Admin, "subscription:{sub}"),
    ),
    (
        "DELETE",
        "/v1/subscriptions/{sub}",
        Right(Admin, "subscription:{sub}"),
    ),
    (
        "POST",
        "/v1/subscriptions/{sub}/ack",
        Right(Consume, "subscription:{sub}"),
    ),
    (
        "GET",
        "/v1/subscriptions/{sub}/events",
        Right(Consume, "subscription:{sub}"),
    ),
    (
        "POST",
        "/v1/subscriptions/{sub}/extend",
        Right(Consume, "subscription:{sub}"),
    ),
    (
        "POST",
        "/v1/subscriptions/{sub}/nack",
        Right(Consume, "subscription:{sub}"),
    ),
    (
        "POST",
        "/v1/subscriptions/{sub}/pull",
        Right(Consume, "subscription:{sub}"),
    ),
    (
        "GET",
        "/v1/subscriptions/{sub}/redrive",
        Right(View, "subscription:{sub}"),
    ),
    (
        "POST",
        "/v1/subscriptions/{sub}/redrive",
        Right(Admin, "subscription:{sub}"),
    ),
    (
        "DELETE",
        "/v1/subscriptions/{sub}/redrive",
        Right(Admin, "subscription:{sub}"),
    ),
    (
        "POST",
        "/v1/subscriptions/{sub}/seek",
        Right(Consume, "subscription:{sub}"),
    ),
    ("GET", "/v1/topics", Right(View, "topic:*")),
    ("POST", "/v1/topics", Right(Admin, "topic:*")),
    ("GET", "/v1/topics/{topic}", Right(View, "topic:{topic}")),
    (
        "DELETE",
        "/v1/topics/{topic}",
        Right(Admin, "topic:{topic}"),
    ),
    ("PATCH", "/v1/topics/{topic}", Right(Admin, "topic:{topic}")),
    (
        "GET",
        "/v1/topics/{topic}/events",
        Right(Consume, "topic:{topic}"),
    ),
    (
        "POST",
        "/v1/topics/{topic}/messages",
        Right(Produce, "topic:{topic}"),
    ),
    (
        "GET",
        "/v1/topics/{topic}/partitions/{partition}/messages",
        Right(Consume, "topic:{topic}"),
    ),
    (
        "POST",
        "/v1/topics/{topic}/partitions/{partition}/messages",
        Right(Produce, "topic:{topic}"),
    ),
    (
        "GET",
        "/v1/topics/{topic}/partitions/{partition}/offsets",
        Right(Consume, "topic:{topic}"),
    ),
    (
        "POST",
        "/v1/topics/{topic}/requests",
        Right(Produce, "topic:{topic}"),
    ),
    ("GET", "/v1/ws", Authenticated),
    // The schema registry: reads need `view` on the subject, registering a version (what a
    // serializer that registers its schema does) `produce`, deletes and levels `admin`. Ids
    // name schemas of any subject: resolving one needs `view` on every subject.
    ("GET", "/schema-registry/schemas/types", Authenticated),
    (
        "GET",
        "/schema-registry/schemas/ids/{id}",
        Right(View, "subject:*"),
    ),
    (
        "GET",
        "/schema-registry/schemas/ids/{id}/schema",
        Right(View, "subject:*"),
    ),
    (
        "GET",
        "/schema-registry/schemas/ids/{id}/subjects",
        Right(View, "subject:*"),
    ),
    (
        "GET",
        "/schema-registry/schemas/ids/{id}/versions",
        Right(View, "subject:*"),
    ),
    ("GET", "/schema-registry/subjects", Right(View, "subject:*")),
    (
        "POST",
        "/schema-registry/subjects/{subject}",
        Right(View, "subject:{subject}"),
    ),
    (
        "DELETE",
        "/schema-registry/subjects/{subject}",
        Right(Admin, "subject:{subject}"),
    ),
    (
        "GET",
        "/schema-registry/subjects/{subject}/versions",
        Right(View, "subject:{subject}"),
    ),
    (
        "POST",
        "/schema-registry/subjects/{subject}/versions",
        Right(Produce, "subject:{subject}"),
    ),
    (
        "GET",
        "/schema-registry/subjects/{subject}/versions/{version}",
        Right(View, "subject:{subject}"),
    ),
    (
        "DELETE",
        "/schema-registry/subjects/{subject}/versions/{version}",
        Right(Admin, "subject:{subject}"),
    ),
    (
        "GET",
        "/schema-registry/subjects/{subject}/versions/{version}/schema",
        Right(View, "subject:{subject}"),
    ),
    (
        "GET",
        "/schema-registry/subjects/{subject}/versions/{version}/referencedby",
        Right(View, "subject:{subject}"),
    ),
    ("GET", "/schema-registry/config", Right(View, "subject:*")),
    ("PUT", "/schema-registry/config", Right(Admin, "subject:*")),
    (
        "DELETE",
        "/schema-registry/config",
        Right(Admin, "subject:*"),
    ),
    (
        "GET",
        "/schema-registry/config/{subject}",
        Right(View, "subject:{subject}"),
    ),
    (
        "PUT",
        "/schema-registry/config/{subject}",
        Right(Admin, "subject:{subject}"),
    ),
    (
        "DELETE",
        "/schema-registry/config/{subject}",
        Right(Admin, "subject:{subject}"),
    ),
    (
        "POST",
        "/schema-registry/compatibility/subjects/{subject}/versions",
        Right(View, "subject:{subject}"),
    ),
    (
        "POST",
        "/schema-registry/compatibility/subjects/{subject}/versions/{version}",
        Right(View, "subject:{subject}"),
    ),
];

/// Routes outside the OpenAPI document that serve it and its viewers, the example pages and the
/// web console (static files; the console signs in at `/oauth/token` like any client).
const PUBLIC_PREFIXES: &[&str] = &[
    "/openapi.json",
    "/asyncapi.json",
    "/docs",
    "/examples/",
    "/console",
];

/// The route whose query names resources besides its own: a group's event stream joins the
/// group for each of its `?topics=` (`broker::auth::operation::Operation::JoinGroup`).
pub const GROUP_STREAM: &str = "/v1/groups/{group}/events";

/// The topics a group stream's query names, as their rights are checked (every `topics`
/// parameter, split at commas, empty names skipped); `None` on any other route.
pub fn group_stream_topics(path: &str, query: Option<&str>) -> Option<Vec<String>> {
    if path != GROUP_STREAM {
        return None;
    }
    let mut topics = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if key == "topics" {
            topics.extend(
                value
                    .split(',')
                    .filter(|name| !name.is_empty())
                    .map(str::to_string),
            );
        }
    }
    Some(topics)
}

/// Routes whose clients may be browsers (`EventSource`, `WebSocket`), which cannot set headers:
/// they may carry the token as `?access_token=`.
pub fn takes_query_token(method: &Method, path: &str) -> bool {
    method == Method::GET && (path == "/v1/ws" || path.ends_with("/events"))
}

/// What a route needs; `None` for a route the table misses (refused: deny by default).
pub fn requirement(method: &Method, path: &str) -> Option<Requirement> {
    if PUBLIC_PREFIXES
        .iter()
        .any(|prefix| path.starts_with(prefix))
    {
        return Some(Public);
    }
    ROUTES
        .iter()
        .find(|(m, p, _)| *p == path && *m == method.as_str())
        .map(|(_, _, requirement)| *requirement)
}

/// The resource a template names, filled from path parameters (`None`: a parameter missing).
pub fn resource<'a>(
    template: &str,
    params: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> Option<String> {
    let mut resource = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        resource.push_str(&rest[..open]);
        let close = rest[open..].find('}')? + open;
        let name = &rest[open + 1..close];
        let (_, value) = params.clone().find(|(key, _)| *key == name)?;
        resource.push_str(value);
        rest = &rest[close + 1..];
    }
    resource.push_str(rest);
    Some(resource)
}

/// How the OpenAPI document and the docs state a requirement: `produce on topic:{topic}`.
pub fn describe(requirement: Requirement) -> Option<String> {
    match requirement {
        Right(action, template) => Some(format!("{action} on {template}")),
        Authenticated => Some("any valid token; each operation is checked".into()),
        Metrics => {
            Some("public unless [auth] public_metrics is false: view on cluster:metrics".into())
        }
        Public => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_in_the_openapi_document_has_a_requirement() {
        let document = crate::api::openapi();
        let mut documented = 0;
        for (path, item) in &document.paths.paths {
            for (method, operation) in [
                ("GET", &item.get),
                ("POST", &item.post),
                ("PUT", &item.put),
                ("PATCH", &item.patch),
                ("DELETE", &item.delete),
            ] {
                if operation.is_some() {
                    documented += 1;
                    let method = Method::from_bytes(method.as_bytes()).unwrap();
                    assert!(
                        requirement(&method, path).is_some(),
                        "{method} {path} has no entry in api::middleware::rights::ROUTES"
                    );
                }
            }
        }
        assert_eq!(
            documented,
            ROUTES.len(),
            "ROUTES lists a route the API does not have"
        );
    }

    #[test]
    fn a_group_stream_needs_what_a_join_needs() {
        let method = Method::GET;
        assert_eq!(
            requirement(&method, GROUP_STREAM),
            Some(Right(Consume, "group:{group}")),
            "the route's own right is the first a join needs"
        );
        assert_eq!(
            group_stream_topics(GROUP_STREAM, Some("topics=a,,b&topics=c")),
            Some(vec!["a".to_string(), "b".to_string(), "c".to_string()])
        );
        assert_eq!(group_stream_topics("/v1/topics/{topic}/events", None), None);
    }

    #[test]
    fn templates_are_filled_from_path_parameters() {
        let params = [("topic", "orders"), ("partition", "3")];
        assert_eq!(
            resource("topic:{topic}", params.iter().copied()).as_deref(),
            Some("topic:orders")
        );
        assert_eq!(
            resource("topic:*", params.iter().copied()).as_deref(),
            Some("topic:*")
        );
        assert_eq!(resource("group:{group}", params.iter().copied()), None);
    }
}
