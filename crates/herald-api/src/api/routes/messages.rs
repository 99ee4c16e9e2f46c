//! `/v1/topics/{topic}/messages` (produce) and `/v1/topics/{topic}/partitions/{partition}/messages`
//! (read a partition; produce one batch in the stored layout to it).

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::consume::{FetchQuery, FetchResponse};
use crate::api::dto::idempotence::idempotency_key;
use crate::api::dto::produce::{
    decode_produce, ProduceQuery, ProduceRequest, ProduceResponse, RawValueBody,
};
use crate::api::dto::produce_batch::{
    accepts_batches, check_batch_content_type, BatchBody, BatchProduceQuery, BatchProduceResponse,
    BATCH_CONTENT_TYPE,
};
use crate::api::dto::topic::check_topic_name;
use crate::api::extract::{ApiBytes, ApiPath, ApiQuery, ContentType};
use crate::api::problem::{ApiResult, Problem};
use crate::api::routes::produce_call::ProduceTo;
use crate::api::AppState;
use crate::broker::{BatchFetch, Broker};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(produce))
        .routes(routes!(fetch, produce_batch))
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
        (status = 507, description = "`insufficient_storage`: the partition leader's data directory is under its disk reserve; nothing was written (Retry-After)", body = Problem, content_type = "application/problem+json"),
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
    let produce = ProduceTo::new(topic)?.keyed(idempotency_key(&headers)?)?;
    let mut decoded = decode_produce(&content_type, &query, body)?;
    crate::api::middleware::trace::stamp_messages(&headers, &mut decoded.messages);
    produce.with(decoded, query.acks).send(&broker).await
}

/// Produce one batch in Herald's stored layout to a partition.
///
/// The body is one batch, byte for byte as docs/binary-batches.md describes; it is checked
/// completely (layout, CRC-32C, every record, the topic's limits) and stored as it is. Its
/// records get the offsets `base_offset` to `base_offset + record_count - 1`.
///
/// A batch whose header carries an idempotent producer's stamp (from `POST /v1/producers`,
/// needs `acks=all`) goes through the partition's dedup window: a batch whose sequences were
/// written before is answered with `"duplicate": true` and not written again, a gap is refused.
#[utoipa::path(
    post,
    path = "/v1/topics/{topic}/partitions/{partition}/messages",
    tag = "messages",
    params(
        ("topic" = String, Path, description = "Topic name"),
        ("partition" = u32, Path, description = "Partition number"),
        BatchProduceQuery,
    ),
    request_body(
        description = "One batch in the stored layout (docs/binary-batches.md)",
        content((inline(BatchBody) = "application/vnd.herald.batch")),
    ),
    responses(
        (status = 200, description = "Written: where the batch's records start; or, for an idempotent producer's batch written before, `\"duplicate\": true` and nothing written now", body = BatchProduceResponse),
        (status = 400, description = "`invalid_batch`, `batch_crc_mismatch` or `unsupported_batch_version` (the detail names the check), or `invalid_request` for a bad parameter (an idempotent producer's batch with acks other than `all`); nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "An idempotent producer's batch: `out_of_order_sequence` (with `expected_sequence`) or `producer_fenced`; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large` (body over the server limit) or `message_too_large` (a record over the topic's max_message_bytes)", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`: the body must be `application/vnd.herald.batch`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Nothing was written, retry later (with Retry-After): `no_leader`, `overloaded` or `unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: the outcome is unknown, the batch may be written", body = Problem, content_type = "application/problem+json"),
        (status = 507, description = "`insufficient_storage`: the partition leader's data directory is under its disk reserve; nothing was written (Retry-After)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn produce_batch(
    State(broker): State<Broker>,
    ApiPath((topic, partition)): ApiPath<(String, u32)>,
    ApiQuery(query): ApiQuery<BatchProduceQuery>,
    content_type: ContentType,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<BatchProduceResponse>> {
    check_topic_name(&topic)?;
    check_batch_content_type(&content_type)?;
    let acks = query.acks.unwrap_or_default().into();
    let landing = broker
        .produce()
        .produce_batch(&topic, partition, body, acks)
        .await?;
    Ok(Json(landing.into()))
}

/// Read a partition from an offset; with `max_wait_ms`, a long poll.
///
/// With `Accept: application/vnd.herald.batch` the answer is the stored batches as they are
/// (docs/binary-batches.md): each an 8-byte big-endian base offset followed by the batch, the
/// first possibly starting before `offset`; the offsets are in the `Herald-Next-Offset`,
/// `Herald-High-Watermark` and `Herald-Log-Start-Offset` headers.
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
        (status = 200, description = "Messages from the offset on (possibly none); with `Accept: application/vnd.herald.batch`, the stored batches framed as docs/binary-batches.md describes",
            content(
                (FetchResponse = "application/json"),
                (inline(BatchBody) = "application/vnd.herald.batch"),
            ),
            headers(
                ("Herald-Next-Offset" = u64, description = "Batch reads: the offset to read from next"),
                ("Herald-High-Watermark" = u64, description = "Batch reads: the partition's high watermark"),
                ("Herald-Log-Start-Offset" = u64, description = "Batch reads: the partition's first offset"),
            )
        ),
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
    headers: HeaderMap,
) -> ApiResult<Response> {
    check_topic_name(&topic)?;
    let decode = query.decode.is_some();
    let request = query.into_domain(topic, partition)?;
    if accepts_batches(&headers) {
        return Ok(batches_response(
            broker.fetch().fetch_batches(request).await?,
        ));
    }
    let result = broker.fetch().fetch(request).await?;
    if decode {
        return Ok(Json(FetchResponse::decoded(&broker, result).await).into_response());
    }
    Ok(Json(FetchResponse::from(result)).into_response())
}

/// Stored batches as the body, each behind its base offset, without copying them: one chunk
/// per prefix and one per batch.
fn batches_response(fetch: BatchFetch) -> Response {
    let mut chunks = Vec::with_capacity(fetch.batches.len() * 2);
    for (base_offset, batch) in fetch.batches {
        chunks.push(bytes::Bytes::copy_from_slice(&base_offset.to_be_bytes()));
        chunks.push(batch);
    }
    let mut response = Response::new(axum::body::Body::new(
        crate::api::batch_body::ChunksBody::new(chunks),
    ));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(BATCH_CONTENT_TYPE),
    );
    for (name, value) in [
        ("herald-next-offset", fetch.next_offset),
        ("herald-high-watermark", fetch.high_watermark),
        ("herald-log-start-offset", fetch.log_start_offset),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    response
}
