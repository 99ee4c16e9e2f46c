//! The HTTP produce body read in place: `{"messages":[...]}` deserialized borrowing from the
//! request body, each JSON `value` becoming a slice of the body (`Bytes::slice_ref`) rather
//! than a copy, so the body's bytes are copied once, into the stored batch.
//!
//! It takes exactly what [`ProduceRequest`](super::produce::ProduceRequest) takes (the same
//! fields, limits and checks: the messages become [`ProduceMessageDto`]s without their value and
//! go through [`ProduceMessageDto::into_domain_with_value`]); that type stays the documented
//! schema and what the WebSocket and request/reply paths read.

use std::borrow::Cow;

use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::idempotence::producer_fields;
use super::produce::{decode_b64, DecodedProduce, MessageAt, ProduceMessageDto};
use super::produce_limits::{deserialize_bounded_headers, deserialize_messages};
use crate::api::problem::ApiError;
use crate::domain::RecordValue;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BorrowedRequest<'a> {
    #[serde(borrow, deserialize_with = "deserialize_messages")]
    messages: Vec<BorrowedMessage<'a>>,
    #[serde(default)]
    producer_id: Option<i64>,
    #[serde(default)]
    producer_epoch: Option<i64>,
    #[serde(default)]
    sequence: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BorrowedMessage<'a> {
    #[serde(default, borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    key_b64: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "present_raw")]
    value: Option<&'a RawValue>,
    #[serde(default, borrow)]
    value_b64: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "deserialize_bounded_headers")]
    headers: Vec<(String, String)>,
    #[serde(default)]
    partition: Option<i64>,
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default)]
    deliver_at: Option<i64>,
    #[serde(default)]
    expires_at: Option<i64>,
}

/// `Some(raw)` whenever the field is present, an explicit `null` included (the JSON text
/// `null`, a tombstone); absent fields get `None` through `#[serde(default)]`.
fn present_raw<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(deserializer).map(Some)
}

/// Decodes a JSON produce body (already checked to be JSON), borrowing from `body`.
pub fn decode_json_produce(body: &Bytes) -> Result<DecodedProduce, ApiError> {
    let first = body.iter().find(|byte| !byte.is_ascii_whitespace());
    if first.is_some_and(|&byte| byte != b'{') {
        return Err(ApiError::invalid_request(
            "the request body must be a JSON object",
        ));
    }
    let request = match parse_request(body) {
        Ok(request) => request,
        Err(_) => return Err(explain_refusal(body)),
    };
    if request.messages.is_empty() {
        return Err(ApiError::invalid_request(
            "messages must hold at least one message",
        ));
    }
    let producer = producer_fields(
        request.producer_id,
        request.producer_epoch,
        request.sequence,
    )?;
    let messages = request
        .messages
        .into_iter()
        .enumerate()
        .map(|(index, message)| message.into_domain(body, index))
        .collect::<Result<_, _>>()?;
    Ok(DecodedProduce { messages, producer })
}

/// The whole body as a request, without tracking where in it the parser is: the path
/// tracking's own frames were about a seventh of the decode's samples in a profile of valid
/// 1000-message bodies, and only a refusal needs the path.
fn parse_request(body: &[u8]) -> serde_json::Result<BorrowedRequest<'_>> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let request = BorrowedRequest::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(request)
}

/// Parses a body that [`parse_request`] refused again, tracking the path this time, so the
/// refusal names the field (`messages[3].partition: invalid type ...`).
fn explain_refusal(body: &[u8]) -> ApiError {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize::<_, BorrowedRequest<'_>>(&mut deserializer) {
        Err(error) => json_error(error.inner(), &error),
        Ok(_) => match deserializer.end() {
            Err(error) => json_error(&error, &error),
            // Both parses read the same bytes the same way; kept total all the same.
            Ok(()) => ApiError::invalid_request("Failed to parse the request body as JSON"),
        },
    }
}

/// The texts axum's `Json` answers with, so both JSON paths word their refusals alike.
fn json_error(error: &serde_json::Error, shown: &dyn std::fmt::Display) -> ApiError {
    ApiError::invalid_request(match error.classify() {
        serde_json::error::Category::Data => {
            format!("Failed to deserialize the JSON body into the target type: {shown}")
        }
        _ => format!("Failed to parse the request body as JSON: {shown}"),
    })
}

impl BorrowedMessage<'_> {
    fn into_domain(
        self,
        body: &Bytes,
        index: usize,
    ) -> Result<crate::broker::ProduceMessage, ApiError> {
        let what = MessageAt(index);
        let value = match (self.value, self.value_b64) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_request(format!(
                    "{what} has both value and value_b64; send exactly one"
                )))
            }
            // The raw text is a slice of the body: shared, not copied.
            (Some(raw), None) => RecordValue::Json(body.slice_ref(raw.get().as_bytes())),
            (None, Some(b64)) => RecordValue::Bytes(decode_b64("value_b64", &what, &b64)?),
            (None, None) => {
                return Err(ApiError::invalid_request(format!(
                    "{what} has neither value nor value_b64; send exactly one"
                )))
            }
        };
        let rest = ProduceMessageDto {
            key: self.key.map(Cow::into_owned),
            key_b64: self.key_b64.map(Cow::into_owned),
            value: None,
            value_b64: None,
            headers: self.headers,
            partition: self.partition,
            timestamp: self.timestamp,
            deliver_at: self.deliver_at,
            expires_at: self.expires_at,
        };
        rest.into_domain_with_value(&what, value)
    }
}
