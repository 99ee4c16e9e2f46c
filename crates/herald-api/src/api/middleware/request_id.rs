//! Request ids: every request gets one, answered in the `x-request-id` header and carried in
//! the request's extensions as [`RequestId`] (the audit log records it; a client quoting it
//! lets an operator find the request in the logs and the audit log).
//!
//! A client's own `x-request-id` is kept when it is short and plain (1 to 64 of
//! `[A-Za-z0-9._:-]`), so a request keeps its id across the proxies and services it passes
//! through; anything else is replaced by a fresh id (32 hex digits: a random per-process prefix
//! and a counter), so an id written to logs never carries a client's control characters or
//! megabytes.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;

/// The header that carries the id, both ways.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The longest client-chosen id kept.
pub const MAX_REQUEST_ID_LEN: usize = 64;

/// The id of the request being served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub Arc<str>);

impl RequestId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The id a request was given, and the header that answers it.
pub(crate) struct AssignedId {
    id: Arc<str>,
    header: HeaderValue,
}

/// Gives `request` its id (the client's when well formed, else a fresh one), in its
/// extensions for the layers and handlers inside.
pub(crate) fn assign(request: &mut Request) -> AssignedId {
    let kept = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .filter(|value| value.to_str().is_ok_and(is_well_formed))
        .cloned();
    let (id, header) = match kept {
        Some(header) => (
            Arc::<str>::from(header.to_str().unwrap_or_default()),
            header,
        ),
        None => {
            let id = generate();
            // 32 hex digits are always a valid header value.
            let header = HeaderValue::from_str(&id).unwrap_or(HeaderValue::from_static(""));
            (Arc::<str>::from(id.as_str()), header)
        }
    };
    request.extensions_mut().insert(RequestId(id.clone()));
    AssignedId { id, header }
}

/// Answers the id: in the `x-request-id` header, and in a problem answer's body (with, for
/// the schema registry's routes, the fields Confluent's clients read:
/// [`crate::api::problem::add_registry_fields`]).
pub(crate) async fn answer(
    mut response: Response,
    assigned: AssignedId,
    registry: bool,
) -> Response {
    response
        .headers_mut()
        .insert(REQUEST_ID_HEADER, assigned.header);
    if is_problem(&response) {
        return with_id_in_problem(response, &assigned.id, registry).await;
    }
    response
}

/// The largest problem body the id is added to (they are a few hundred bytes).
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

fn is_problem(response: &Response) -> bool {
    response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes() == crate::api::problem::PROBLEM_JSON.as_bytes())
}

/// A problem+json answer with `request_id` added to its body. Only error answers pay for it.
async fn with_id_in_problem(response: Response, id: &str, registry: bool) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_PROBLEM_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::debug!(%error, "a problem body could not be read to add the request id");
            return Response::from_parts(parts, axum::body::Body::empty());
        }
    };
    let mut problem: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(problem) => problem,
        Err(_) => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    let Some(fields) = problem.as_object_mut() else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    fields.insert("request_id".into(), serde_json::Value::from(id));
    if registry {
        crate::api::problem::add_registry_fields(fields);
    }
    match serde_json::to_vec(&problem) {
        Ok(with_id) => {
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            Response::from_parts(parts, axum::body::Body::from(with_id))
        }
        Err(_) => Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
}

/// Whether a client's id is kept: 1 to 64 of `[A-Za-z0-9._:-]`.
pub fn is_well_formed(id: &str) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'-'))
}

/// A fresh id: this process's random 64-bit prefix and a 64-bit counter, as 32 hex digits.
/// Unique on the node, and across nodes but with a negligible chance; they need not be
/// unguessable (they authorise nothing), so no system call per request.
fn generate() -> String {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // No entropy source (never seen in practice): the start time still tells
            // processes apart.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos() as u64)
                .unwrap_or(0);
            bytes = nanos.to_be_bytes();
        }
        u64::from_be_bytes(bytes)
    });
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix:016x}{count:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::middleware::Next;
    use axum::routing::get;
    use axum::{middleware, Extension, Router};
    use tower::ServiceExt;

    /// The request id part of the envelope layer, alone.
    async fn with_id(mut request: Request, next: Next) -> Response {
        let assigned = assign(&mut request);
        answer(next.run(request).await, assigned, false).await
    }

    fn app() -> Router {
        Router::new()
            .route(
                "/",
                get(|Extension(id): Extension<RequestId>| async move { id.as_str().to_string() }),
            )
            .layer(middleware::from_fn(with_id))
    }

    async fn call(id: Option<&str>) -> (String, String) {
        let mut request = Request::builder().uri("/");
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        let response = app()
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let header = response.headers()[&REQUEST_ID_HEADER]
            .to_str()
            .expect("ascii")
            .to_string();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
        (header, String::from_utf8(body.to_vec()).expect("utf-8"))
    }

    #[tokio::test]
    async fn a_problem_answer_carries_the_request_id() {
        let app = Router::new()
            .route(
                "/",
                get(|| async { crate::api::problem::ApiError::invalid_request("bad") }),
            )
            .layer(middleware::from_fn(with_id));
        let request = Request::builder()
            .uri("/")
            .header("x-request-id", "req-7")
            .body(Body::empty())
            .expect("request");
        let response = app.oneshot(request).await.expect("response");
        assert_eq!(response.status(), 400);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .expect("body");
        let problem: crate::api::problem::Problem =
            serde_json::from_slice(&body).expect("a problem");
        assert_eq!(problem.request_id.as_deref(), Some("req-7"));
        assert_eq!(problem.detail, "bad");
    }

    #[tokio::test]
    async fn a_well_formed_client_id_is_kept_and_answered() {
        let (header, seen) = call(Some("req-42.a:b_c")).await;
        assert_eq!(header, "req-42.a:b_c");
        assert_eq!(seen, "req-42.a:b_c");
    }

    #[tokio::test]
    async fn a_missing_or_bad_id_is_replaced_by_a_fresh_one() {
        let long = "x".repeat(MAX_REQUEST_ID_LEN + 1);
        for id in [
            None,
            Some(""),
            Some("has space"),
            Some("é"),
            Some(long.as_str()),
        ] {
            let (header, seen) = call(id).await;
            assert_eq!(header, seen, "{id:?}");
            assert_eq!(header.len(), 32, "{id:?}: {header}");
            assert!(header.bytes().all(|b| b.is_ascii_hexdigit()), "{header}");
        }
        assert_ne!(call(None).await.0, call(None).await.0, "ids differ");
        assert!(is_well_formed(&"x".repeat(MAX_REQUEST_ID_LEN)));
    }
}
