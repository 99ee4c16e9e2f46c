//! Request/reply DTOs: `POST /v1/topics/{topic}/requests` (the request is one produce-side
//! message; the answer is the reply) and `POST /v1/replies` (a responder's reply).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::headers::{deserialize_present_raw, serialize_headers};
use super::produce::decode_b64;
use super::produce_limits::deserialize_bounded_headers;
use crate::api::problem::ApiError;
use crate::broker::requests::{Reply, ReplyDelivery, RequestAnswer};
use crate::domain::RecordValue;

/// Query of `POST /v1/topics/{topic}/requests`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RequestQuery {
    /// How long to wait for the reply, publishing included: 1 to 60000 ms; default 30000.
    #[serde(default)]
    #[param(minimum = 1, maximum = 60000)]
    pub timeout_ms: Option<u64>,
}

/// The answer to a request: its reply, and where the request was written.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "correlation_id": "5f0c6a1e9b2d4c7a8e3f1b2c3d4e5f60", "topic": "rpc", "partition": 0, "offset": 17,
    "value": {"ok": true}, "headers": {"trace": "abc"}
}))]
pub struct RequestAnswerDto {
    /// The id the request carried in `herald-correlation-id`.
    pub correlation_id: String,
    /// Where the request message was written.
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// The reply's value, when sent as JSON (`value`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_present_raw"
    )]
    #[schema(value_type = Option<serde_json::Value>)]
    pub value: Option<Box<RawValue>>,
    /// The reply's value, when sent as bytes (`value_b64`), base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_b64: Option<String>,
    /// The reply's headers.
    #[serde(
        default,
        serialize_with = "serialize_headers",
        deserialize_with = "super::headers::deserialize_headers"
    )]
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub headers: Vec<(String, String)>,
}

impl RequestAnswerDto {
    pub fn from_domain(topic: &str, answer: RequestAnswer) -> Self {
        let (value, value_b64) = super::consume::value_fields(answer.reply.value);
        RequestAnswerDto {
            correlation_id: answer.correlation_id,
            topic: topic.to_string(),
            partition: answer.partition,
            offset: answer.offset,
            value,
            value_b64,
            headers: answer.reply.headers,
        }
    }
}

/// Body of `POST /v1/replies`. Exactly one of `value` / `value_b64`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "reply_to": "1.9f8e7d6c5b4a3210", "correlation_id": "5f0c6a1e9b2d4c7a8e3f1b2c3d4e5f60",
    "value": {"ok": true}, "headers": {"trace": "abc"}
}))]
pub struct ReplyRequest {
    /// The request's `herald-reply-to` header, as received.
    #[schema(pattern = "^[0-9]{1,20}\\.[0-9a-f]{16}$")]
    pub reply_to: String,
    /// The request's `herald-correlation-id` header, as received.
    #[schema(pattern = "^[0-9a-f]{32}$")]
    pub correlation_id: String,
    /// Any JSON value; the requester gets it back as `value`.
    #[serde(default, deserialize_with = "deserialize_present_raw")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub value: Option<Box<RawValue>>,
    /// Raw bytes, base64 (standard alphabet, padded); the requester gets them as `value_b64`.
    #[serde(default)]
    pub value_b64: Option<String>,
    /// String header values, at most 1000.
    #[serde(default, deserialize_with = "deserialize_bounded_headers")]
    #[schema(schema_with = super::produce_limits::headers_schema)]
    pub headers: Vec<(String, String)>,
}

impl ReplyRequest {
    pub fn into_domain(self) -> Result<ReplyDelivery, ApiError> {
        let value = match (self.value, self.value_b64) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_request(
                    "the reply has both value and value_b64; send exactly one",
                ))
            }
            (Some(raw), None) => RecordValue::Json(Bytes::copy_from_slice(raw.get().as_bytes())),
            (None, Some(b64)) => RecordValue::Bytes(decode_b64("value_b64", &"the reply", &b64)?),
            (None, None) => {
                return Err(ApiError::invalid_request(
                    "the reply has neither value nor value_b64; send exactly one",
                ))
            }
        };
        Ok(ReplyDelivery {
            reply_to: self.reply_to,
            correlation_id: self.correlation_id,
            reply: Reply {
                value,
                headers: self.headers,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::extract::json_from_bytes;

    fn decode(body: &str) -> Result<ReplyDelivery, ApiError> {
        json_from_bytes::<ReplyRequest>(body.as_bytes())?.into_domain()
    }

    #[test]
    fn a_reply_keeps_its_json_text_and_headers() {
        let delivery = decode(
            r#"{"reply_to":"1.00000000000000ab","correlation_id":"x","value":{"a": 1},"headers":{"h":"v"}}"#,
        )
        .expect("valid");
        assert_eq!(
            delivery.reply.value,
            RecordValue::Json(Bytes::from_static(br#"{"a": 1}"#))
        );
        assert_eq!(delivery.reply.headers, vec![("h".into(), "v".into())]);
    }

    #[test]
    fn the_document_declares_the_id_patterns_the_broker_enforces() {
        use crate::broker::requests::ids::{CORRELATION_ID_PATTERN, REPLY_TO_PATTERN};
        let document = serde_json::to_value(crate::api::openapi()).expect("serialize");
        let properties = &document["components"]["schemas"]["ReplyRequest"]["properties"];
        assert_eq!(properties["reply_to"]["pattern"], REPLY_TO_PATTERN);
        assert_eq!(
            properties["correlation_id"]["pattern"],
            CORRELATION_ID_PATTERN
        );
        let timeout = document["paths"]["/v1/topics/{topic}/requests"]["post"]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|parameter| parameter["name"] == "timeout_ms")
            .expect("timeout_ms")
            .clone();
        assert_eq!(
            timeout["schema"]["maximum"],
            crate::broker::requests::MAX_REQUEST_TIMEOUT_MS
        );
        assert_eq!(timeout["schema"]["minimum"], 1);
    }

    #[test]
    fn bad_replies_are_400() {
        for body in [
            r#"{"reply_to":"1.00000000000000ab","correlation_id":"x"}"#,
            r#"{"reply_to":"1.00000000000000ab","correlation_id":"x","value":1,"value_b64":"AA=="}"#,
            r#"{"reply_to":"1.00000000000000ab","correlation_id":"x","value_b64":"**"}"#,
            r#"{"reply_to":"1.00000000000000ab","value":1}"#,
            r#"{"correlation_id":"x","value":1}"#,
            r#"{"reply_to":"1.00000000000000ab","correlation_id":"x","value":1,"extra":1}"#,
            r#"{"reply_to":"1.00000000000000ab","correlation_id":"x","value":1,"headers":{"a":1}}"#,
        ] {
            let error = decode(body).expect_err(body);
            assert_eq!(error.status.as_u16(), 400, "{body}: {}", error.detail);
        }
    }
}
