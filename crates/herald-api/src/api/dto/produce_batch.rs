//! `application/vnd.herald.batch`: batches in Herald's stored layout (docs/binary-batches.md),
//! produced with `POST /v1/topics/{topic}/partitions/{partition}/messages` and read with
//! `GET` on the same path and `Accept: application/vnd.herald.batch`.

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::produce::AcksDto;
use crate::api::extract::ContentType;
use crate::api::problem::ApiError;
use crate::broker::BatchLanding;

/// The media type of a body of batches in the stored layout.
pub const BATCH_CONTENT_TYPE: &str = "application/vnd.herald.batch";

/// Query of `POST /v1/topics/{topic}/partitions/{partition}/messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BatchProduceQuery {
    /// `all` (default), `leader` or `none`.
    #[serde(default)]
    #[param(inline)]
    pub acks: Option<AcksDto>,
}

/// Answer of `POST /v1/topics/{topic}/partitions/{partition}/messages`: the batch's records
/// have the offsets `base_offset` to `base_offset + record_count - 1`, in batch order (a
/// compacted batch's records keep their offset deltas, gaps included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"partition": 0, "base_offset": 17, "record_count": 1000}))]
pub struct BatchProduceResponse {
    pub partition: u32,
    /// The first record's offset; `null` with `acks=none`, and for an idempotent producer's
    /// duplicate older than the batches the partition remembers.
    pub base_offset: Option<u64>,
    pub record_count: u32,
    /// Present (`true`) when the batch carries an idempotent producer's stamp and its
    /// sequences were written before: nothing was written now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

impl From<BatchLanding> for BatchProduceResponse {
    fn from(landing: BatchLanding) -> Self {
        BatchProduceResponse {
            partition: landing.partition,
            base_offset: landing.base_offset,
            record_count: landing.record_count,
            duplicate: landing.duplicate,
        }
    }
}

/// The body of a batch produce: one batch in the stored layout. Only documents the body; the
/// handler reads it as bytes.
pub struct BatchBody;

impl utoipa::PartialSchema for BatchBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .description(Some(
                "One batch in Herald's stored layout, byte for byte as docs/binary-batches.md describes",
            ))
            .into()
    }
}

impl ToSchema for BatchBody {}

/// Refuses a batch produce whose body is not declared `application/vnd.herald.batch`.
pub fn check_batch_content_type(content_type: &ContentType) -> Result<(), ApiError> {
    if content_type.0.as_deref() == Some(BATCH_CONTENT_TYPE) {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(format!(
            "expected Content-Type {BATCH_CONTENT_TYPE}, got {}",
            content_type.0.as_deref().unwrap_or("none")
        )))
    }
}

/// Whether a read asks for stored batches: its `Accept` names `application/vnd.herald.batch`
/// (with a non-zero quality). Anything else, no `Accept` included, gets JSON.
pub fn accepts_batches(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| {
            let mut parts = range.split(';');
            let essence = parts.next().unwrap_or_default().trim();
            let refused = parts.any(|parameter| {
                let parameter = parameter.trim().replace(' ', "");
                parameter.strip_prefix("q=").is_some_and(|quality| {
                    quality.parse::<f32>().is_ok_and(|quality| quality <= 0.0)
                })
            });
            essence.eq_ignore_ascii_case(BATCH_CONTENT_TYPE) && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::ACCEPT,
            HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn batches_only_when_accept_names_them() {
        assert!(accepts_batches(&accept("application/vnd.herald.batch")));
        assert!(accepts_batches(&accept(
            "application/json;q=0.5, Application/Vnd.Herald.Batch"
        )));
        assert!(accepts_batches(&accept(
            "application/vnd.herald.batch; q=0.9"
        )));
        assert!(!accepts_batches(&accept(
            "application/vnd.herald.batch;q=0"
        )));
        assert!(!accepts_batches(&accept("application/json")));
        assert!(!accepts_batches(&accept("*/*")));
        assert!(!accepts_batches(&HeaderMap::new()));
    }

    #[test]
    fn only_the_batch_media_type_is_taken() {
        assert!(check_batch_content_type(&ContentType(Some(BATCH_CONTENT_TYPE.into()))).is_ok());
        for other in [
            Some("application/json"),
            Some("application/octet-stream"),
            None,
        ] {
            let error = check_batch_content_type(&ContentType(other.map(String::from)))
                .expect_err("refused");
            assert_eq!(error.code.as_str(), "unsupported_media_type");
        }
    }
}
