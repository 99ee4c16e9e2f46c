//! `/schema-registry/subjects`: subjects and their numbered versions: register, look up,
//! read, delete (soft, then permanent).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::schema_from_body;
use crate::api::dto::schemas::{
    DeletedQuery, LookupQuery, PermanentQuery, RegisterQuery, RegisteredDto, SchemaRequest,
    SubjectVersionDto, SubjectsQuery,
};
use crate::api::extract::{ApiBytes, ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::schemas::VersionSelector;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_subjects))
        .routes(routes!(lookup_schema, delete_subject))
        .routes(routes!(list_versions, register_schema))
        .routes(routes!(get_version, delete_version))
        .routes(routes!(get_version_text))
        .routes(routes!(referenced_by))
}

/// Subject names, sorted.
#[utoipa::path(
    get,
    path = "/schema-registry/subjects",
    tag = "schemas",
    params(SubjectsQuery),
    responses(
        (status = 200, description = "Subject names", body = Vec<String>, content_type = "application/json"),
        (status = 400, description = "`invalid_request`: a prefix no subject name can start with", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn list_subjects(
    State(broker): State<Broker>,
    ApiQuery(query): ApiQuery<SubjectsQuery>,
) -> ApiResult<Json<Vec<String>>> {
    Ok(Json(
        broker
            .schemas()
            .subjects(query.subject_prefix.as_deref(), query.deleted)
            .await?,
    ))
}

/// The version of a subject that holds a schema.
#[utoipa::path(
    post,
    path = "/schema-registry/subjects/{subject}",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"), LookupQuery),
    request_body(content = SchemaRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The version that holds it", body = SubjectVersionDto),
        (status = 400, description = "`invalid_request`: a malformed body or subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `schema_not_found` (40403)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_schema` (42201)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn lookup_schema(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiQuery(query): ApiQuery<LookupQuery>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<SubjectVersionDto>> {
    let schema = schema_from_body(&body)?;
    let found = broker
        .schemas()
        .lookup(&subject, schema, query.normalize, query.deleted)
        .await?;
    Ok(Json(found.into()))
}

/// Delete a subject: soft (its versions are hidden, their ids still resolve), then with
/// `permanent=true` for good. Answers the versions deleted.
#[utoipa::path(
    delete,
    path = "/schema-registry/subjects/{subject}",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"), PermanentQuery),
    responses(
        (status = 200, description = "The versions deleted", body = Vec<u32>, content_type = "application/json"),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `subject_soft_deleted` (40404), `subject_not_soft_deleted` (40405)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`schema_referenced` (42206): other schemas use it", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_subject(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiQuery(query): ApiQuery<PermanentQuery>,
) -> ApiResult<Json<Vec<u32>>> {
    Ok(Json(
        broker
            .schemas()
            .delete_subject(&subject, query.permanent)
            .await?,
    ))
}

/// A subject's version numbers.
#[utoipa::path(
    get,
    path = "/schema-registry/subjects/{subject}/versions",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"), DeletedQuery),
    responses(
        (status = 200, description = "Version numbers, oldest first", body = Vec<u32>, content_type = "application/json"),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn list_versions(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiQuery(query): ApiQuery<DeletedQuery>,
) -> ApiResult<Json<Vec<u32>>> {
    Ok(Json(
        broker.schemas().versions(&subject, query.deleted).await?,
    ))
}

/// Register a schema under a subject: its cluster-wide id (the same schema registered again,
/// here or under another subject, keeps its id). Checked against the subject's compatibility
/// level first.
#[utoipa::path(
    post,
    path = "/schema-registry/subjects/{subject}/versions",
    tag = "schemas",
    params(("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"), RegisterQuery),
    request_body(content = SchemaRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The schema's id", body = RegisteredDto),
        (status = 400, description = "`invalid_request`: a malformed body or subject name", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`incompatible_schema` (409): what breaks is in the detail", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_schema` (42201)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`, or `unavailable` while a node of an older release is in the cluster", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn register_schema(
    State(broker): State<Broker>,
    ApiPath(subject): ApiPath<String>,
    ApiQuery(query): ApiQuery<RegisterQuery>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<Json<RegisteredDto>> {
    let schema = schema_from_body(&body)?;
    let registered = broker
        .schemas()
        .register(&subject, schema, query.normalize)
        .await?;
    Ok(Json(registered.into()))
}

/// One version of a subject (`latest`: its latest live one).
#[utoipa::path(
    get,
    path = "/schema-registry/subjects/{subject}/versions/{version}",
    tag = "schemas",
    params(
        ("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"),
        ("version" = String, Path, pattern = "^(latest|-1|[1-9][0-9]{0,9})$", description = "A version from 1, or `latest`"),
        DeletedQuery,
    ),
    responses(
        (status = 200, description = "The version", body = SubjectVersionDto),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `version_not_found` (40402)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_version` (42202)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_version(
    State(broker): State<Broker>,
    ApiPath((subject, version)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<DeletedQuery>,
) -> ApiResult<Json<SubjectVersionDto>> {
    let selector = VersionSelector::parse(&version)?;
    let found = broker
        .schemas()
        .version(&subject, selector, query.deleted)
        .await?;
    Ok(Json(found.into()))
}

/// Delete a version: soft, then with `permanent=true` for good. Answers its number.
#[utoipa::path(
    delete,
    path = "/schema-registry/subjects/{subject}/versions/{version}",
    tag = "schemas",
    params(
        ("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"),
        ("version" = String, Path, pattern = "^(latest|-1|[1-9][0-9]{0,9})$", description = "A version from 1, or `latest`"),
        PermanentQuery,
    ),
    responses(
        (status = 200, description = "The version deleted", body = u32, content_type = "application/json"),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `version_not_found` (40402), `version_soft_deleted` (40406), `version_not_soft_deleted` (40407)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_version` (42202), `schema_referenced` (42206)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_version(
    State(broker): State<Broker>,
    ApiPath((subject, version)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<PermanentQuery>,
) -> ApiResult<Json<u32>> {
    let selector = VersionSelector::parse(&version)?;
    Ok(Json(
        broker
            .schemas()
            .delete_version(&subject, selector, query.permanent)
            .await?,
    ))
}

/// The text of one version's schema.
#[utoipa::path(
    get,
    path = "/schema-registry/subjects/{subject}/versions/{version}/schema",
    tag = "schemas",
    params(
        ("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"),
        ("version" = String, Path, pattern = "^(latest|-1|[1-9][0-9]{0,9})$", description = "A version from 1, or `latest`"),
        DeletedQuery,
    ),
    responses(
        (status = 200, description = "The schema's text", body = String, content_type = "text/plain"),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `version_not_found` (40402)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_version` (42202)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_version_text(
    State(broker): State<Broker>,
    ApiPath((subject, version)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<DeletedQuery>,
) -> ApiResult<impl IntoResponse> {
    let selector = VersionSelector::parse(&version)?;
    let found = broker
        .schemas()
        .version(&subject, selector, query.deleted)
        .await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        found.schema.text,
    ))
}

/// The ids of the live schemas that reference a version.
#[utoipa::path(
    get,
    path = "/schema-registry/subjects/{subject}/versions/{version}/referencedby",
    tag = "schemas",
    params(
        ("subject" = String, Path, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", description = "A subject name"),
        ("version" = String, Path, pattern = "^(latest|-1|[1-9][0-9]{0,9})$", description = "A version from 1, or `latest`"),
    ),
    responses(
        (status = 200, description = "Schema ids", body = Vec<u32>, content_type = "application/json"),
        (status = 400, description = "`invalid_request`: not a subject name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subject_not_found` (40401), `version_not_found` (40402)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_version` (42202)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn referenced_by(
    State(broker): State<Broker>,
    ApiPath((subject, version)): ApiPath<(String, String)>,
) -> ApiResult<Json<Vec<u32>>> {
    let selector = VersionSelector::parse(&version)?;
    Ok(Json(
        broker.schemas().referenced_by(&subject, selector).await?,
    ))
}
