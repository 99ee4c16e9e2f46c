//! `/v1/cluster`: the nodes and who leads what.

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::cluster::ClusterDto;
use super::problem::{ApiResult, Problem};
use super::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(cluster_info))
}

/// The cluster's nodes and its metadata leader.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    responses(
        (status = 200, description = "The cluster", body = ClusterDto),
        (status = 503, description = "`unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn cluster_info(State(broker): State<Broker>) -> ApiResult<Json<ClusterDto>> {
    Ok(Json(broker.cluster_info().await?.into()))
}
