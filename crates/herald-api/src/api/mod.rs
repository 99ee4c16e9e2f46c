//! The HTTP transport: axum routers, DTOs, problem+json errors and the OpenAPI document.
//!
//! Handlers are thin: extract, validate, make one call on [`Broker`], map the answer to a DTO.
//! Each resource has its own router (`topics`, `messages`, `offsets`, `groups`, `producers`,
//! `cluster`, `health`); they are merged here with the docs, the web console, the fallbacks and the
//! cross-cutting layers (body limit, request deadline and concurrency cap, metrics, tracing,
//! panic catching). `listener` bounds the open connections.

pub mod batch_body;
pub mod dto;
pub mod extract;
pub mod middleware;
pub mod openapi;
pub mod problem;
pub mod routes;
pub mod server;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRef};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use utoipa_axum::router::OpenApiRouter;

use crate::broker::Broker;

/// What the HTTP layer needs besides the broker.
pub struct ApiConfig {
    /// The largest request body accepted; larger ones get 413 `payload_too_large`.
    pub max_body_bytes: usize,
    /// Every request's deadline and the cap on requests in flight.
    pub limits: middleware::limits::RequestLimits,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// The node's stop signal, which long-lived streams follow.
    pub shutdown: server::shutdown::Shutdown,
    /// The cap and keepalive of server-sent event streams.
    pub event_streams: routes::events::EventStreamLimits,
    /// The WebSocket transport's limits and open sockets.
    pub ws: crate::ws::WsState,
    /// The authentication service (the built-in issuer and the external issuers it trusts),
    /// made once per node: its clones share the secret checks and failure limits.
    pub auth: crate::broker::auth::service::Auth,
    /// Where administrative actions and refused requests are recorded.
    pub auditing: middleware::audit_layer::Auditing,
    /// Per-client quotas, enforced on every request this node serves.
    pub quotas: crate::broker::quota::Quotas,
    /// Whether requests need a token and the right `rights` names (`[auth] enabled`).
    pub auth_enabled: bool,
    /// Whether `/metrics` stays public with authentication on.
    pub public_metrics: bool,
}

/// The state handlers extract from (as `State<Broker>` or `State<PrometheusHandle>`). One
/// `Arc`: axum clones the state for every request and every middleware on its way, and a
/// clone of the fields themselves (a dozen reference counts) showed as 5% of a single-message
/// produce's CPU.
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

impl std::ops::Deref for AppState {
    type Target = AppStateInner;

    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

/// What [`AppState`] holds.
pub struct AppStateInner {
    pub broker: Broker,
    pub metrics: PrometheusHandle,
    pub shutdown: server::shutdown::Shutdown,
    pub event_streams: routes::events::EventStreams,
    pub ws: crate::ws::WsState,
    pub auth: crate::broker::auth::service::Auth,
    /// The audit log, for refusals that are not HTTP answers (WebSocket operations).
    pub auditing: middleware::audit_layer::Auditing,
    pub access: crate::broker::auth::access::Access,
}

impl FromRef<AppState> for middleware::audit_layer::Auditing {
    fn from_ref(state: &AppState) -> Self {
        state.auditing.clone()
    }
}

impl FromRef<AppState> for crate::broker::auth::service::Auth {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

impl FromRef<AppState> for routes::events::EventStreams {
    fn from_ref(state: &AppState) -> Self {
        state.event_streams.clone()
    }
}

impl FromRef<AppState> for crate::ws::WsState {
    fn from_ref(state: &AppState) -> Self {
        state.ws.clone()
    }
}

impl FromRef<AppState> for server::shutdown::Shutdown {
    fn from_ref(state: &AppState) -> Self {
        state.shutdown.clone()
    }
}

impl FromRef<AppState> for Broker {
    fn from_ref(state: &AppState) -> Self {
        state.broker.clone()
    }
}

impl FromRef<AppState> for PrometheusHandle {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}

/// Every documented route, with its OpenAPI operations.
fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::document::base())
        .merge(routes::topics::router())
        .merge(routes::messages::router())
        .merge(routes::events::router())
        .merge(routes::group_events::router())
        .merge(routes::subscription_events::router())
        .merge(routes::offsets::router())
        .merge(routes::groups::router())
        .merge(routes::subscriptions::router())
        .merge(routes::redrive::router())
        .merge(routes::producers::router())
        .merge(routes::requests::router())
        .merge(routes::cluster::router())
        .merge(routes::backups::router())
        .merge(routes::schema_registry::router())
        .merge(routes::health::router())
        .merge(crate::ws::router())
        .merge(routes::oauth::router())
        .merge(routes::auth_clients::router())
        .merge(routes::audit::router())
        .merge(routes::auth_policies::router())
}

/// The full OpenAPI document of the HTTP API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = api_routes().split_for_parts().1;
    openapi::rules::apply(&mut document);
    document
}

/// The complete HTTP application: API routes, `/openapi.json`, `/docs`, fallbacks and layers.
pub fn router(broker: Broker, config: ApiConfig) -> Router {
    let (routes, mut document) = api_routes().split_for_parts();
    openapi::rules::apply(&mut document);
    let auth = config.auth;
    let access = crate::broker::auth::access::Access::new(
        config.auth_enabled,
        config.public_metrics,
        auth.clone(),
        broker.authorizer(),
    );
    let routes = routes
        .merge(openapi::docs::router(document))
        .merge(routes::examples::router())
        .merge(routes::console::router(config.auth_enabled))
        .with_state(AppState(Arc::new(AppStateInner {
            auth,
            access: access.clone(),
            broker,
            metrics: config.metrics,
            shutdown: config.shutdown,
            event_streams: routes::events::EventStreams::new(config.event_streams),
            ws: config.ws,
            auditing: config.auditing.clone(),
        })));
    with_layers(
        routes,
        Layers {
            max_body_bytes: config.max_body_bytes,
            limits: config.limits,
            auditing: Some(config.auditing),
            guard: middleware::route_guard::RouteGuard {
                access: Some(access),
                quotas: Some(config.quotas),
            },
        },
    )
}

/// What [`with_layers`] puts around the routes.
pub(crate) struct Layers {
    pub(crate) max_body_bytes: usize,
    pub(crate) limits: middleware::limits::RequestLimits,
    /// The audit log; none in tests of routes alone.
    pub(crate) auditing: Option<middleware::audit_layer::Auditing>,
    pub(crate) guard: middleware::route_guard::RouteGuard,
}

/// Wraps routes with what every request goes through: the route guard around each matched
/// route (route memory, panics, authentication, quotas), the fallbacks, the body limit, and
/// outermost the envelope (request id, audit, metrics, span, limits). Separate from
/// [`router`] so tests can check fallbacks and limits on routes that need no broker.
pub(crate) fn with_layers(routes: Router, layers: Layers) -> Router {
    let envelope = middleware::envelope::Envelope {
        auditing: layers.auditing,
        limiter: middleware::limits::Limiter::new(layers.limits),
    };
    routes
        .method_not_allowed_fallback(problem::method_not_allowed_fallback)
        .route_layer(axum::middleware::from_fn_with_state(
            layers.guard,
            middleware::route_guard::guard,
        ))
        .fallback(problem::not_found_fallback)
        .layer(DefaultBodyLimit::max(layers.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            envelope,
            middleware::envelope::wrap,
        ))
}

#[cfg(test)]
mod tests;
