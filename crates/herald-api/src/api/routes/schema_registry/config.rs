//! `/schema-registry/config`: compatibility levels, the registry's and each subject's.

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::schemas::{ConfigDto, ConfigUpdateDto, SubjectConfigQuery};
use crate::api::extract::{json_from_bytes, ApiBytes, ApiPath, ApiQuery};
use crate::api::problem::{ApiError, ApiResult, Problem};
use crate::api::AppState;
use crate::broker::{Broker, BrokerError, ErrorCode};
use herald_domain::schemas::Compatibility;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_config, put_config, delete_config))
        .routes(routes!(
            get_subject_config,
            put_subject_config,
            delete_subject_config
        ))
}

fn config(level: Compatibility) -> Json<ConfigDto> {
    Json(ConfigDto {
        compatibility_level: level.as_str().to_string(),
    })
}

/// The level a `PUT` body names: 422 `invalid_compatibility_level` for anything else.
fn level_from_body(body: &[u8]) -> Result<Compatibility, ApiError> {
    let update: ConfigUpdateDto = json_from_bytes(body)?;
    Compatibility::parse(&update.compatibility).ok_or_else(|| {
        ApiError::from(BrokerError::Schema {
            code: ErrorCode::InvalidCompatibilityLevel,
            message: format!(
                "Invalid compatibility level '{}'. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive",
                update.compatibility
            ),
        })
    })
}

/// The registry's compatibility level (a subject without its own follows it).
#[utoipa::path(
    get,
    path = "/schema-registry/config",
    tag = "schemas",
    responses((status = 200, description = "The level", body = ConfigDto))
)]
async fn get_config(State(broker): State<Broker>) -> ApiResult<Json<ConfigDto>> {
    Ok(config(broker.schemas().compatibility(None, true).await?))
}

/// Set the registry's compatibility level.
#[utoipa::path(
    put,
    path = "/schema-registry/config",
    tag = "schemas",
    request_body(content = ConfigUpdateDto, content_type = "application/json"),
    responses(
        (status = 200, description = "The level set", body = ConfigUpdateDto),
        (status = 400, description = "`invalid_request`: a malformed body", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_compatibility_level` (42203)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn put_config(
    State(broker): State<Broker>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<ConfigUpdateDto>> {
    let level = level_from_body(&body)?;
    broker.schemas().set_compatibility(None, level).await?;
    Ok(Json(ConfigUpdateDto {
        compatibility: level.as_str().to_string(),
    }))
}

/// Reset the registry's compatibility level to the default (`BACKWARD`): answers the level it
/// had.
#[utoipa::path(
    delete,
    path = "/schema-registry/config",
    tag = "schemas",
    responses((status = 200, description = "The level it had", body = ConfigDto))
)]
async fn delete_config(State(broker): State<Broker>) -> ApiResult<Json<ConfigDto>> {
    Ok(config(broker.schemas().clear_compatibility(None).await?))
}

/// A subject's own compatibility level (with `defaultToGlobal=true`, the registry's when it has
/// none).
#[utoipa::path(
    get,
    path = "/schema-registry/config/{subject}",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"), SubjectConfigQuery),
    responses(
        (status = 200, description = "The level", body = ConfigDto),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_level_not_set` (40408)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_subject_config(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiQuery(query): ApiQuery<SubjectConfigQuery>,
) -> ApiResult<Json<ConfigDto>> {
    Ok(config(
        broker
            .schemas()
            .compatibility(Some(&subject), query.default_to_global)
            .await?,
    ))
}

/// Set a subject's compatibility level (it may be set before the subject's first version).
#[utoipa::path(
    put,
    path = "/schema-registry/config/{subject}",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name")),
    request_body(content = ConfigUpdateDto, content_type = "application/json"),
    responses(
        (status = 200, description = "The level set", body = ConfigUpdateDto),
        (status = 400, description = "`invalid_request`: a malformed body or subject name", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_compatibility_level` (42203)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn put_subject_config(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<ConfigUpdateDto>> {
    let level = level_from_body(&body)?;
    broker
        .schemas()
        .set_compatibility(Some(&subject), level)
        .await?;
    Ok(Json(ConfigUpdateDto {
        compatibility: level.as_str().to_string(),
    }))
}

/// Clear a subject's own level (it follows the registry's again): answers the level it had.
#[utoipa::path(
    delete,
    path = "/schema-registry/config/{subject}",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name")),
    responses(
        (status = 200, description = "The level it had", body = ConfigDto),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_level_not_set` (40408)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_subject_config(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
) -> ApiResult<Json<ConfigDto>> {
    Ok(config(
        broker.schemas().clear_compatibility(Some(&subject)).await?,
    ))
}
