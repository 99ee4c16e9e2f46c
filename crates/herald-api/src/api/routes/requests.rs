//! `/v1/topics/{topic}/requests` (publish a request and wait for its reply) and `/v1/replies`
//! (a responder's reply). The waiting, forwarding and limits live in `broker::requests`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::produce::ProduceMessageDto;
use crate::api::dto::requests::{ReplyRequest, RequestAnswerDto, RequestQuery};
use crate::api::dto::topic::check_topic_name;
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::requests::request_timeout;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(request))
        .routes(routes!(reply))
}

/// Publish a request and wait for its reply.
///
/// The message is written to the topic (`acks=all`) like any produced message, with two
/// headers added: `herald-reply-to` and `herald-correlation-id`. A responder that reads it
/// posts its answer to `POST /v1/replies` (on any node) with those two values; this call then
/// answers with the reply. No reply within `timeout_ms`: 504 `timeout` (the request stays
/// written; a reply after that is refused with 404).
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/requests",
    tag = "requests",
    params(
        ("topic" = String, Path, description = "Topic name"),
        RequestQuery,
    ),
    request_body(content = ProduceMessageDto, description = "The request: one message, as produced (the headers `herald-reply-to` and `herald-correlation-id` are the broker's and may not be set)"),
    responses(
        (status = 200, description = "The reply", body = RequestAnswerDto),
        (status = 400, description = "Malformed message, a reserved header, or timeout_ms out of range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large` or `message_too_large` (over the topic's max_message_bytes)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Nothing was published, retry later (with Retry-After): `overloaded` (the node has max_waiting_requests waiting), `no_leader` or `unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: no reply in time (the request was written), or the publish's outcome is unknown", body = Problem, content_type = "application/problem+json"),
        (status = 507, description = "`insufficient_storage`: the partition leader's data directory is under its disk reserve; nothing was published (Retry-After)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn request(
    State(broker): State<Broker>,
    ApiPath(topic): ApiPath<String>,
    ApiQuery(query): ApiQuery<RequestQuery>,
    ApiJson(message): ApiJson<ProduceMessageDto>,
) -> ApiResult<Json<RequestAnswerDto>> {
    check_topic_name(&topic)?;
    let timeout = request_timeout(query.timeout_ms)?;
    let message = message.into_domain_as(&"the request")?;
    let answer = broker.requests().request(&topic, message, timeout).await?;
    Ok(Json(RequestAnswerDto::from_domain(&topic, answer)))
}

/// Reply to a request.
///
/// `reply_to` and `correlation_id` are the request's `herald-reply-to` and
/// `herald-correlation-id` headers. Any node takes the reply and passes it to the node the
/// request waits on. The first reply to a request is delivered; a later one, or one after the
/// request timed out, is 404 `no_waiting_request`. The reply is held to the request topic's
/// `max_message_bytes` (413).
#[utoipa::path(
    post,
    path = "/v1/replies",
    tag = "requests",
    request_body = ReplyRequest,
    responses(
        (status = 204, description = "Delivered to the waiting request"),
        (status = 400, description = "Malformed body or ids, or both or neither of value and value_b64", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`no_waiting_request`: nobody waits for this reply (timed out, answered already, the requester's node restarted, or unknown ids)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large` or `message_too_large` (over the request topic's max_message_bytes; the request still waits)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`: the requester's node cannot be reached; the reply was not delivered", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: the requester's node did not answer; the reply may or may not have been delivered", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn reply(
    State(broker): State<Broker>,
    ApiJson(body): ApiJson<ReplyRequest>,
) -> ApiResult<StatusCode> {
    broker.requests().reply(body.into_domain()?).await?;
    Ok(StatusCode::NO_CONTENT)
}
