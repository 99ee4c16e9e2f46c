//! `/healthz` (the process is alive), `/readyz` (it can serve), `/metrics` (Prometheus text).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use metrics_exporter_prometheus::PrometheusHandle;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::cluster::{HealthDto, ReadinessDto};
use crate::api::AppState;
use crate::broker::Broker;

/// The Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// Liveness: answers as long as the process serves HTTP.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "Alive", body = HealthDto))
)]
pub(crate) async fn healthz() -> Json<HealthDto> {
    Json(HealthDto {
        status: "ok".to_string(),
    })
}

/// Readiness: storage is open and every local partition has a known leader.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready", body = ReadinessDto, example = json!({"status": "ready"})),
        (status = 503, description = "Not ready, with the reasons", body = ReadinessDto,
         example = json!({"status": "not_ready", "reasons": ["partition orders/0 has no leader"]})),
    )
)]
async fn readyz(State(broker): State<Broker>) -> (StatusCode, Json<ReadinessDto>) {
    let readiness = broker.nodes().readiness().await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness.into()))
}

/// Metrics in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain"))
)]
async fn metrics(
    State(handle): State<PrometheusHandle>,
    State(broker): State<Broker>,
) -> impl IntoResponse {
    let mut text = handle.render();
    if let Some(gauges) = broker.groups().group_gauges() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&crate::api::routes::groups::render_gauges(&gauges));
    }
    for rendered in [
        crate::api::routes::node_metrics::render_raft(&broker.nodes().raft_statuses()),
        crate::api::routes::node_metrics::render_storage(&broker.nodes().storage_gauges()),
        crate::api::routes::node_metrics::render_lag_ages(&broker.groups().group_lag_ages().await),
        crate::api::routes::process_metrics::render_process(),
    ] {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&rendered);
    }
    let subscriptions = broker.subscriptions().local_gauges().await;
    if !subscriptions.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&crate::api::routes::subscriptions::render_gauges(
            &subscriptions,
        ));
    }
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text)
}
