//! Request metrics: `herald_http_requests_total` and `herald_http_request_duration_seconds`,
//! labelled by method, route and status.
//!
//! The route label is the matched route pattern (`/v1/topics/{topic}`), never the raw path, so
//! the number of series stays bounded whatever clients send. Axum only knows the pattern after
//! routing, inside the router, so [`remember_route`] (a route layer) copies it onto the response,
//! where [`track`] (an outer layer, which also sees 404s and rejected bodies) reads it.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

pub const REQUESTS_TOTAL: &str = "herald_http_requests_total";
pub const REQUEST_DURATION_SECONDS: &str = "herald_http_request_duration_seconds";

/// The route label of requests no route matched.
const UNMATCHED: &str = "unmatched";

/// Route layer: copies the matched route pattern and the method onto the response (the
/// request's span is named by both, see `trace::response_span`).
pub async fn remember_route(request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let method = request.method().clone();
    let mut response = next.run(request).await;
    if let Some(matched) = matched {
        response.extensions_mut().insert(matched);
        response.extensions_mut().insert(method);
    }
    response
}

/// Outer layer: counts and times every request.
pub async fn track(request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let route = response
        .extensions()
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_string())
        .unwrap_or_else(|| UNMATCHED.to_string());
    let status = response.status().as_u16().to_string();
    let labels = [
        ("method", method.to_string()),
        ("route", route),
        ("status", status),
    ];
    metrics::counter!(REQUESTS_TOTAL, &labels).increment(1);
    metrics::histogram!(REQUEST_DURATION_SECONDS, &labels).record(started.elapsed().as_secs_f64());
    response
}

/// Standard methods by name, anything else as `other` (methods are client-chosen strings).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
