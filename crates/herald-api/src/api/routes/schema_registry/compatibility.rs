//! `/schema-registry/compatibility`: would a schema be accepted, before registering it.

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::schema_from_body;
use crate::api::dto::schemas::{CompatibilityCheckDto, SchemaRequest, VerboseQuery};
use crate::api::extract::{ApiBytes, ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::schemas::{CheckAgainst, CompatibilityReport, VersionSelector};
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(check_against_version))
        .routes(routes!(check_against_subject))
}

fn answer(report: CompatibilityReport, verbose: bool) -> Json<CompatibilityCheckDto> {
    Json(CompatibilityCheckDto {
        is_compatible: report.is_compatible(),
        messages: verbose.then_some(report.messages),
    })
}

/// Whether a schema is compatible with one version of a subject, under the subject's level.
#[utoipa::path(
    post,
    path = "/schema-registry/compatibility/subjects/{subject}/versions/{version}",
    tag = "schemas",
    params(
        ("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"),
        ("version" = String, Path, pattern = "^(latest|-1|[1-9][0-9]{0,9})$", description = "A version from 1, or `latest`"),
        VerboseQuery,
    ),
    request_body(content = SchemaRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The verdict", body = CompatibilityCheckDto),
        (status = 400, description = "`invalid_request`: a malformed body or subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `version_not_found` (40402)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_schema` (42201), `invalid_version` (42202)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn check_against_version(
    State(broker): State<Broker>,
    ApiPath((subject, version)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<VerboseQuery>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<CompatibilityCheckDto>> {
    let selector = VersionSelector::parse(&version)?;
    let schema = schema_from_body(&body)?;
    let report = broker
        .schemas()
        .check(&subject, schema, CheckAgainst::Version(selector))
        .await?;
    Ok(answer(report, query.verbose))
}

/// Whether a schema could be registered under a subject: checked against the versions the
/// subject's level names (all of them for a transitive level).
#[utoipa::path(
    post,
    path = "/schema-registry/compatibility/subjects/{subject}/versions",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"), VerboseQuery),
    request_body(content = SchemaRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The verdict", body = CompatibilityCheckDto),
        (status = 400, description = "`invalid_request`: a malformed body or subject name", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_schema` (42201)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn check_against_subject(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiQuery(query): ApiQuery<VerboseQuery>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<CompatibilityCheckDto>> {
    let schema = schema_from_body(&body)?;
    let report = broker
        .schemas()
        .check(&subject, schema, CheckAgainst::Level)
        .await?;
    Ok(answer(report, query.verbose))
}
