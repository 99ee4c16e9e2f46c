//! The OpenAPI document's fixed parts (info, tags), and the test that keeps the committed copy,
//! `openapi/herald.json`, equal to what the code generates.

use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herald",
        version = "1",
        description = "A replicated message log over HTTP. Errors are RFC 9457 `application/problem+json` with a stable `code`."
    ),
    tags(
        (name = "topics", description = "Create, list, describe, update and delete topics"),
        (name = "messages", description = "Produce to a topic and read a partition"),
        (name = "groups", description = "Consumer groups: members, polls, committed offsets and lag"),
        (name = "subscriptions", description = "Queue subscriptions: leased messages, acks, retries and dead letters"),
        (name = "producers", description = "Idempotent producer ids"),
        (name = "requests", description = "Request/reply: publish a request and wait for its reply; post a reply"),
        (name = "websocket", description = "Publish and subscribe over one WebSocket (subprotocol herald.v1)"),
        (name = "auth", description = "The built-in OAuth2 issuer: clients, tokens, keys"),
        (name = "audit", description = "The audit log: administrative changes, failed authentications and denied requests"),
        (name = "schemas", description = "The schema registry (Confluent Schema Registry's API under /schema-registry): subjects, versions, ids, compatibility"),
        (name = "cluster", description = "Nodes and leadership"),
        (name = "health", description = "Liveness, readiness and metrics"),
    )
)]
struct HeraldApi;

/// The document before the routes add their operations.
pub(crate) fn base() -> utoipa::openapi::OpenApi {
    HeraldApi::openapi()
}

/// Where the committed document lives, relative to the crate root.
pub const COMMITTED_PATH: &str = "openapi/herald.json";

/// The document as committed: pretty JSON with a trailing newline.
pub fn render() -> Result<String, serde_json::Error> {
    let document = crate::api::openapi();
    Ok(format!("{}\n", serde_json::to_string_pretty(&document)?))
}

/// Fails unless the committed document at `relative_path` is `generated`; with
/// `HERALD_UPDATE_OPENAPI=1` writes it instead. `test` names the test that refreshes it.
#[cfg(test)]
pub(crate) fn assert_committed_is_current(relative_path: &str, generated: &str, test: &str) {
    // The committed documents are at the workspace's root, two levels above this crate.
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative_path);
    if std::env::var_os("HERALD_UPDATE_OPENAPI").is_some_and(|value| value == "1") {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create the document's folder");
        }
        std::fs::write(&path, generated).expect("write the committed document");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{relative_path} differs from what the code serves. If the change is intended, refresh \
         it with `HERALD_UPDATE_OPENAPI=1 cargo test --lib {test}` and commit the result."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_openapi_document_is_current() {
        let generated = render().expect("the OpenAPI document serializes");
        assert_committed_is_current(
            COMMITTED_PATH,
            &generated,
            "committed_openapi_document_is_current",
        );
    }

    #[test]
    fn document_has_info_and_every_route() {
        let document = crate::api::openapi();
        assert_eq!(document.info.title, "Herald");
        assert_eq!(document.info.version, "1");
        for path in [
            "/v1/topics",
            "/v1/topics/{topic}",
            "/v1/topics/{topic}/messages",
            "/v1/topics/{topic}/partitions/{partition}/messages",
            "/v1/topics/{topic}/partitions/{partition}/offsets",
            "/v1/groups",
            "/v1/groups/{group}",
            "/v1/groups/{group}/members",
            "/v1/groups/{group}/members/{member}",
            "/v1/groups/{group}/members/{member}/heartbeat",
            "/v1/groups/{group}/members/{member}/poll",
            "/v1/groups/{group}/offsets",
            "/v1/groups/{group}/offsets/reset",
            "/v1/subscriptions",
            "/v1/subscriptions/{sub}",
            "/v1/subscriptions/{sub}/redrive",
            "/v1/producers",
            "/v1/cluster",
            "/v1/cluster/nodes",
            "/v1/cluster/nodes/{id}",
            "/healthz",
            "/readyz",
            "/metrics",
        ] {
            assert!(document.paths.paths.contains_key(path), "missing {path}");
        }
        let schemas = document
            .components
            .as_ref()
            .map(|components| &components.schemas);
        assert!(
            schemas.is_some_and(|schemas| schemas.contains_key("Problem")),
            "Problem schema missing"
        );
    }
}
