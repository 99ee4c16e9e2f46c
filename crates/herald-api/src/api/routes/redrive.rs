//! `/v1/subscriptions/{sub}/redrive`: republish a subscription's dead letters to its topic
//! (see `docs/queues.md` § Redrive).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::redrive::{RedriveDto, RedriveRequestDto};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(start_redrive, get_redrive, cancel_redrive))
}

/// Start a redrive: republish the subscription's dead letters to its topic.
///
/// A background job republishes, at most `max_per_second` a second, the messages of the
/// subscription's dead-letter topic that this subscription dead-lettered, from `from_offset`
/// to `to_offset` in each dead-letter partition (default: all of each partition as it is
/// now): key, value and headers as they were, `herald-dlq-*` headers dropped, and
/// `herald-redrive-count` added. Follow it with `GET`. A crash of the node running it does
/// not republish a message twice.
#[utoipa::path(
    post,
    path = "/v1/subscriptions/{sub}/redrive",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    request_body = RedriveRequestDto,
    responses(
        (status = 202, description = "Started; the job as it is now (possibly `done` already when the range is empty)", body = RedriveDto),
        (status = 400, description = "Invalid name, offsets (`from_offset` > `to_offset`) or rate", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`, or `topic_not_found` (the dead-letter topic)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`redrive_in_progress` or `no_dead_letter_policy`: nothing was started", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: whether the job started is unknown; `GET` tells", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn start_redrive(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<RedriveRequestDto>,
) -> ApiResult<(StatusCode, Json<RedriveDto>)> {
    let job = broker
        .subscriptions()
        .start_redrive(&name, request.into())
        .await?;
    Ok((StatusCode::ACCEPTED, Json(job.into())))
}

/// Show the subscription's latest redrive and its progress.
#[utoipa::path(
    get,
    path = "/v1/subscriptions/{sub}/redrive",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    responses(
        (status = 200, description = "The latest redrive", body = RedriveDto),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found` or `redrive_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_redrive(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<RedriveDto>> {
    Ok(Json(broker.subscriptions().redrive(&name)?.into()))
}

/// Cancel the running redrive. What it republished stays republished.
#[utoipa::path(
    delete,
    path = "/v1/subscriptions/{sub}/redrive",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    responses(
        (status = 200, description = "Cancelled; the job as it ended", body = RedriveDto),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`, or `redrive_not_found`: no redrive runs", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`: whether it was cancelled is unknown", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn cancel_redrive(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<RedriveDto>> {
    Ok(Json(
        broker.subscriptions().cancel_redrive(&name).await?.into(),
    ))
}
