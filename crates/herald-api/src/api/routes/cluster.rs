//! `/v1/cluster`: the nodes and who leads what; adding and draining nodes.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::cluster::{AddNodeDto, ClusterDto, NodeDto};
use crate::api::dto::rebalance::RebalancePlanDto;
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(cluster_info))
        .routes(routes!(add_node))
        .routes(routes!(drain_node))
        .routes(routes!(rebalance_plan, start_rebalance))
}

/// The cluster's nodes, their status, what each leads, and the metadata leader.
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
    Ok(Json(broker.nodes().cluster_info().await?.into()))
}

/// Add a node to the running cluster. Start it first with `herald serve --join`; it follows the
/// metadata as a learner and takes replicas of partitions created or moved from then on.
#[utoipa::path(
    post,
    path = "/v1/cluster/nodes",
    tag = "cluster",
    request_body = AddNodeDto,
    responses(
        (status = 201, description = "The node was added", body = NodeDto),
        (status = 200, description = "The node already is a member with these addresses", body = NodeDto),
        (status = 400, description = "Invalid node id or addresses", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`node_exists`: the id belongs to a node with other addresses", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`: no metadata leader", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn add_node(
    State(broker): State<Broker>,
    ApiJson(request): ApiJson<AddNodeDto>,
) -> ApiResult<(StatusCode, Json<NodeDto>)> {
    let (created, node) = broker
        .nodes()
        .add_node(request.node_id, request.http_addr, request.raft_addr)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(node.into())))
}

/// Drain a node: its replicas move to other nodes, then it leaves the cluster (it disappears
/// from `GET /v1/cluster` when done).
#[utoipa::path(
    delete,
    path = "/v1/cluster/nodes/{id}",
    tag = "cluster",
    params(("id" = u64, Path, minimum = 1, maximum = 9223372036854775807_u64, description = "Node id, 1 to 9223372036854775807")),
    responses(
        (status = 202, description = "Draining started", body = NodeDto),
        (status = 404, description = "`node_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`cannot_drain`: the other nodes cannot hold the replication factor", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`: no metadata leader", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn drain_node(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<(StatusCode, Json<NodeDto>)> {
    let node = broker.nodes().drain_node(id).await?;
    Ok((StatusCode::ACCEPTED, Json(node.into())))
}

/// What a rebalance would move now, and each node's share of replicas and preferred
/// leaderships before and after (a dry run: nothing moves).
#[utoipa::path(
    get,
    path = "/v1/cluster/rebalance",
    tag = "cluster",
    responses(
        (status = 200, description = "The plan", body = RebalancePlanDto),
    )
)]
async fn rebalance_plan(State(broker): State<Broker>) -> Json<RebalancePlanDto> {
    Json(broker.nodes().rebalance_plan().into())
}

/// Rebalance now: moves replicas and preferred leaderships until nodes hold about equal
/// shares, `rebalance.max_moves` partitions copying at a time, the copies held to
/// `raft.catch_up_bytes_per_sec`. Answers the plan at once; the moves go on in the background
/// (watch `moving` and the plan shrink with `GET`).
#[utoipa::path(
    post,
    path = "/v1/cluster/rebalance",
    tag = "cluster",
    responses(
        (status = 202, description = "Started (or already running): the plan being carried out", body = RebalancePlanDto),
        (status = 200, description = "Nothing to move", body = RebalancePlanDto),
        (status = 409, description = "`cannot_rebalance`: a node is draining", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`: not every node runs a release that knows replica moves yet", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn start_rebalance(
    State(broker): State<Broker>,
) -> ApiResult<(StatusCode, Json<RebalancePlanDto>)> {
    let plan = broker.nodes().start_rebalance()?;
    let status = if plan.started {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(plan.into())))
}
