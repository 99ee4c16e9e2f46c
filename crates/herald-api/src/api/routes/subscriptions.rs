//! `/v1/subscriptions`: queue subscriptions (see `docs/queues.md`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use std::fmt::Write as _;
use std::time::Duration;

use crate::api::dto::subscriptions::{
    AckRequest, AckResponse, ExtendRequest, ExtendResponse, NackRequest, NackResponse, PullRequest,
    PullResponse, PutSubscriptionRequest, SeekRequest, SeekResponse, SubscriptionDto,
    SubscriptionListDto,
};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::auth::operation::Operation;
use crate::broker::subscriptions::{PutOutcome, Settle, SubscriptionGauge};
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_subscriptions))
        .routes(routes!(
            put_subscription,
            get_subscription,
            delete_subscription
        ))
        .routes(routes!(pull))
        .routes(routes!(ack))
        .routes(routes!(nack))
        .routes(routes!(extend))
        .routes(routes!(seek))
}

/// Create a subscription, or change its settings.
///
/// 201 when created; 200 when it existed (with the same or new settings). The topic and
/// start position are fixed at creation.
#[utoipa::path(
    put,
    path = "/v1/subscriptions/{sub}",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = PutSubscriptionRequest,
    responses(
        (status = 200, description = "The subscription existed; its settings now", body = SubscriptionDto),
        (status = 201, description = "Created", body = SubscriptionDto),
        (status = 400, description = "Invalid name or settings (a dead-letter topic equal to the topic)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`: the topic or dead-letter topic", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`subscription_conflict`: the topic or start would change", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn put_subscription(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<PutSubscriptionRequest>,
) -> ApiResult<(StatusCode, Json<SubscriptionDto>)> {
    caller
        .authorize(&Operation::PutSubscription {
            topic: &request.topic,
            dead_letter_topic: request
                .dead_letter_policy
                .as_ref()
                .map(|dead_letter| dead_letter.topic.as_str()),
        })
        .await?;
    let (meta, outcome) = broker
        .subscriptions()
        .put(&name, request.into_domain())
        .await?;
    let status = match outcome {
        PutOutcome::Created => StatusCode::CREATED,
        PutOutcome::Updated | PutOutcome::Unchanged => StatusCode::OK,
    };
    Ok((status, Json(meta.into())))
}

/// Describe a subscription, with its counts (`backlog`, `in_flight`, `delayed`,
/// `dead_lettered`) over its topic's partitions and the age of its oldest message not done
/// (`oldest_unacked_age_seconds`).
#[utoipa::path(
    get,
    path = "/v1/subscriptions/{sub}",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionDto),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`: a partition's counts are unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_subscription(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<SubscriptionDto>> {
    let queues = broker.subscriptions();
    let meta = queues.get(&name)?;
    let stats = queues.stats(&meta).await?;
    let redrive = queues.redrive_job(meta.id);
    Ok(Json(
        SubscriptionDto::from(meta)
            .with_stats(stats)
            .with_redrive(redrive),
    ))
}

/// Delete a subscription and its delivery state.
#[utoipa::path(
    delete,
    path = "/v1/subscriptions/{sub}",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_subscription(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    broker.subscriptions().delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List subscriptions.
#[utoipa::path(
    get,
    path = "/v1/subscriptions",
    tag = "subscriptions",
    responses((status = 200, description = "Every subscription, by name", body = SubscriptionListDto))
)]
async fn list_subscriptions(State(broker): State<Broker>) -> Json<SubscriptionListDto> {
    Json(SubscriptionListDto {
        subscriptions: broker
            .subscriptions()
            .list()
            .into_iter()
            .map(Into::into)
            .collect(),
    })
}

/// Lease messages.
///
/// Leases up to `max_messages` messages over the topic's partitions: redeliveries that are
/// due first, then new messages. Each is held for this puller until the subscription's ack
/// deadline; ack it with its `ack_id`, or it is delivered again after the retry policy's
/// backoff. With nothing to deliver, waits up to `max_wait_ms`.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{sub}/pull",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = PullRequest,
    responses(
        (status = 200, description = "The leased messages (possibly none)", body = PullResponse),
        (status = 400, description = "Invalid limits", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` or `unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: a lease's outcome is unknown (its messages come back after the deadline)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn pull(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<PullRequest>,
) -> ApiResult<Json<PullResponse>> {
    let messages = broker
        .subscriptions()
        .pull(
            &name,
            request.max_messages,
            Duration::from_millis(request.max_wait_ms),
        )
        .await?;
    if request.decode.is_some() {
        return Ok(Json(PullResponse::decoded(&broker, messages).await));
    }
    Ok(Json(PullResponse {
        messages: messages.into_iter().map(Into::into).collect(),
    }))
}

/// Ack messages: they are done and never delivered again.
///
/// An ack whose lease expired, or whose message was delivered again since, is answered in
/// `expired` and changes nothing: the message is (or will be) with another delivery.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{sub}/ack",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = AckRequest,
    responses(
        (status = 200, description = "Which ack ids were acked and which had expired", body = AckResponse),
        (status = 400, description = "A malformed ack id, or one of another subscription: nothing was acked", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: outcome unknown; acking again is safe", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn ack(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<AckRequest>,
) -> ApiResult<Json<AckResponse>> {
    let settled = broker
        .subscriptions()
        .settle(&name, request.ack_ids(), Settle::Ack)
        .await?;
    Ok(Json(AckResponse {
        acked: settled.done,
        expired: settled.expired,
    }))
}

/// Nack messages: they are delivered again after `delay_ms` (or the retry policy's backoff);
/// with `dead_letter: true` they go to the dead-letter topic instead (reason `nacked`).
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{sub}/nack",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = NackRequest,
    responses(
        (status = 200, description = "Which ack ids were nacked and which had expired", body = NackResponse),
        (status = 400, description = "A malformed ack id, one of another subscription, a delay out of range, or `dead_letter` without a dead-letter policy or with `delay_ms`: nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: outcome unknown", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn nack(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<NackRequest>,
) -> ApiResult<Json<NackResponse>> {
    let (ack_ids, settle) = request.into_parts();
    let settled = broker
        .subscriptions()
        .settle(&name, ack_ids, settle)
        .await?;
    Ok(Json(NackResponse {
        nacked: settled.done,
        expired: settled.expired,
    }))
}

/// Extend leases: their deadline becomes now plus `ack_deadline_ms`.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{sub}/extend",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = ExtendRequest,
    responses(
        (status = 200, description = "Which leases were extended and which had expired", body = ExtendResponse),
        (status = 400, description = "A malformed ack id, one of another subscription, or a deadline out of range: nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: outcome unknown", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn extend(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<ExtendRequest>,
) -> ApiResult<Json<ExtendResponse>> {
    let (ack_ids, settle) = request.into_parts();
    let settled = broker
        .subscriptions()
        .settle(&name, ack_ids, settle)
        .await?;
    Ok(Json(ExtendResponse {
        extended: settled.done,
        expired: settled.expired,
    }))
}

/// Seek: restart the subscription at an offset or a time.
///
/// On each partition (or only `partition`, with `offset`) the subscription restarts at the
/// offset (clamped to the log), or at the first message at or after `timestamp`: everything
/// before counts as done, every lease and individual ack at or after it is dropped (acks of
/// earlier leases answer `expired`), and messages from it are delivered again.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{sub}/seek",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = SeekRequest,
    responses(
        (status = 200, description = "Where the subscription restarts on each partition sought", body = SeekResponse),
        (status = 400, description = "Both or neither of `offset` and `timestamp`, `partition` with `timestamp`, or a partition the topic does not have: nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`, or its topic is gone (`topic_not_found`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: outcome unknown", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn seek(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<SeekRequest>,
) -> ApiResult<Json<SeekResponse>> {
    let target = request.into_target()?;
    let sought = broker.subscriptions().seek(&name, target).await?;
    Ok(Json(sought.into()))
}

/// The subscription gauges of the partitions this node leads, in the Prometheus text format,
/// appended to `/metrics`. Computed when scraped (not recorded through the `metrics` recorder,
/// whose series would outlive a deleted subscription or a partition led elsewhere now).
pub(in crate::api) fn render_gauges(gauges: &[SubscriptionGauge]) -> String {
    type Value = fn(&SubscriptionGauge) -> f64;
    let families: [(&str, &str, Value); 5] = [
        (
            "herald_subscription_backlog_messages",
            "Messages of a subscription not done on a partition led here (never delivered, or delivered and not acked)",
            |g| g.stats.counts.backlog as f64,
        ),
        (
            "herald_subscription_in_flight_messages",
            "Messages of a subscription leased to a puller now, on a partition led here",
            |g| g.stats.counts.in_flight as f64,
        ),
        (
            "herald_subscription_delayed_messages",
            "Messages of a subscription waiting for their retry, on a partition led here",
            |g| g.stats.counts.delayed as f64,
        ),
        (
            "herald_subscription_dead_lettered_messages",
            "Messages of a subscription moved to its dead-letter topic, on a partition led here",
            |g| g.stats.counts.dead_lettered as f64,
        ),
        (
            "herald_subscription_oldest_unacked_age_seconds",
            "Age of a subscription's oldest message not done on a partition led here (0: none)",
            |g| g.stats.oldest_unacked_age_ms.unwrap_or(0) as f64 / 1000.0,
        ),
    ];
    let mut text = String::new();
    for (name, help, value) in families {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
        for gauge in gauges {
            let _ = writeln!(
                text,
                "{name}{{subscription=\"{}\",topic=\"{}\",partition=\"{}\"}} {}",
                crate::api::routes::groups::label(&gauge.subscription),
                crate::api::routes::groups::label(&gauge.topic),
                gauge.partition,
                value(gauge)
            );
        }
    }
    text
}
