//! `/v1/topics`: create, list, describe, update and delete topics.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::topic::{check_topic_name, CreateTopicRequest, TopicDto, UpdateTopicRequest};
use crate::api::dto::topic_list::{page_token, TopicListDto, TopicListQuery};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_topic, list_topics))
        .routes(routes!(describe_topic, update_topic, delete_topic))
}

/// Create a topic.
#[utoipa::path(
    post,
    path = "/v1/topics",
    tag = "topics",
    request_body = CreateTopicRequest,
    responses(
        (status = 201, description = "The topic was created", body = TopicDto),
        (status = 200, description = "A topic with exactly these partitions, replication factor and configuration existed already (a retried create): nothing changed", body = TopicDto),
        (status = 400, description = "Invalid name, partitions, replication factor or config", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found`: `key_subject` or `value_subject` names no schema registry subject", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`topic_exists`: the topic exists with other partitions, replication factor or configuration", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` or `unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn create_topic(
    State(broker): State<Broker>,
    ApiJson(request): ApiJson<CreateTopicRequest>,
) -> ApiResult<(StatusCode, Json<TopicDto>)> {
    let request = request.into_domain()?;
    let answer = broker.topics().create_topic(request).await?;
    let status = match answer.created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(answer.topic.into())))
}

/// List topics: every one, or a page of them.
///
/// Without `limit`, every topic. With it, at most `limit` topics in name order and, while more
/// follow, `next_page_token`: pass it as `page_token` (with the same `limit` and `prefix`) for
/// the next page. `prefix` keeps the topics whose name starts with it.
#[utoipa::path(
    get,
    path = "/v1/topics",
    tag = "topics",
    params(TopicListQuery),
    responses(
        (status = 200, description = "The topics (a page of them with `limit`)", body = TopicListDto),
        (status = 400, description = "`invalid_request`: `limit` out of range, a `page_token` this API did not give, or one without `limit`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` or `unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn list_topics(
    State(broker): State<Broker>,
    ApiQuery(query): ApiQuery<TopicListQuery>,
) -> ApiResult<Json<TopicListDto>> {
    let page = query.into_page()?;
    let topics = broker.topics();
    let (listed, more) = match page.limit {
        Some(limit) => {
            topics
                .list_topics_page(page.after.as_deref(), page.prefix.as_deref(), limit)
                .await?
        }
        None => {
            topics
                .list_topics_page(None, page.prefix.as_deref(), usize::MAX)
                .await?
        }
    };
    let next_page_token = more
        .then(|| listed.last().map(|topic| page_token(&topic.name)))
        .flatten();
    Ok(Json(TopicListDto {
        topics: listed.into_iter().map(TopicDto::from).collect(),
        next_page_token,
    }))
}

/// Describe one topic.
#[utoipa::path(
    get,
    path = "/v1/topics/{topic}",
    tag = "topics",
    params(("topic" = String, Path, description = "Topic name")),
    responses(
        (status = 200, description = "The topic", body = TopicDto),
        (status = 400, description = "Invalid topic name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn describe_topic(
    State(broker): State<Broker>,
    ApiPath(topic): ApiPath<String>,
) -> ApiResult<Json<TopicDto>> {
    check_topic_name(&topic)?;
    Ok(Json(broker.topics().describe_topic(&topic).await?.into()))
}

/// Grow a topic's partitions or change its config.
#[utoipa::path(
    patch,
    path = "/v1/topics/{topic}",
    tag = "topics",
    params(("topic" = String, Path, description = "Topic name")),
    request_body = UpdateTopicRequest,
    responses(
        (status = 200, description = "The updated topic. Safe to retry: growing to the count the topic has and setting values it has change nothing", body = TopicDto),
        (status = 400, description = "Invalid partitions or config (partitions only grow)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`, or `subject_not_found`: `key_subject` or `value_subject` names no schema registry subject", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn update_topic(
    State(broker): State<Broker>,
    ApiPath(topic): ApiPath<String>,
    ApiJson(request): ApiJson<UpdateTopicRequest>,
) -> ApiResult<Json<TopicDto>> {
    check_topic_name(&topic)?;
    let update = request.into_domain()?;
    Ok(Json(
        broker.topics().update_topic(&topic, update).await?.into(),
    ))
}

/// Delete a topic and its data.
#[utoipa::path(
    delete,
    path = "/v1/topics/{topic}",
    tag = "topics",
    params(("topic" = String, Path, description = "Topic name")),
    responses(
        (status = 204, description = "The topic was deleted (also answered to a retry within an hour of the deletion)"),
        (status = 400, description = "Invalid topic name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_topic(
    State(broker): State<Broker>,
    ApiPath(topic): ApiPath<String>,
) -> ApiResult<StatusCode> {
    check_topic_name(&topic)?;
    broker.topics().delete_topic(&topic).await?;
    Ok(StatusCode::NO_CONTENT)
}
