//! `/v1/topics/{topic}/partitions/{partition}/offsets`: offset lookup by timestamp.

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::consume::{OffsetDto, OffsetForTimestampQuery};
use crate::api::dto::topic::check_topic_name;
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(offset_for_timestamp))
}

/// The first offset whose timestamp is at or after `timestamp` (the high watermark if none).
#[utoipa::path(
    get,
    path = "/v1/topics/{topic}/partitions/{partition}/offsets",
    tag = "messages",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ("partition" = u32, Path, description = "Partition number"),
        OffsetForTimestampQuery,
    ),
    responses(
        (status = 200, description = "The offset", body = OffsetDto),
        (status = 400, description = "Missing or invalid timestamp", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` (with Retry-After) or `unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn offset_for_timestamp(
    State(broker): State<Broker>,
    ApiPath((topic, partition)): ApiPath<(String, u32)>,
    ApiQuery(query): ApiQuery<OffsetForTimestampQuery>,
) -> ApiResult<Json<OffsetDto>> {
    check_topic_name(&topic)?;
    let timestamp = query.checked()?;
    let offset = broker
        .fetch()
        .offset_for_timestamp(&topic, partition, timestamp)
        .await?;
    Ok(Json(OffsetDto { offset }))
}
