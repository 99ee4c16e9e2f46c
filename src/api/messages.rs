//! `/v1/topics/{topic}/messages` (produce) and `/v1/topics/{topic}/partitions/{partition}/messages`
//! (read a partition).

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::consume::{FetchQuery, FetchResponse};
use super::dto::produce::{
    decode_produce, ProduceQuery, ProduceRequest, ProduceResponse, RawValueBody,
};
use super::dto::topic::check_topic_name;
use super::extract::{ApiBytes, ApiPath, ApiQuery, ContentType};
use super::problem::{ApiResult, Problem};
use super::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(produce))
        .routes(routes!(fetch))
}

/// Produce messages: a JSON batch, or one message's raw bytes.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/messages",
    tag = "messages",
    params(("topic" = String, Path, description = "Topic name"), ProduceQuery),
    request_body(
        description = "`application/json`: a batch of messages; `application/octet-stream`: one message's value",
        content(
            (ProduceRequest = "application/json"),
            (inline(RawValueBody) = "application/octet-stream"),
        )
    ),
    responses(
        (status = 200, description = "One offset per message, in request order", body = ProduceResponse),
        (status = 400, description = "Malformed messages or parameters", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large` (body over the server limit) or `message_too_large` (over the topic's max_message_bytes)", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` (with Retry-After) or `unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn produce(
    State(broker): State<Broker>,
    ApiPath(topic): ApiPath<String>,
    ApiQuery(query): ApiQuery<ProduceQuery>,
    content_type: ContentType,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<ProduceResponse>> {
    check_topic_name(&topic, false)?;
    let messages = decode_produce(&content_type, &query, body)?;
    let acks = query.acks.unwrap_or_default().into();
    let offsets = broker.produce(&topic, messages, acks).await?;
    Ok(Json(offsets.into()))
}

/// Read a partition from an offset; with `max_wait_ms`, a long poll.
#[utoipa::path(
    get,
    path = "/v1/topics/{topic}/partitions/{partition}/messages",
    tag = "messages",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ("partition" = u32, Path, description = "Partition number"),
        FetchQuery,
    ),
    responses(
        (status = 200, description = "Messages from the offset on (possibly none)", body = FetchResponse),
        (status = 400, description = "Invalid offset, max_messages or max_wait_ms", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 416, description = "`offset_out_of_range`, with `log_start_offset` and `high_watermark`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` (with Retry-After) or `unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn fetch(
    State(broker): State<Broker>,
    ApiPath((topic, partition)): ApiPath<(String, u32)>,
    ApiQuery(query): ApiQuery<FetchQuery>,
) -> ApiResult<Json<FetchResponse>> {
    check_topic_name(&topic, true)?;
    let request = query.into_domain(topic, partition)?;
    Ok(Json(broker.fetch(request).await?.into()))
}
