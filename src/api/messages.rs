//! `/v1/topics/{topic}/messages` (produce) and `/v1/topics/{topic}/partitions/{partition}/messages`
//! (read a partition).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::consume::{FetchQuery, FetchResponse};
use super::dto::idempotence::idempotency_key;
use super::dto::produce::{
    decode_produce, ProduceQuery, ProduceRequest, ProduceResponse, RawValueBody,
};
use super::dto::topic::check_topic_name;
use super::extract::{ApiBytes, ApiPath, ApiQuery, ContentType};
use super::problem::{ApiResult, Problem};
use super::AppState;
use crate::broker::{Broker, Idempotence};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(produce))
        .routes(routes!(fetch))
}

/// Produce messages: a JSON batch, or one message's raw bytes.
///
/// Idempotent producing (both need `acks=all`): with an `Idempotency-Key` header, a retry of
/// the same request within the topic's `idempotency_window_ms` writes nothing again and answers
/// the first offsets with `"duplicate": true`; with `producer_id`, `producer_epoch` and
/// `sequence` (from `POST /v1/producers`), a sequence already written is acknowledged without a
/// second write, a gap is refused.
///
/// Each partition writes or refuses its share of the messages on its own: when some partitions
/// wrote theirs and others did not, the answer is 207 with an `error` on each message that
/// was not written.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/messages",
    tag = "messages",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ProduceQuery,
        ("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters: a retry with the same key (same topic) within the dedup window answers the first offsets and writes nothing again"),
    ),
    request_body(
        description = "`application/json`: a batch of messages; `application/octet-stream`: one message's value",
        content(
            (ProduceRequest = "application/json"),
            (inline(RawValueBody) = "application/octet-stream"),
        )
    ),
    responses(
        (status = 200, description = "One offset per message, in request order", body = ProduceResponse),
        (status = 207, description = "Partly written: the partitions of some messages refused them (or did not answer in time) while others wrote theirs. Every entry is there, in request order; an entry with `error` (the problem its partition answered, `offset` null) was not written, or for `timeout` may have been: retry exactly those, and for `timeout` only with an Idempotency-Key. `Retry-After` when a failed partition's problem asks for one", body = ProduceResponse),
        (status = 400, description = "Malformed messages or parameters; an idempotent request with acks other than `all`, a bad Idempotency-Key, or producer fields on messages for several partitions", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`out_of_order_sequence` (with `expected_sequence`), `producer_fenced` or `idempotency_key_reused`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large` (body over the server limit) or `message_too_large` (over the topic's max_message_bytes)", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Nothing was written, retry later (with Retry-After): `no_leader`, `overloaded` (the partition holds max_queued_bytes_per_partition of messages not yet written) or `unavailable` (e.g. the messages were still queued when the produce timeout passed)", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: the outcome is unknown, the messages may be written", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn produce(
    State(broker): State<Broker>,
    ApiPath(topic): ApiPath<String>,
    ApiQuery(query): ApiQuery<ProduceQuery>,
    headers: HeaderMap,
    content_type: ContentType,
    ApiBytes(body): ApiBytes,
) -> ApiResult<ProduceResponse> {
    check_topic_name(&topic, false)?;
    let idempotency_key = idempotency_key(&headers)?;
    let mut decoded = decode_produce(&content_type, &query, body)?;
    super::trace::stamp_messages(&headers, &mut decoded.messages);
    let acks = query.acks.unwrap_or_default().into();
    let idempotence = Idempotence {
        idempotency_key,
        producer: decoded.producer,
    };
    let answer = broker
        .produce(&topic, decoded.messages, acks, idempotence)
        .await?;
    Ok(answer.into())
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
