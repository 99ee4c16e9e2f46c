//! Produce DTOs: `POST /v1/topics/{topic}/messages` in its JSON and octet-stream forms, and
//! their decoding into the broker's `ProduceMessage`s.
//!
//! A JSON `value` is kept as the exact text the client sent (a `RawValue`), never re-encoded.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::headers::deserialize_present_raw;
use super::idempotence::producer_fields;
use super::produce_limits::{deserialize_bounded_headers, deserialize_messages};
use crate::api::extract::ContentType;
use crate::api::problem::ApiError;
use crate::broker::subscriptions::message_times;
use crate::broker::{Acks, ProduceMessage, ProducerFields};

pub use super::produce_answer::{ProduceResponse, ProducedOffsetDto};
use crate::domain::{RecordKey, RecordValue};

/// How durable a produce must be before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = Acks)]
pub enum AcksDto {
    /// After a quorum of replicas has the batch durable.
    #[default]
    All,
    /// After the leader has the batch durable.
    Leader,
    /// At once; offsets are `null`.
    None,
}

impl From<AcksDto> for Acks {
    fn from(dto: AcksDto) -> Self {
        match dto {
            AcksDto::All => Acks::All,
            AcksDto::Leader => Acks::Leader,
            AcksDto::None => Acks::None,
        }
    }
}

/// Query of `POST /v1/topics/{topic}/messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProduceQuery {
    /// `all` (default), `leader` or `none`.
    #[serde(default)]
    #[param(inline)]
    pub acks: Option<AcksDto>,
    /// `application/octet-stream` only: the message key (text).
    #[serde(default)]
    pub key: Option<String>,
    /// `application/octet-stream` only: the partition to write to.
    #[serde(default)]
    pub partition: Option<u32>,
}

/// One message to produce. Exactly one of `value` / `value_b64`; at most one of `key` / `key_b64`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"key": "user-42", "value": {"any": "json"}, "headers": {"trace": "abc"}}))]
#[schema(as = ProduceMessage)]
pub struct ProduceMessageDto {
    /// A text key; keyed messages without `partition` go to `hash(key) % partitions`.
    #[serde(default)]
    pub key: Option<String>,
    /// A binary key, base64 (standard alphabet, padded).
    #[serde(default)]
    pub key_b64: Option<String>,
    /// Any JSON value, stored as the exact text sent (`null` included). On a compacted topic a
    /// `null` value is a tombstone: it deletes the message's key.
    #[serde(default, deserialize_with = "deserialize_present_raw")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub value: Option<Box<RawValue>>,
    /// Raw bytes, base64 (standard alphabet, padded).
    #[serde(default)]
    pub value_b64: Option<String>,
    /// String header values, at most 1000.
    #[serde(default, deserialize_with = "deserialize_bounded_headers")]
    #[schema(schema_with = super::produce_limits::headers_schema)]
    pub headers: Vec<(String, String)>,
    /// An explicit partition; otherwise by key hash. Unkeyed messages of one request all go to
    /// one partition, the partitions taken in turn request by request.
    #[serde(default)]
    #[schema(value_type = Option<u32>, minimum = 0)]
    pub partition: Option<i64>,
    /// Milliseconds since the Unix epoch; the broker's clock when absent.
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub timestamp: Option<i64>,
    /// Subscriptions do not deliver the message before this time (epoch ms). Stored as the
    /// header `herald-deliver-at`; offset reads and consumer groups ignore it.
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub deliver_at: Option<i64>,
    /// Subscriptions do not deliver the message after this time (epoch ms): it goes to the
    /// dead-letter topic with reason `expired` (or is dropped without a dead-letter policy).
    /// Stored as the header `herald-expires-at`; offset reads and consumer groups ignore it.
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub expires_at: Option<i64>,
}

/// `application/json` body of `POST /v1/topics/{topic}/messages`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"messages": [{"key": "user-42", "value": {"any": "json"}, "headers": {"trace": "abc"}}]}))]
pub struct ProduceRequest {
    /// 1 to 100000 messages; the body is refused as soon as it holds more.
    #[serde(deserialize_with = "deserialize_messages")]
    #[schema(min_items = 1, max_items = 100000)]
    pub messages: Vec<ProduceMessageDto>,
    /// An idempotent producer's id (from `POST /v1/producers`). With `producer_epoch` and
    /// `sequence` (all three or none): every message must go to one partition, and needs
    /// `acks=all`.
    #[serde(default)]
    #[schema(minimum = 0, example = 7)]
    pub producer_id: Option<i64>,
    /// The producer's epoch (from `POST /v1/producers`); an older epoch than the partition
    /// or the cluster knows is refused with 409 `producer_fenced`.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 32767, example = 0)]
    pub producer_epoch: Option<i64>,
    /// The partition sequence of the first message; the others follow on. The next request's
    /// sequence is this one plus the number of messages. A sequence already written is
    /// acknowledged as a duplicate; a gap is 409 `out_of_order_sequence`.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2147483647, example = 0)]
    pub sequence: Option<i64>,
}

/// `application/octet-stream` body of `POST /v1/topics/{topic}/messages`: one message's value,
/// as raw bytes. Only documents the body; the handler reads it as bytes.
pub struct RawValueBody;

impl utoipa::PartialSchema for RawValueBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .description(Some("One message's value, raw bytes"))
            .into()
    }
}

impl ToSchema for RawValueBody {}

/// A decoded produce body: the messages, and the producer fields of a JSON body.
#[derive(Debug)]
pub struct DecodedProduce {
    pub messages: Vec<ProduceMessage>,
    pub producer: Option<ProducerFields>,
}

/// Names message `index` of a request in error details (`messages[3]`). Rendered only when a
/// detail is written: formatting the name of every message of a valid 1000-message request
/// was an allocation per message for nothing.
#[derive(Debug, Clone, Copy)]
pub struct MessageAt(pub usize);

impl std::fmt::Display for MessageAt {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "messages[{}]", self.0)
    }
}

pub(crate) fn decode_b64(
    field: &str,
    what: &dyn std::fmt::Display,
    text: &str,
) -> Result<Bytes, ApiError> {
    BASE64.decode(text).map(Bytes::from).map_err(|error| {
        ApiError::invalid_request(format!("{what}.{field} is not valid base64: {error}"))
    })
}

impl ProduceMessageDto {
    /// Checks and decodes one message; `index` names it in error details.
    pub fn into_domain(self, index: usize) -> Result<ProduceMessage, ApiError> {
        self.into_domain_as(&MessageAt(index))
    }

    /// Checks and decodes one message; `what` names it in error details (`messages[3]`, or
    /// `the request` for a request/reply body).
    pub fn into_domain_as(
        mut self,
        what: &dyn std::fmt::Display,
    ) -> Result<ProduceMessage, ApiError> {
        let value = match (self.value.take(), self.value_b64.take()) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_request(format!(
                    "{what} has both value and value_b64; send exactly one"
                )))
            }
            (Some(raw), None) => RecordValue::Json(Bytes::copy_from_slice(raw.get().as_bytes())),
            (None, Some(b64)) => RecordValue::Bytes(decode_b64("value_b64", what, &b64)?),
            (None, None) => {
                return Err(ApiError::invalid_request(format!(
                    "{what} has neither value nor value_b64; send exactly one"
                )))
            }
        };
        self.into_domain_with_value(what, value)
    }

    /// Checks and decodes one message whose value came apart from it (a binary WebSocket
    /// frame carries values after the JSON): the message itself must not have one.
    pub fn into_domain_with_value(
        self,
        what: &dyn std::fmt::Display,
        value: RecordValue,
    ) -> Result<ProduceMessage, ApiError> {
        if self.value.is_some() || self.value_b64.is_some() {
            return Err(ApiError::invalid_request(format!(
                "{what} has value or value_b64, but its value is in the frame's binary section"
            )));
        }
        let key = match (self.key, self.key_b64) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_request(format!(
                    "{what} has both key and key_b64; send at most one"
                )))
            }
            (Some(text), None) => Some(RecordKey::Text(text)),
            (None, Some(b64)) => Some(RecordKey::Bytes(decode_b64("key_b64", what, &b64)?)),
            (None, None) => None,
        };
        let partition = match self.partition {
            None => None,
            Some(partition) => Some(u32::try_from(partition).map_err(|_| {
                ApiError::invalid_request(format!(
                    "{what}.partition must be a non-negative integer, got {partition}"
                ))
            })?),
        };
        if let Some(timestamp) = self.timestamp {
            if timestamp < 0 {
                return Err(ApiError::invalid_request(format!(
                    "{what}.timestamp must be milliseconds since the epoch (>= 0), got {timestamp}"
                )));
            }
        }
        let epoch_ms = |field: &str, value: Option<i64>| match value {
            Some(ms) if ms < 0 => Err(ApiError::invalid_request(format!(
                "{what}.{field} must be milliseconds since the epoch (>= 0), got {ms}"
            ))),
            _ => Ok(value.map(|ms| ms as u64)),
        };
        let deliver_at = epoch_ms("deliver_at", self.deliver_at)?;
        let expires_at = epoch_ms("expires_at", self.expires_at)?;
        let mut headers = self.headers;
        message_times::stamp(&mut headers, deliver_at, expires_at);
        Ok(ProduceMessage {
            key,
            value,
            headers,
            partition,
            timestamp: self.timestamp,
        })
    }
}

impl ProduceRequest {
    pub fn into_domain(self) -> Result<DecodedProduce, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid_request(
                "messages must hold at least one message",
            ));
        }
        let producer = producer_fields(self.producer_id, self.producer_epoch, self.sequence)?;
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(index, message)| message.into_domain(index))
            .collect::<Result<_, _>>()?;
        Ok(DecodedProduce { messages, producer })
    }

    /// As [`Self::into_domain`], the messages' values given apart (a binary WebSocket frame's),
    /// one per message in order.
    pub fn into_domain_with_values(
        self,
        values: Vec<RecordValue>,
    ) -> Result<DecodedProduce, ApiError> {
        if self.messages.is_empty() || self.messages.len() != values.len() {
            return Err(ApiError::invalid_request(format!(
                "messages must hold at least one message, and one per value ({} messages, {} values)",
                self.messages.len(),
                values.len()
            )));
        }
        let producer = producer_fields(self.producer_id, self.producer_epoch, self.sequence)?;
        let messages = self
            .messages
            .into_iter()
            .zip(values)
            .enumerate()
            .map(|(index, (message, value))| {
                message.into_domain_with_value(&MessageAt(index), value)
            })
            .collect::<Result<_, _>>()?;
        Ok(DecodedProduce { messages, producer })
    }
}

/// Decodes a produce body by its content type: a JSON batch, or one message's raw bytes.
pub fn decode_produce(
    content_type: &ContentType,
    query: &ProduceQuery,
    body: Bytes,
) -> Result<DecodedProduce, ApiError> {
    if content_type.is_json() {
        if query.key.is_some() || query.partition.is_some() {
            return Err(ApiError::invalid_request(
                "the key and partition query parameters apply to application/octet-stream bodies; \
                 put them in each JSON message instead",
            ));
        }
        super::produce_borrowed::decode_json_produce(&body)
    } else if content_type.is_octet_stream() {
        Ok(DecodedProduce {
            messages: vec![ProduceMessage {
                key: query.key.clone().map(RecordKey::Text),
                value: RecordValue::Bytes(body),
                headers: Vec::new(),
                partition: query.partition,
                timestamp: None,
            }],
            producer: None,
        })
    } else {
        Err(ApiError::unsupported_media_type(format!(
            "expected Content-Type application/json or application/octet-stream, got {}",
            content_type.0.as_deref().unwrap_or("none")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> ContentType {
        ContentType(Some("application/json".into()))
    }

    fn decode(body: &str) -> Result<Vec<ProduceMessage>, ApiError> {
        decode_full(body).map(|decoded| decoded.messages)
    }

    fn decode_full(body: &str) -> Result<DecodedProduce, ApiError> {
        decode_produce(
            &json(),
            &ProduceQuery::default(),
            Bytes::copy_from_slice(body.as_bytes()),
        )
    }

    #[test]
    fn json_value_is_kept_byte_exact() {
        let messages = decode(r#"{"messages":[{"value":{"b":1,  "a":[1,2]}}]}"#).expect("valid");
        assert_eq!(
            messages[0].value,
            RecordValue::Json(Bytes::from_static(br#"{"b":1,  "a":[1,2]}"#))
        );
        let messages = decode(r#"{"messages":[{"value": 1.50e3 }]}"#).expect("valid");
        assert_eq!(
            messages[0].value,
            RecordValue::Json(Bytes::from_static(b"1.50e3"))
        );
    }

    #[test]
    fn explicit_null_value_is_the_json_text_null() {
        let messages = decode(r#"{"messages":[{"value":null}]}"#).expect("valid");
        assert_eq!(
            messages[0].value,
            RecordValue::Json(Bytes::from_static(b"null"))
        );
    }

    #[test]
    fn keys_headers_partition_timestamp() {
        let messages = decode(
            r#"{"messages":[{"key":"user-42","value":"x","headers":{"z":"1","a":"2"},"partition":2,"timestamp":5},
                            {"key_b64":"AP8=","value_b64":"aGk="}]}"#,
        )
        .expect("valid");
        assert_eq!(messages[0].key, Some(RecordKey::Text("user-42".into())));
        assert_eq!(
            messages[0].headers,
            vec![("z".into(), "1".into()), ("a".into(), "2".into())]
        );
        assert_eq!(messages[0].partition, Some(2));
        assert_eq!(messages[0].timestamp, Some(5));
        assert_eq!(
            messages[1].key,
            Some(RecordKey::Bytes(Bytes::from_static(&[0, 255])))
        );
        assert_eq!(
            messages[1].value,
            RecordValue::Bytes(Bytes::from_static(b"hi"))
        );
    }

    #[test]
    fn bad_messages_are_400() {
        for body in [
            r#"{"messages":[]}"#,
            r#"{"messages":[{}]}"#,
            r#"{"messages":[{"value":1,"value_b64":"AA=="}]}"#,
            r#"{"messages":[{"key":"a","key_b64":"AA==","value":1}]}"#,
            r#"{"messages":[{"value_b64":"not base64!"}]}"#,
            r#"{"messages":[{"key_b64":"***","value":1}]}"#,
            r#"{"messages":[{"value":1,"headers":{"a":1}}]}"#,
            r#"{"messages":[{"value":1,"partition":-1}]}"#,
            r#"{"messages":[{"value":1,"partition":1.5}]}"#,
            r#"{"messages":[{"value":1,"timestamp":-5}]}"#,
            r#"{"messages":[{"value":1,"vlaue":2}]}"#,
            r#"{"messages":[{"value":1}"#,
            r#"{"messages":{}}"#,
            r#"[]"#,
        ] {
            let error = decode(body).expect_err(body);
            assert_eq!(error.status.as_u16(), 400, "{body}: {}", error.detail);
            assert_eq!(error.code.as_str(), "invalid_request", "{body}");
        }
    }

    #[test]
    fn producer_fields_go_together_and_in_range() {
        let decoded = decode_full(
            r#"{"messages":[{"value":1}],"producer_id":7,"producer_epoch":2,"sequence":40}"#,
        )
        .expect("valid");
        assert_eq!(
            decoded.producer,
            Some(ProducerFields {
                producer_id: 7,
                producer_epoch: 2,
                sequence: 40
            })
        );
        assert_eq!(
            decode_full(r#"{"messages":[{"value":1}]}"#)
                .expect("valid")
                .producer,
            None
        );
        for body in [
            r#"{"messages":[{"value":1}],"producer_id":7}"#,
            r#"{"messages":[{"value":1}],"producer_id":7,"producer_epoch":0}"#,
            r#"{"messages":[{"value":1}],"producer_id":-1,"producer_epoch":0,"sequence":0}"#,
            r#"{"messages":[{"value":1}],"producer_id":1,"producer_epoch":32768,"sequence":0}"#,
            r#"{"messages":[{"value":1}],"producer_id":1,"producer_epoch":-1,"sequence":0}"#,
            r#"{"messages":[{"value":1}],"producer_id":1,"producer_epoch":0,"sequence":2147483648}"#,
            r#"{"messages":[{"value":1}],"producer_id":1,"producer_epoch":0,"sequence":-3}"#,
        ] {
            let error = decode_full(body).expect_err(body);
            assert_eq!(error.code.as_str(), "invalid_request", "{body}");
        }
    }

    #[test]
    fn octet_stream_is_one_message() {
        let query = ProduceQuery {
            acks: None,
            key: Some("k".into()),
            partition: Some(3),
        };
        let content_type = ContentType(Some("application/octet-stream".into()));
        let messages = decode_produce(&content_type, &query, Bytes::from_static(&[1, 2, 3]))
            .expect("valid")
            .messages;
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].key, Some(RecordKey::Text("k".into())));
        assert_eq!(
            messages[0].value,
            RecordValue::Bytes(Bytes::from_static(&[1, 2, 3]))
        );
        assert_eq!(messages[0].partition, Some(3));
    }

    #[test]
    fn other_content_types_are_415() {
        let error = decode_produce(
            &ContentType(Some("text/plain".into())),
            &ProduceQuery::default(),
            Bytes::new(),
        )
        .expect_err("text/plain");
        assert_eq!(error.status.as_u16(), 415);
        let error = decode_produce(&ContentType(None), &ProduceQuery::default(), Bytes::new())
            .expect_err("none");
        assert_eq!(error.code.as_str(), "unsupported_media_type");
    }
}
