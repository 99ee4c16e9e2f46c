//! Per-request bounds: a server-side deadline on every request and a cap on requests in flight.
//!
//! A request must not outlive its usefulness: a client that gave up long ago should not keep a
//! handler (and what it holds: a forwarded call, a proposal waiting on a lost quorum) alive. So
//! every request runs under `request_timeout`, after which it answers `504 timeout` (a change
//! may or may not have been made) and its handler is dropped. And a node must not take on more
//! work than it can carry: past `max_concurrent_requests` in flight, a request is answered at
//! once with `503 overloaded` and `Retry-After`, having done nothing. Liveness, readiness and
//! metrics are exempt from the cap (and stay cheap), so a loaded node is not declared dead.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::api::problem::ApiError;
use crate::broker::ErrorCode;

/// Counter of requests refused because `max_concurrent_requests` were in flight.
pub const REFUSED_REQUESTS_TOTAL: &str = "herald_http_requests_refused_total";
/// Counter of requests that ran past `request_timeout_ms`.
pub const TIMED_OUT_REQUESTS_TOTAL: &str = "herald_http_requests_timed_out_total";

/// The bounds every request runs under.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// The longest a request may take before it answers 504.
    pub request_timeout: Duration,
    /// The most requests in flight at once; past it, 503 `overloaded`.
    pub max_concurrent_requests: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            request_timeout: Duration::from_secs(90),
            max_concurrent_requests: 10_000,
        }
    }
}

/// The shared state of the limits, which the envelope runs every request under.
#[derive(Clone)]
pub(crate) struct Limiter {
    limits: RequestLimits,
    in_flight: Arc<Semaphore>,
}

impl Limiter {
    pub(crate) fn new(limits: RequestLimits) -> Limiter {
        let permits = limits
            .max_concurrent_requests
            .clamp(1, Semaphore::MAX_PERMITS);
        Limiter {
            limits,
            in_flight: Arc::new(Semaphore::new(permits)),
        }
    }
}

/// Paths that answer about the node itself (never refused, never slow), event streams (which
/// last as long as the client listens and have their own cap, `max_sse_streams`) and the
/// WebSocket handshake (a socket lives past any request deadline and has its own limit,
/// `ws.max_connections`): neither cut nor counted here.
pub(crate) fn is_exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/v1/ws") || is_event_stream(path)
}

/// `/v1/topics/{topic}/events` (a topic name has no `/`).
fn is_event_stream(path: &str) -> bool {
    path.strip_prefix("/v1/topics/")
        .and_then(|rest| rest.strip_suffix("/events"))
        .is_some_and(|topic| !topic.is_empty() && !topic.contains('/'))
}

impl Limiter {
    /// Runs `handling` (the rest of a request's way) under the bounds: refused past the cap
    /// (then `handling` is dropped unpolled, having done nothing), ended at the deadline.
    /// Requests to `exempt` paths ([`is_exempt`]) run unbounded.
    pub(crate) async fn run(
        &self,
        exempt: bool,
        handling: impl Future<Output = Response>,
    ) -> Response {
        if exempt {
            return handling.await;
        }
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            metrics::counter!(REFUSED_REQUESTS_TOTAL).increment(1);
            return ApiError::new(
                ErrorCode::Overloaded,
                format!(
                    "the node has its maximum of {} requests in flight; nothing was done, retry later",
                    self.limits.max_concurrent_requests
                ),
            )
            .into_response();
        };
        let timeout = self.limits.request_timeout;
        match tokio::time::timeout(timeout, handling).await {
            Ok(response) => response,
            Err(_elapsed) => {
                metrics::counter!(TIMED_OUT_REQUESTS_TOTAL).increment(1);
                ApiError::new(
                    ErrorCode::Timeout,
                    format!(
                        "the request did not finish within the server's deadline of {} ms; a change it asked for may or may not have been made",
                        timeout.as_millis()
                    ),
                )
                .into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_exempt;

    #[test]
    fn only_event_streams_and_node_endpoints_are_exempt() {
        for path in [
            "/metrics",
            "/healthz",
            "/readyz",
            "/v1/topics/orders/events",
        ] {
            assert!(is_exempt(path), "{path}");
        }
        for path in [
            "/v1/topics/orders",
            "/v1/topics//events",
            "/v1/topics/orders/partitions/0/events",
            "/v1/topics/orders/messages",
            "/v1/events",
        ] {
            assert!(!is_exempt(path), "{path}");
        }
    }
}
