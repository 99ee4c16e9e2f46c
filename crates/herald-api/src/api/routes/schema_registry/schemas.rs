//! `/schema-registry/schemas`: schemas by their cluster-wide id, which is what a deserializer
//! has (the id is in every message's header).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::schemas::{DeletedQuery, SchemaDto, SubjectVersionRefDto};
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(schema_types))
        .routes(routes!(schema_by_id))
        .routes(routes!(schema_text_by_id))
        .routes(routes!(schema_subjects))
        .routes(routes!(schema_versions))
}

/// The schema types the registry takes.
#[utoipa::path(
    get,
    path = "/schema-registry/schemas/types",
    tag = "schemas",
    responses((status = 200, description = "`AVRO`, `JSON`, `PROTOBUF`", body = Vec<String>, content_type = "application/json"))
)]
async fn schema_types() -> Json<Vec<&'static str>> {
    Json(vec!["AVRO", "JSON", "PROTOBUF"])
}

/// The schema an id names (soft-deleted versions' ids still resolve).
#[utoipa::path(
    get,
    path = "/schema-registry/schemas/ids/{id}",
    tag = "schemas",
    params(("id" = u32, Path, minimum = 1, maximum = 4294967295_u64, description = "A schema id")),
    responses(
        (status = 200, description = "The schema", body = SchemaDto),
        (status = 404, description = "`schema_not_found` (Confluent 40403)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn schema_by_id(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u32>,
) -> ApiResult<Json<SchemaDto>> {
    Ok(Json(broker.schemas().schema(id).await?.into()))
}

/// The text of the schema an id names.
#[utoipa::path(
    get,
    path = "/schema-registry/schemas/ids/{id}/schema",
    tag = "schemas",
    params(("id" = u32, Path, minimum = 1, maximum = 4294967295_u64, description = "A schema id")),
    responses(
        (status = 200, description = "The schema's text", body = String, content_type = "text/plain"),
        (status = 404, description = "`schema_not_found` (Confluent 40403)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn schema_text_by_id(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u32>,
) -> ApiResult<impl IntoResponse> {
    let schema = broker.schemas().schema(id).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        schema.text,
    ))
}

/// The subjects that hold a schema id.
#[utoipa::path(
    get,
    path = "/schema-registry/schemas/ids/{id}/subjects",
    tag = "schemas",
    params(
        ("id" = u32, Path, minimum = 1, maximum = 4294967295_u64, description = "A schema id"),
        DeletedQuery,
    ),
    responses(
        (status = 200, description = "Subject names", body = Vec<String>, content_type = "application/json"),
        (status = 404, description = "`schema_not_found` (Confluent 40403)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn schema_subjects(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u32>,
    ApiQuery(query): ApiQuery<DeletedQuery>,
) -> ApiResult<Json<Vec<String>>> {
    let mut subjects: Vec<String> = broker
        .schemas()
        .schema_versions(id, query.deleted)
        .await?
        .into_iter()
        .map(|(subject, _)| subject)
        .collect();
    subjects.dedup();
    Ok(Json(subjects))
}

/// The subject versions that hold a schema id.
#[utoipa::path(
    get,
    path = "/schema-registry/schemas/ids/{id}/versions",
    tag = "schemas",
    params(
        ("id" = u32, Path, minimum = 1, maximum = 4294967295_u64, description = "A schema id"),
        DeletedQuery,
    ),
    responses(
        (status = 200, description = "Subjects and versions", body = Vec<SubjectVersionRefDto>),
        (status = 404, description = "`schema_not_found` (Confluent 40403)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn schema_versions(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u32>,
    ApiQuery(query): ApiQuery<DeletedQuery>,
) -> ApiResult<Json<Vec<SubjectVersionRefDto>>> {
    let versions = broker.schemas().schema_versions(id, query.deleted).await?;
    Ok(Json(
        versions
            .into_iter()
            .map(|(subject, version)| SubjectVersionRefDto { subject, version })
            .collect(),
    ))
}
