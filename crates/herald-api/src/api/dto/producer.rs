//! Producer DTOs: `POST /v1/producers`, which registers an idempotent producer.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::extract::{optional_json_from_bytes, ContentType};
use crate::api::problem::ApiError;
use crate::broker::ProducerInfo;

/// `POST /v1/producers` (the body is optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "etl-worker-1"}))]
pub struct InitProducerRequest {
    /// A stable name (topic name rules): registering it again answers the same id with the next
    /// epoch, which fences the previous holder. Without a name, a fresh id at epoch 0.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi::rules::optional_public_name_schema)]
    pub name: Option<String>,
}

/// An idempotent producer's identity, for the `producer_id` and `producer_epoch` of its
/// produce requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"producer_id": 7, "producer_epoch": 1, "name": "etl-worker-1"}))]
#[schema(as = Producer)]
pub struct ProducerDto {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The name registered, `null` for an unnamed producer.
    pub name: Option<String>,
}

impl From<ProducerInfo> for ProducerDto {
    fn from(info: ProducerInfo) -> Self {
        ProducerDto {
            producer_id: info.producer_id,
            producer_epoch: info.producer_epoch,
            name: info.name,
        }
    }
}

impl InitProducerRequest {
    /// Reads the optional body: nothing (or only whitespace, or a JSON `null`) is an unnamed
    /// registration; anything else must be a JSON object.
    pub fn decode(content_type: &ContentType, body: &Bytes) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(InitProducerRequest::default());
        }
        if !content_type.is_json() {
            return Err(ApiError::unsupported_media_type(
                "expected no body or one with `Content-Type: application/json`",
            ));
        }
        optional_json_from_bytes(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> ContentType {
        ContentType(Some("application/json".into()))
    }

    #[test]
    fn the_body_is_optional() {
        let empty = InitProducerRequest::decode(&ContentType(None), &Bytes::new()).expect("ok");
        assert_eq!(empty.name, None);
        let named =
            InitProducerRequest::decode(&json(), &Bytes::from_static(br#"{"name":"etl-1"}"#))
                .expect("ok");
        assert_eq!(named.name.as_deref(), Some("etl-1"));
        let unnamed = InitProducerRequest::decode(&json(), &Bytes::from_static(b"{}")).expect("ok");
        assert_eq!(unnamed.name, None);
        let null =
            InitProducerRequest::decode(&json(), &Bytes::from_static(b" null ")).expect("ok");
        assert_eq!(null.name, None);
    }

    #[test]
    fn bad_bodies_are_refused() {
        let error = InitProducerRequest::decode(&json(), &Bytes::from_static(br#"{"nmae":"x"}"#))
            .expect_err("unknown field");
        assert_eq!(error.code.as_str(), "invalid_request");
        let error = InitProducerRequest::decode(
            &ContentType(Some("text/plain".into())),
            &Bytes::from_static(b"x"),
        )
        .expect_err("not JSON");
        assert_eq!(error.code.as_str(), "unsupported_media_type");
    }
}
