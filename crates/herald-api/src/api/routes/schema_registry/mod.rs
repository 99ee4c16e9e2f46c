//! `/schema-registry`: Confluent's Schema Registry API, served by every node over the registry
//! replicated in the metadata group, so Confluent's serializers work with
//! `url=http://host:8080/schema-registry` unchanged (`docs/schemas.md`).
//!
//! Bodies are Confluent's JSON shapes; requests are read as JSON whatever their content type
//! (Confluent's clients send `application/vnd.schemaregistry.v1+json`). Refusals are
//! problem+json like the rest of the API, with Confluent's numeric `error_code` and `message`
//! beside the problem's fields (added by `api::problem::with_registry_error_code`), which is what
//! Confluent's clients read.

mod compatibility;
mod config;
mod schemas;
mod subjects;

use utoipa_axum::router::OpenApiRouter;

use crate::api::dto::schemas::SchemaRequest;
use crate::api::extract::json_from_bytes;
use crate::api::problem::ApiError;
use crate::api::AppState;
use herald_domain::schemas::StoredSchema;

/// Where the registry's routes live: the `url` a Confluent client is given ends with it.
pub const BASE_PATH: &str = "/schema-registry";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(subjects::router())
        .merge(schemas::router())
        .merge(config::router())
        .merge(compatibility::router())
}

/// A schema in a request body, whatever the body's content type.
fn schema_from_body(body: &[u8]) -> Result<StoredSchema, ApiError> {
    json_from_bytes::<SchemaRequest>(body)?.into_stored()
}
