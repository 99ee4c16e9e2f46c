//! Consume DTOs: `GET .../partitions/{partition}/messages` and `.../offsets`, and the wire form of
//! a message read back.
//!
//! A value produced as JSON is emitted as raw JSON, byte for byte as it was produced; one produced
//! as bytes comes back as `value_b64`.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::headers::{deserialize_headers, deserialize_present_raw, serialize_headers};
use crate::api::problem::ApiError;
use crate::broker::{ConsumedMessage, FetchRequest, FetchResult, OffsetSpec};
use crate::domain::{RecordKey, RecordValue};

/// Default and cap of `max_messages`.
pub const DEFAULT_MAX_MESSAGES: usize = 100;
pub const MAX_MAX_MESSAGES: usize = 10_000;
/// Cap of `max_wait_ms` (a minute).
pub const MAX_WAIT_MS: u64 = 60_000;

/// Query of `GET /v1/topics/{topic}/partitions/{partition}/messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FetchQuery {
    /// A non-negative offset, `earliest` (default) or `latest`.
    #[serde(default)]
    #[param(example = "earliest")]
    pub offset: Option<String>,
    /// 1 to 10000; default 100.
    #[serde(default)]
    #[param(minimum = 1, maximum = 10000)]
    pub max_messages: Option<usize>,
    /// Long poll: wait up to this long (0 to 60000 ms; default 0) for a first message.
    #[serde(default)]
    #[param(minimum = 0, maximum = 60000)]
    pub max_wait_ms: Option<u64>,
    /// `json`: values (and keys) in the Confluent wire format come back decoded as JSON, with
    /// the schema beside them (`docs/schemas.md`).
    #[serde(default)]
    pub decode: Option<DecodeMode>,
}

/// Parses `earliest`, `latest` or a non-negative integer offset.
pub fn parse_offset(text: &str) -> Result<OffsetSpec, ApiError> {
    match text {
        "earliest" => Ok(OffsetSpec::Earliest),
        "latest" => Ok(OffsetSpec::Latest),
        number => number.parse::<u64>().map(OffsetSpec::At).map_err(|_| {
            ApiError::invalid_request(format!(
                "offset must be a non-negative integer, 'earliest' or 'latest', got '{number}'"
            ))
        }),
    }
}

impl FetchQuery {
    pub fn into_domain(self, topic: String, partition: u32) -> Result<FetchRequest, ApiError> {
        let offset = match self.offset.as_deref() {
            None => OffsetSpec::Earliest,
            Some(text) => parse_offset(text)?,
        };
        let (max_messages, max_wait) = read_limits(self.max_messages, self.max_wait_ms)?;
        Ok(FetchRequest {
            topic,
            partition,
            offset,
            max_messages,
            max_wait,
        })
    }
}

/// Checks a read's `max_messages` (default 100) and `max_wait_ms` (default 0), shared by
/// partition reads and group polls.
pub fn read_limits(
    max_messages: Option<usize>,
    max_wait_ms: Option<u64>,
) -> Result<(usize, Duration), ApiError> {
    let max_messages = max_messages.unwrap_or(DEFAULT_MAX_MESSAGES);
    if max_messages == 0 || max_messages > MAX_MAX_MESSAGES {
        return Err(ApiError::invalid_request(format!(
            "max_messages must be between 1 and {MAX_MAX_MESSAGES}, got {max_messages}"
        )));
    }
    let max_wait_ms = max_wait_ms.unwrap_or(0);
    if max_wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid_request(format!(
            "max_wait_ms must be between 0 and {MAX_WAIT_MS}, got {max_wait_ms}"
        )));
    }
    Ok((max_messages, Duration::from_millis(max_wait_ms)))
}

/// A message read back, with where it is.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "topic": "orders", "partition": 0, "offset": 17, "timestamp": 1764400000000i64,
    "key": "user-42", "value": {"any": "json"}, "headers": {"trace": "abc"}
}))]
#[schema(as = ConsumedMessage)]
pub struct ConsumedMessageDto {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The key, when produced as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The key, when produced as bytes (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_b64: Option<String>,
    /// The value, when produced as JSON: the exact JSON text produced.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_present_raw"
    )]
    #[schema(value_type = Option<serde_json::Value>)]
    pub value: Option<Box<RawValue>>,
    /// The value, when produced as bytes (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_b64: Option<String>,
    #[serde(
        default,
        serialize_with = "serialize_headers",
        deserialize_with = "deserialize_headers"
    )]
    #[schema(value_type = std::collections::HashMap<String, String>)]
    pub headers: Vec<(String, String)>,
    /// With `decode=json`: the schema the key was decoded with (the key is then `key_json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_schema: Option<DecodedSchemaDto>,
    /// With `decode=json`: the key decoded from the Confluent wire format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub key_json: Option<serde_json::Value>,
    /// With `decode=json`: the schema the value was decoded with (the value is then `value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_schema: Option<DecodedSchemaDto>,
    /// With `decode=json`: why a bytes value (or key) was left as bytes (not in the Confluent
    /// wire format, an unknown schema id, a payload that does not decode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_error: Option<String>,
}

/// The schema a part of a message was decoded with (`decode=json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = DecodedSchema)]
pub struct DecodedSchemaDto {
    /// The schema id in the message's header.
    pub id: u32,
    /// The subject that holds the id (the topic's own subject when it does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

/// `decode=json`: how a read delivers values in the Confluent wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecodeMode {
    /// As JSON, decoded with the schema their header names.
    Json,
}

/// A stored value as the `value` (JSON) or `value_b64` (bytes) field of an answer.
pub fn value_fields(value: RecordValue) -> (Option<Box<RawValue>>, Option<String>) {
    match value {
        RecordValue::Json(bytes) => match raw_json(&bytes) {
            Some(raw) => (Some(raw), None),
            // Stored text that is not JSON (it never should be): still deliver it, as bytes.
            None => (None, Some(BASE64.encode(&bytes))),
        },
        RecordValue::Bytes(bytes) => (None, Some(BASE64.encode(&bytes))),
    }
}

impl ConsumedMessageDto {
    pub fn from_domain(topic: &str, message: ConsumedMessage) -> Self {
        let (key, key_b64) = match message.key {
            None => (None, None),
            Some(RecordKey::Text(text)) => (Some(text), None),
            Some(RecordKey::Bytes(bytes)) => (None, Some(BASE64.encode(&bytes))),
        };
        let (value, value_b64) = value_fields(message.value);
        ConsumedMessageDto {
            topic: topic.to_string(),
            partition: message.partition,
            offset: message.offset,
            timestamp: message.timestamp,
            key,
            key_b64,
            value,
            value_b64,
            headers: message.headers,
            key_schema: None,
            key_json: None,
            value_schema: None,
            decode_error: None,
        }
    }
}

/// The stored JSON text as a `RawValue`, when it is valid JSON.
pub fn raw_json(bytes: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(bytes).ok()?;
    RawValue::from_string(text.to_string()).ok()
}

/// Answer of `GET /v1/topics/{topic}/partitions/{partition}/messages`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "messages": [{"topic": "orders", "partition": 0, "offset": 17, "timestamp": 1764400000000i64,
                  "key": "user-42", "value": {"any": "json"}, "headers": {}}],
    "next_offset": 18, "high_watermark": 18, "log_start_offset": 0
}))]
pub struct FetchResponse {
    pub messages: Vec<ConsumedMessageDto>,
    /// The offset to ask for next.
    pub next_offset: u64,
    /// The offset after the last readable message.
    pub high_watermark: u64,
    /// The first offset still in the log.
    pub log_start_offset: u64,
}

impl FetchResponse {
    /// The answer with values in the Confluent wire format decoded (`decode=json`).
    pub async fn decoded(broker: &crate::broker::Broker, result: FetchResult) -> Self {
        let mut decoder = super::decoded::ReadDecoder::new(broker);
        let mut messages = Vec::with_capacity(result.messages.len());
        for message in result.messages {
            messages.push(decoder.message(&result.topic, message).await);
        }
        FetchResponse {
            messages,
            next_offset: result.next_offset,
            high_watermark: result.high_watermark,
            log_start_offset: result.log_start_offset,
        }
    }
}

impl From<FetchResult> for FetchResponse {
    fn from(result: FetchResult) -> Self {
        let topic = result.topic;
        FetchResponse {
            messages: result
                .messages
                .into_iter()
                .map(|message| ConsumedMessageDto::from_domain(&topic, message))
                .collect(),
            next_offset: result.next_offset,
            high_watermark: result.high_watermark,
            log_start_offset: result.log_start_offset,
        }
    }
}

/// Query of `GET /v1/topics/{topic}/partitions/{partition}/offsets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OffsetForTimestampQuery {
    /// Milliseconds since the Unix epoch.
    #[param(minimum = 0, example = 1764400000000i64)]
    pub timestamp: i64,
}

impl OffsetForTimestampQuery {
    pub fn checked(self) -> Result<i64, ApiError> {
        if self.timestamp < 0 {
            return Err(ApiError::invalid_request(format!(
                "timestamp must be milliseconds since the epoch (>= 0), got {}",
                self.timestamp
            )));
        }
        Ok(self.timestamp)
    }
}

/// Answer of `GET /v1/topics/{topic}/partitions/{partition}/offsets`: the first offset whose
/// timestamp is at or after the one asked, or the high watermark if none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"offset": 17}))]
#[schema(as = Offset)]
pub struct OffsetDto {
    pub offset: u64,
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn consumed(key: Option<RecordKey>, value: RecordValue) -> ConsumedMessage {
        ConsumedMessage {
            partition: 2,
            offset: 9,
            timestamp: 1000,
            key,
            value,
            headers: vec![("trace".into(), "abc".into())],
        }
    }

    #[test]
    fn json_value_is_emitted_byte_exact() {
        let message = consumed(
            Some(RecordKey::Text("user-42".into())),
            RecordValue::Json(Bytes::from_static(br#"{"b":1,  "a":[1,2]}"#)),
        );
        let text = serde_json::to_string(&ConsumedMessageDto::from_domain("orders", message))
            .expect("json");
        assert_eq!(
            text,
            r#"{"topic":"orders","partition":2,"offset":9,"timestamp":1000,"key":"user-42","value":{"b":1,  "a":[1,2]},"headers":{"trace":"abc"}}"#
        );
    }

    #[test]
    fn null_json_value_is_emitted_as_null() {
        let message = consumed(None, RecordValue::Json(Bytes::from_static(b"null")));
        let json =
            serde_json::to_value(ConsumedMessageDto::from_domain("t", message)).expect("json");
        assert!(
            json.get("value").is_some_and(|value| value.is_null()),
            "{json}"
        );
        assert!(json.get("value_b64").is_none());
    }

    #[test]
    fn bytes_come_back_as_base64() {
        let message = consumed(
            Some(RecordKey::Bytes(Bytes::from_static(&[0, 255]))),
            RecordValue::Bytes(Bytes::from_static(b"hi")),
        );
        let json =
            serde_json::to_value(ConsumedMessageDto::from_domain("t", message)).expect("json");
        assert_eq!(json["key_b64"], "AP8=");
        assert_eq!(json["value_b64"], "aGk=");
        assert!(json.get("key").is_none() && json.get("value").is_none());
    }

    #[test]
    fn invalid_stored_json_falls_back_to_base64() {
        let message = consumed(None, RecordValue::Json(Bytes::from_static(b"{not json")));
        let json =
            serde_json::to_value(ConsumedMessageDto::from_domain("t", message)).expect("json");
        assert_eq!(json["value_b64"], BASE64.encode(b"{not json"));
        assert!(json.get("value").is_none());
    }

    #[test]
    fn fetch_query_defaults_and_limits() {
        let request = FetchQuery::default()
            .into_domain("t".into(), 0)
            .expect("valid");
        assert_eq!(request.offset, OffsetSpec::Earliest);
        assert_eq!(request.max_messages, DEFAULT_MAX_MESSAGES);
        assert_eq!(request.max_wait, Duration::ZERO);

        let query = FetchQuery {
            offset: Some("42".into()),
            max_messages: Some(10_000),
            max_wait_ms: Some(60_000),
            decode: None,
        };
        let request = query.into_domain("t".into(), 1).expect("valid");
        assert_eq!(request.offset, OffsetSpec::At(42));
        assert_eq!(request.max_wait, Duration::from_secs(60));
        assert_eq!(parse_offset("latest").expect("latest"), OffsetSpec::Latest);

        for query in [
            FetchQuery {
                offset: Some("-1".into()),
                ..FetchQuery::default()
            },
            FetchQuery {
                offset: Some("abc".into()),
                ..FetchQuery::default()
            },
            FetchQuery {
                max_messages: Some(0),
                ..FetchQuery::default()
            },
            FetchQuery {
                max_messages: Some(10_001),
                ..FetchQuery::default()
            },
            FetchQuery {
                max_wait_ms: Some(60_001),
                ..FetchQuery::default()
            },
        ] {
            let error = query
                .clone()
                .into_domain("t".into(), 0)
                .expect_err("invalid");
            assert_eq!(error.code.as_str(), "invalid_request", "{query:?}");
        }
    }
}
