//! `/v1/producers`: registering idempotent producers.

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::producer::{InitProducerRequest, ProducerDto};
use crate::api::extract::{ApiBytes, ContentType};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::auth::operation::Operation;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(init_producer))
}

/// Register an idempotent producer.
///
/// Answers a producer id and epoch for the `producer_id`, `producer_epoch` and `sequence`
/// fields of produce requests. A name gets the same id every time with the next epoch, which
/// fences the previous holder (409 `producer_fenced` on its next produce); without a name, a
/// fresh id at epoch 0. With authentication on, a name also needs `produce` on
/// `producer:{name}`, so one team cannot fence another's producer.
#[utoipa::path(
    post,
    path = "/v1/producers",
    tag = "producers",
    request_body(content = Option<InitProducerRequest>, description = "Optional", content_type = "application/json"),
    responses(
        (status = 200, description = "The producer's id and epoch", body = ProducerDto),
        (status = 400, description = "Invalid name or body", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported_media_type`: a body that is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`: no metadata leader", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn init_producer(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    content_type: ContentType,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<ProducerDto>> {
    let request = InitProducerRequest::decode(&content_type, &body)?;
    if let Some(name) = &request.name {
        // Registering a name fences whoever held it: a right on that name, not on all.
        caller.authorize(&Operation::NameProducer { name }).await?;
    }
    Ok(Json(
        broker.produce().init_producer(request.name).await?.into(),
    ))
}
