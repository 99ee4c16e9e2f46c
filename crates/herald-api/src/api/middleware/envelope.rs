//! The envelope: the one layer every request passes first, outside the router, and its answer
//! last. In order: the request id, the audit log's view of the request, the metrics timer,
//! the request's span, then the limits (in-flight cap, deadline) around the router.
//!
//! One layer rather than one per concern: each `from_fn` layer boxes its future and clones the
//! service below it for every request. Profiled on single-message produces (64 connections,
//! 2 cores), the nine layers this and the route guard replace took 2.7 times the CPU of the
//! produce handler itself (`docs/architecture.md`, Layers).

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::api::middleware::audit_layer::{AuditStart, Auditing};
use crate::api::middleware::limits::{self, Limiter};
use crate::api::middleware::metrics_layer::RequestTimer;
use crate::api::middleware::{request_id, trace};

/// What the envelope needs: the audit log (none in tests of routes alone) and the limits.
#[derive(Clone)]
pub(crate) struct Envelope {
    pub(crate) auditing: Option<Auditing>,
    pub(crate) limiter: Limiter,
}

/// The layer (`axum::middleware::from_fn_with_state`).
pub(crate) async fn wrap(
    State(envelope): State<Envelope>,
    mut request: Request,
    next: Next,
) -> Response {
    let assigned = request_id::assign(&mut request);
    let audit = envelope
        .auditing
        .as_ref()
        .map(|auditing| AuditStart::of(auditing, &request));
    let timer = RequestTimer::start(&request);
    let span = trace::request_span(&request);
    trace::request_started(&span);
    let exempt = limits::is_exempt(request.uri().path());
    let registry = crate::api::problem::is_registry_path(request.uri().path());
    let response = envelope
        .limiter
        .run(exempt, next.run(request))
        .instrument(span.clone())
        .await;
    span.in_scope(|| trace::response_span(&response, timer.elapsed(), &span));
    drop(span);
    timer.record(&response);
    let response = match (audit, &envelope.auditing) {
        (Some(audit), Some(auditing)) => audit.finish(auditing, response).await,
        _ => response,
    };
    request_id::answer(response, assigned, registry).await
}
