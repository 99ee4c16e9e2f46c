//! Tracing of client requests: the span every request's log lines belong to, with the
//! client's W3C trace id (`traceparent`), and the trace context a produced message carries to
//! its consumers.
//!
//! A request's span records its request id and, when the client sent a valid `traceparent`,
//! its trace id, so a JSON log line of any event in the request names both. When spans are
//! exported (`--otlp-endpoint`), the request's span is a server span in the client's trace,
//! named by its route (`POST /v1/topics/{topic}/messages`), with its status.

use std::time::Duration;

use axum::extract::MatchedPath;
use axum::http::HeaderMap;
use axum::response::Response;

use super::request_id::RequestId;
use crate::broker::ProduceMessage;
use crate::telemetry::otlp::{exporting, rename, set_remote_parent};
use crate::telemetry::trace_context::{TraceParent, TRACEPARENT};

/// The span of a request (the envelope makes it): method, URI, request id (the envelope gave
/// it one first) and the client's trace id.
pub fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    let id = request
        .extensions()
        .get::<RequestId>()
        .map(RequestId::as_str)
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        uri = %request.uri(),
        version = ?request.version(),
        request_id = id,
        trace_id = tracing::field::Empty,
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    // Only for the exporter: each field recorded costs the log layer a re-serialization.
    // Recorded before the parent is set, which starts the exported span.
    if exporting() {
        span.record("otel.name", request.method().as_str());
        span.record("otel.kind", "server");
    }
    if let Some(trace) = client_traceparent(request.headers()) {
        span.record("trace_id", trace.trace_id_hex().as_str());
        set_remote_parent(&span, &trace);
    }
    span
}

/// The first event in a request's span (at debug: `RUST_LOG=info,herald::api::trace=debug`
/// logs a line as each request starts and ends).
pub fn request_started(span: &tracing::Span) {
    span.in_scope(|| tracing::debug!("started processing request"));
}

/// Completes a request's span once its response is ready: the route it matched (which names
/// the exported span, as OpenTelemetry's HTTP conventions ask) and the status, a 5xx marking
/// the span failed.
pub fn response_span(response: &Response, latency: Duration, span: &tracing::Span) {
    let status = response.status();
    tracing::debug!(
        status = status.as_u16(),
        latency_ms = latency.as_millis() as u64,
        "finished processing request"
    );
    if !exporting() {
        return;
    }
    if let Some(route) = response.extensions().get::<MatchedPath>() {
        span.record("http.route", route.as_str());
        if let Some(method) = response.extensions().get::<axum::http::Method>() {
            rename(span, format!("{method} {}", route.as_str()));
        }
    }
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
}

/// Gives every message without a `traceparent` header the client's `traceparent` (the
/// request's), so consumers can join the producer's trace. A message that names its own trace
/// keeps it. The header is an ordinary message header (it counts toward the message's size),
/// so every delivery (fetch, poll, pull, WebSocket, SSE) carries it.
pub fn stamp_messages(headers: &HeaderMap, messages: &mut [ProduceMessage]) {
    let Some(trace) = client_traceparent(headers) else {
        return;
    };
    let value = trace.header_value();
    for message in messages {
        let named = message
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(TRACEPARENT));
        if !named {
            message
                .headers
                .push((TRACEPARENT.to_string(), value.clone()));
        }
    }
}

fn client_traceparent(headers: &HeaderMap) -> Option<TraceParent> {
    headers
        .get(TRACEPARENT)
        .and_then(|value| value.to_str().ok())
        .and_then(TraceParent::parse)
}
