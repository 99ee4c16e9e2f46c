//! `/v1/subscriptions`: queue subscriptions (see `docs/queues.md`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::subscriptions::{PutSubscriptionRequest, SubscriptionDto, SubscriptionListDto};
use super::extract::{ApiJson, ApiPath};
use super::problem::{ApiResult, Problem};
use super::AppState;
use crate::broker::queue::PutOutcome;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_subscriptions))
        .routes(routes!(
            put_subscription,
            get_subscription,
            delete_subscription
        ))
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
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<PutSubscriptionRequest>,
) -> ApiResult<(StatusCode, Json<SubscriptionDto>)> {
    let (meta, outcome) = broker.queues().put(&name, request.into_domain()).await?;
    let status = match outcome {
        PutOutcome::Created => StatusCode::CREATED,
        PutOutcome::Updated | PutOutcome::Unchanged => StatusCode::OK,
    };
    Ok((status, Json(meta.into())))
}

/// Describe a subscription.
#[utoipa::path(
    get,
    path = "/v1/subscriptions/{sub}",
    tag = "subscriptions",
    params(("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionDto),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_subscription(
    State(broker): State<Broker>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<SubscriptionDto>> {
    Ok(Json(broker.queues().get(&name)?.into()))
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
    broker.queues().delete(&name).await?;
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
        subscriptions: broker.queues().list().into_iter().map(Into::into).collect(),
    })
}
