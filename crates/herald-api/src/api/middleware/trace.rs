//! Tracing of client requests: the span every request's log lines belong to, with the
//! client's W3C trace id (`traceparent`), and the trace context a produced message carries to
//! its consumers.
//!
//! A request's span records its request id and, when the client sent a valid `traceparent`,
//! its trace id, so a JSON log line of any event in the request names both. When spans are
//! exported (`--otlp-endpoint`), the request's span is a server span in the client's trace,
//! named by its route (`POST /v1/topics/{topic}/messages`), with its status.
//!
//! A URI is recorded only through [`recordable_uri`]: browsers' WebSocket and event stream
//! requests carry their bearer token as `?access_token=`, which must not reach a log line or a
//! collector.

use std::borrow::Cow;
use std::time::Duration;

use axum::extract::MatchedPath;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;

use crate::api::middleware::request_id::RequestId;
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
        uri = %recordable_uri(request.uri()),
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

/// What replaces a query-string token wherever a URI is recorded.
pub const REDACTED: &str = "[redacted]";

/// The query parameter a token may travel in (`api::middleware::access::bearer_token`).
const TOKEN_PARAMETER: &str = "access_token";

/// `uri` as it may be recorded: the value of every `access_token` query parameter (however its
/// name is percent-encoded, as the token's reader decodes it) replaced by [`REDACTED`]; the rest
/// as it came. Borrowed when there is nothing to hide, so most requests pay no allocation.
pub fn recordable_uri(uri: &Uri) -> Cow<'_, str> {
    let Some(query) = uri.query() else {
        return Cow::Borrowed(uri.path_and_query().map_or("/", |whole| whole.as_str()));
    };
    let holds_token = |pair: &str| {
        let name = pair.split('=').next().unwrap_or_default();
        form_urlencoded::parse(name.as_bytes())
            .next()
            .is_some_and(|(decoded, _)| decoded == TOKEN_PARAMETER)
    };
    if !query.split('&').any(holds_token) {
        return Cow::Borrowed(uri.path_and_query().map_or("/", |whole| whole.as_str()));
    }
    let query: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| {
            if holds_token(pair) {
                Cow::Owned(format!("{TOKEN_PARAMETER}={REDACTED}"))
            } else {
                Cow::Borrowed(pair)
            }
        })
        .collect();
    Cow::Owned(format!("{}?{}", uri.path(), query.join("&")))
}

/// The first event in a request's span (at debug: `RUST_LOG=info,herald_api::api::middleware::trace=debug`
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

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(uri: &str) -> String {
        recordable_uri(&uri.parse::<Uri>().unwrap()).into_owned()
    }

    #[test]
    fn query_tokens_are_redacted_and_the_rest_kept() {
        assert_eq!(
            recorded("/v1/topics/t/events?from=earliest&access_token=eyJ.secret.sig"),
            "/v1/topics/t/events?from=earliest&access_token=[redacted]"
        );
        assert_eq!(
            recorded("/v1/ws?access_token=a&x=%20y&access_token=b"),
            "/v1/ws?access_token=[redacted]&x=%20y&access_token=[redacted]"
        );
        // A percent-encoded name is still the parameter the token is read from.
        assert_eq!(
            recorded("/v1/ws?access%5Ftoken=secret"),
            "/v1/ws?access_token=[redacted]"
        );
        assert_eq!(
            recorded("/v1/ws?access_token"),
            "/v1/ws?access_token=[redacted]"
        );
        // Nothing to hide: as it came.
        assert_eq!(
            recorded("/v1/topics?x=access_token"),
            "/v1/topics?x=access_token"
        );
        assert_eq!(recorded("/v1/topics"), "/v1/topics");
        assert!(matches!(
            recordable_uri(&"/v1/topics?a=1".parse::<Uri>().unwrap()),
            Cow::Borrowed(_)
        ));
    }
}
