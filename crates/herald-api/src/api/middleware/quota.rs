//! The quota middleware (`broker::quota`): every request takes one of its client's requests per
//! second and its body's bytes from produce bytes per second; its response's body is charged
//! to consume bytes per second as it is sent. Over a quota the answer is 429 `quota_exceeded`
//! with `Retry-After`, and nothing is done.
//!
//! It runs inside authentication, so the client is the token's subject (the `Principal` the
//! route guard's authentication puts in the request's extensions); an anonymous client is its IP
//! address. A response body that streams (server-sent events, a long poll) is throttled rather
//! than cut: each chunk that puts the client in debt is held back until the debt is paid, in
//! that response's own task, so nobody else waits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::extract::{ConnectInfo, Request};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use parking_lot::Mutex;

use crate::api::problem::ApiError;
use crate::broker::auth::tokens::Principal;
use crate::broker::quota::{QuotaKey, QuotaKind, Quotas, Throttled};
use crate::broker::ErrorCode;

/// Paths that answer about the node itself or document the API: never charged, so a client
/// over its quota can still be told why and the node's health is always readable.
const EXEMPT_PREFIXES: [&str; 7] = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/docs",
    "/openapi.json",
    "/asyncapi.json",
    "/examples",
];

/// Who a request is charged to: its token's subject, or its peer's IP address.
pub fn quota_key(extensions: &axum::http::Extensions) -> QuotaKey {
    if let Some(principal) = extensions.get::<Principal>() {
        return QuotaKey::Client(principal.subject.clone());
    }
    let address = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    QuotaKey::Address(address)
}

/// The 429 of a refused request.
pub fn quota_exceeded(key: &QuotaKey, throttled: &Throttled) -> ApiError {
    ApiError {
        retry_after: Some(throttled.retry_after_seconds()),
        ..ApiError::new(
            ErrorCode::QuotaExceeded,
            format!(
                "{key} is over its {} quota of {}; retry in {} s",
                throttled.kind.setting(),
                throttled.rate,
                throttled.retry_after_seconds()
            ),
        )
    }
}

/// A request admitted within its client's quotas: who its response is charged to, and whether
/// its body (one without a declared length) went over the produce byte quota as it streamed.
pub struct Admission {
    key: QuotaKey,
    body_refused: Option<Arc<Mutex<Option<Throttled>>>>,
}

/// Why a streaming body stopped: its client went over the produce byte quota. The handler
/// sees a body that failed to read; the route guard answers 429 instead of its answer.
#[derive(Debug, thiserror::Error)]
#[error("the request body is over the client's produce byte quota")]
struct BodyOverQuota;

impl Admission {
    /// The answer to the admitted request: 429 when its body was refused part way (the
    /// handler failed to read it, so nothing was done), else `response` charged to consume
    /// bytes ([`charge_response`]).
    pub fn answer(self, quotas: Quotas, response: Response) -> Response {
        let refused = self.body_refused.and_then(|refused| refused.lock().take());
        match refused {
            Some(throttled) => quota_exceeded(&self.key, &throttled).into_response(),
            None => charge_response(quotas, self.key, response),
        }
    }
}

/// Admits a request within its client's quotas (the route guard calls it, inside
/// authentication, so the client is known). Answers the request (its body charged as it
/// arrives when it declares no length) and its [`Admission`] (none with quotas off or on an
/// exempt path); or the 429 refusal.
pub fn admit(quotas: &Quotas, request: Request) -> Result<(Request, Option<Admission>), ApiError> {
    if !quotas.enabled() {
        return Ok((request, None));
    }
    let path = request.uri().path();
    if EXEMPT_PREFIXES
        .iter()
        .any(|prefix| path.starts_with(prefix))
    {
        return Ok((request, None));
    }
    let key = quota_key(request.extensions());
    // A body that says its length is charged before anything is read; one that streams
    // without a length is charged as it arrives, each chunk refused while the client is in
    // debt (so bodies sent together cannot all pass on a bucket none of them was charged to
    // yet when they were admitted).
    let declared_length = request.body().size_hint().exact();
    if let Err(throttled) = quotas.admit_request(&key, declared_length.unwrap_or(0)) {
        return Err(quota_exceeded(&key, &throttled));
    }
    if declared_length.is_some() {
        let admission = Admission {
            key,
            body_refused: None,
        };
        return Ok((request, Some(admission)));
    }
    let refused = Arc::new(Mutex::new(None));
    let (parts, body) = request.into_parts();
    let (charged, chunk_key, slot) = (quotas.clone(), key.clone(), refused.clone());
    let body = body.into_data_stream().map(move |chunk| {
        let bytes = chunk?;
        match charged.take_chunk(&chunk_key, QuotaKind::ProduceBytes, bytes.len() as u64) {
            Ok(()) => Ok(bytes),
            Err(throttled) => {
                *slot.lock() = Some(throttled);
                Err(axum::Error::new(BodyOverQuota))
            }
        }
    });
    let admission = Admission {
        key,
        body_refused: Some(refused),
    };
    Ok((
        Request::from_parts(parts, Body::from_stream(body)),
        Some(admission),
    ))
}

/// Charges a response's body to consume bytes: at once when its size is known, chunk by
/// chunk (delaying chunks while the client is in debt) when it streams.
/// Successful answers only: a refused or failed request read nothing.
pub fn charge_response(quotas: Quotas, key: QuotaKey, response: Response) -> Response {
    if !response.status().is_success() {
        return response;
    }
    if let Some(length) = response.body().size_hint().exact() {
        quotas.charge(&key, QuotaKind::ConsumeBytes, length);
        return response;
    }
    // An upgraded WebSocket has an empty body; its frames are charged by the socket itself.
    if response.headers().contains_key(header::UPGRADE) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().then(move |chunk| {
        let (quotas, key) = (quotas.clone(), key.clone());
        async move {
            if let Ok(bytes) = &chunk {
                let debt = quotas.charge(&key, QuotaKind::ConsumeBytes, bytes.len() as u64);
                if !debt.is_zero() {
                    quotas.count_delay();
                    tokio::time::sleep(debt).await;
                }
            }
            chunk
        }
    });
    Response::from_parts(parts, Body::from_stream(body))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use axum::extract::State;
    use axum::middleware::Next;
    use axum::routing::get;
    use axum::{middleware, Router};
    use tower::ServiceExt as _;

    use super::*;
    use crate::broker::quota::{BucketLimit, ClientLimits, QuotaPolicy};

    /// The quota part of the route guard, alone.
    async fn with_quotas(State(quotas): State<Quotas>, request: Request, next: Next) -> Response {
        match admit(&quotas, request) {
            Ok((request, Some(admission))) => admission.answer(quotas, next.run(request).await),
            Ok((request, None)) => next.run(request).await,
            Err(refused) => refused.into_response(),
        }
    }

    /// A route behind the quota layer, behind a stand-in for authentication that puts the
    /// `Principal` named by the `x-subject` header in the request (as the real one does).
    fn app(quotas: Quotas) -> Router {
        Router::new()
            .route("/v1/topics", get(|| async { "[]" }))
            .route("/readyz", get(|| async { "ok" }))
            .route_layer(middleware::from_fn_with_state(quotas, with_quotas))
            .layer(middleware::from_fn(
                |mut request: Request, next: Next| async move {
                    let subject = request
                        .headers()
                        .get("x-subject")
                        .and_then(|value| value.to_str().ok())
                        .map(str::to_string);
                    if let Some(subject) = subject {
                        request.extensions_mut().insert(Principal {
                            subject,
                            roles: vec![],
                            expires_at_ms: i64::MAX,
                        });
                    }
                    next.run(request).await
                },
            ))
    }

    async fn call(app: &Router, path: &str, subject: Option<&str>) -> Response {
        let mut request = axum::http::Request::get(path);
        if let Some(subject) = subject {
            request = request.header("x-subject", subject);
        }
        app.clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn two_per_second() -> ClientLimits {
        ClientLimits {
            requests: BucketLimit::new(2, None),
            ..ClientLimits::UNLIMITED
        }
    }

    #[tokio::test]
    async fn clients_are_told_apart_by_their_token_subject() {
        let app = app(Quotas::new(QuotaPolicy {
            defaults: two_per_second(),
            clients: HashMap::from([("bulk".to_string(), ClientLimits::UNLIMITED)]),
        }));
        for _ in 0..2 {
            assert_eq!(call(&app, "/v1/topics", Some("alice")).await.status(), 200);
        }
        let refused = call(&app, "/v1/topics", Some("alice")).await;
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(refused.into_body(), 4096)
            .await
            .unwrap();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["code"], "quota_exceeded");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("client 'alice' is over its requests_per_sec quota of 2"),
            "{problem}"
        );
        // Another subject has its own bucket; an overridden one has no limit; health is free.
        assert_eq!(call(&app, "/v1/topics", Some("bob")).await.status(), 200);
        for _ in 0..10 {
            assert_eq!(call(&app, "/v1/topics", Some("bulk")).await.status(), 200);
            assert_eq!(call(&app, "/readyz", Some("alice")).await.status(), 200);
        }
    }

    #[tokio::test]
    async fn without_quotas_nothing_is_refused() {
        let app = app(Quotas::unlimited());
        for _ in 0..100 {
            assert_eq!(call(&app, "/v1/topics", None).await.status(), 200);
        }
    }
}
