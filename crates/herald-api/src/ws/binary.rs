//! Binary frames: the JSON frame with its messages' values moved out of the JSON, as raw bytes,
//! so raw values travel without base64 and JSON values without escaping.
//!
//! Layout (`docs/websocket.md` § Binary frames), both directions:
//!
//! ```text
//! 0       4 bytes   H: the header's length, unsigned 32-bit big-endian
//! 4       H bytes   the header: the frame as JSON (UTF-8), each message without value /
//!                   value_b64 and with "value_len" (bytes) and "value_format" ("json" or
//!                   "bytes")
//! 4 + H   the rest  the values, in message order, back to back; their lengths add up to
//!                   exactly the rest of the frame
//! ```
//!
//! A client sends `publish` this way; a topic subscription with `"format": "binary"` gets its
//! `messages` frames this way. Every other frame is JSON text.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::frames::{FrameError, PublishFrame};
use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::problem::ApiError;
use crate::broker::stream::TailItem;
use crate::domain::record::RecordValue;

/// How a value in the binary section is to be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueFormat {
    /// UTF-8 JSON text: stored and delivered like a JSON frame's `value`.
    Json,
    /// Raw bytes: stored and delivered like `value_b64`, without the base64.
    #[default]
    Bytes,
}

/// What a message of a binary frame's header says about its value.
#[derive(Debug, Deserialize)]
struct ValueSpec {
    value_len: u32,
    #[serde(default)]
    value_format: ValueFormat,
}

/// A binary `publish` taken apart: the frame (its messages without values) and each message's
/// value, in order.
pub struct BinaryPublish {
    pub frame: PublishFrame,
    pub values: Vec<RecordValue>,
}

/// Splits a binary frame into its JSON header and its values section.
fn split(frame: &[u8]) -> Result<(&[u8], &[u8]), ApiError> {
    let Some((length, rest)) = frame.split_first_chunk::<4>() else {
        return Err(ApiError::invalid_request(
            "a binary frame starts with its header's length (4 bytes, big-endian)",
        ));
    };
    let header_len = u32::from_be_bytes(*length) as usize;
    if header_len > rest.len() {
        return Err(ApiError::invalid_request(format!(
            "the binary frame's header length {header_len} is past its end ({} bytes follow)",
            rest.len()
        )));
    }
    Ok(rest.split_at(header_len))
}

/// Parses a client's binary frame. Only `publish` is sent this way; the answer (`published` or
/// `error`) is a JSON text frame like any other.
pub fn parse_binary_publish(frame: Bytes) -> Result<BinaryPublish, FrameError> {
    let (header, values) = split(&frame).map_err(|error| FrameError::Refused(None, error))?;
    let mut header: Value = serde_json::from_slice(header).map_err(|error| {
        FrameError::Refused(
            None,
            ApiError::invalid_request(format!("the binary frame's header is not JSON: {error}")),
        )
    })?;
    let id = header.get("id").cloned();
    let refuse =
        |detail: String| FrameError::Refused(id.clone(), ApiError::invalid_request(detail));
    if header.get("op").and_then(Value::as_str) != Some("publish") {
        return Err(refuse(
            "a binary frame is a publish (op \"publish\"); send other frames as JSON text".into(),
        ));
    }
    // Take each message's value_len / value_format out, so what is left parses as the JSON
    // publish frame does, with the same checks.
    let mut specs = Vec::new();
    if let Some(messages) = header.get_mut("messages").and_then(Value::as_array_mut) {
        for (index, message) in messages.iter_mut().enumerate() {
            let Some(fields) = message.as_object_mut() else {
                continue; // refused below, by the publish frame's own parse
            };
            let spec = Value::Object(
                ["value_len", "value_format"]
                    .into_iter()
                    .filter_map(|name| fields.remove(name).map(|value| (name.into(), value)))
                    .collect(),
            );
            let spec: ValueSpec = serde_json::from_value(spec).map_err(|error| {
                refuse(format!(
                    "messages[{index}] needs value_len (bytes, up to 4294967295) and may have value_format (json or bytes): {error}"
                ))
            })?;
            specs.push(spec);
        }
    }
    let frame: PublishFrame = serde_json::from_value(header)
        .map_err(|error| refuse(format!("invalid frame: {error}")))?;
    let declared: u64 = specs.iter().map(|spec| u64::from(spec.value_len)).sum();
    if declared != values.len() as u64 {
        return Err(refuse(format!(
            "the messages' value_len add up to {declared} bytes, but {} bytes follow the header",
            values.len()
        )));
    }
    let mut rest = Bytes::copy_from_slice(values);
    let mut decoded = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let bytes = rest.split_to(spec.value_len as usize);
        decoded.push(match spec.value_format {
            ValueFormat::Bytes => RecordValue::Bytes(bytes),
            ValueFormat::Json => {
                if let Err(error) = serde_json::from_slice::<&serde_json::value::RawValue>(&bytes)
                {
                    return Err(refuse(format!(
                        "messages[{index}] has value_format json, but its value is not JSON: {error}"
                    )));
                }
                RecordValue::Json(bytes)
            }
        });
    }
    Ok(BinaryPublish {
        frame,
        values: decoded,
    })
}

/// One message of a binary `messages` frame's header.
#[derive(Serialize)]
struct BinaryDelivered {
    resume: String,
    #[serde(flatten)]
    message: ConsumedMessageDto,
    value_len: usize,
    value_format: ValueFormat,
}

#[derive(Serialize)]
struct BinaryMessagesHeader<'a> {
    op: &'static str,
    id: &'a str,
    messages: Vec<BinaryDelivered>,
}

/// A subscription's `messages` frame as a binary frame.
pub fn encode_messages(topic: &str, id: &str, items: Vec<TailItem>) -> Result<Bytes, ApiError> {
    let mut values = Vec::with_capacity(items.len());
    let mut messages = Vec::with_capacity(items.len());
    for TailItem {
        mut message,
        resume,
    } in items
    {
        let value = std::mem::replace(&mut message.value, RecordValue::Bytes(Bytes::new()));
        let (value_format, bytes) = match value {
            RecordValue::Json(bytes) => (ValueFormat::Json, bytes),
            RecordValue::Bytes(bytes) => (ValueFormat::Bytes, bytes),
        };
        let mut dto = ConsumedMessageDto::from_domain(topic, message);
        dto.value = None;
        dto.value_b64 = None;
        messages.push(BinaryDelivered {
            resume,
            message: dto,
            value_len: bytes.len(),
            value_format,
        });
        values.push(bytes);
    }
    let header = serde_json::to_vec(&BinaryMessagesHeader {
        op: "messages",
        id,
        messages,
    })
    .map_err(|error| ApiError::internal(format!("encoding a binary frame's header: {error}")))?;
    let header_len = u32::try_from(header.len())
        .map_err(|_| ApiError::internal("a binary frame's header is over 4 GiB"))?;
    let total = 4 + header.len() + values.iter().map(Bytes::len).sum::<usize>();
    let mut frame = BytesMut::with_capacity(total);
    frame.put_u32(header_len);
    frame.put_slice(&header);
    for value in values {
        frame.put_slice(&value);
    }
    Ok(frame.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::ConsumedMessage;
    use crate::domain::record::RecordKey;

    fn frame(header: &str, values: &[u8]) -> Bytes {
        let mut frame = (header.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(header.as_bytes());
        frame.extend_from_slice(values);
        Bytes::from(frame)
    }

    fn refusal(frame: Bytes) -> (Option<Value>, String) {
        match parse_binary_publish(frame) {
            Err(FrameError::Refused(id, error)) => (id, error.detail),
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(_) => panic!("expected a refusal"),
        }
    }

    #[test]
    fn publish_values_come_from_the_binary_section() {
        let header = r#"{"op":"publish","id":"p","topic":"t","messages":[
            {"key":"k","value_len":3},{"value_len":7,"value_format":"json","headers":{"h":"v"}}]}"#;
        let parsed = parse_binary_publish(frame(header, b"\x00\xff\x01{\"a\":1}")).unwrap();
        assert_eq!(parsed.frame.id, "p");
        assert_eq!(parsed.frame.messages.len(), 2);
        assert_eq!(parsed.frame.messages[0].key.as_deref(), Some("k"));
        assert_eq!(
            parsed.values,
            vec![
                RecordValue::Bytes(Bytes::from_static(b"\x00\xff\x01")),
                RecordValue::Json(Bytes::from_static(b"{\"a\":1}")),
            ]
        );
    }

    #[test]
    fn malformed_binary_frames_are_refused_with_a_reason() {
        assert!(refusal(Bytes::from_static(b"\x00\x00"))
            .1
            .contains("length"));
        assert!(refusal(Bytes::from_static(b"\x00\x00\x00\x09{}"))
            .1
            .contains("past its end"));
        assert!(refusal(frame("nope", b"")).1.contains("not JSON"));
        let (id, detail) = refusal(frame(r#"{"op":"subscribe","id":"s"}"#, b""));
        assert_eq!(id, Some(Value::from("s")));
        assert!(detail.contains("publish"), "{detail}");
        let header = r#"{"op":"publish","id":"p","topic":"t","messages":[{"value_len":5}]}"#;
        assert!(refusal(frame(header, b"abc")).1.contains("add up to 5"));
        let header = r#"{"op":"publish","id":"p","topic":"t","messages":[{"key":"k"}]}"#;
        assert!(refusal(frame(header, b"")).1.contains("value_len"));
        let header = r#"{"op":"publish","id":"p","topic":"t","messages":[{"value_len":2,"value_format":"json"}]}"#;
        assert!(refusal(frame(header, b"{x")).1.contains("not JSON"));
        let header =
            r#"{"op":"publish","id":"p","topic":"t","messages":[{"value_len":1,"wat":1}]}"#;
        assert!(refusal(frame(header, b"x")).1.contains("wat"));
    }

    #[test]
    fn messages_frames_carry_values_after_the_header() {
        let items = vec![
            TailItem {
                message: ConsumedMessage {
                    partition: 0,
                    offset: 4,
                    timestamp: 10,
                    key: Some(RecordKey::Text("k".into())),
                    value: RecordValue::Bytes(Bytes::from_static(b"\x00\x01")),
                    headers: vec![],
                },
                resume: "0:5".into(),
            },
            TailItem {
                message: ConsumedMessage {
                    partition: 0,
                    offset: 5,
                    timestamp: 11,
                    key: None,
                    value: RecordValue::Json(Bytes::from_static(b"[1]")),
                    headers: vec![("h".into(), "v".into())],
                },
                resume: "0:6".into(),
            },
        ];
        let frame = encode_messages("t", "s", items).unwrap();
        let (header, values) = split(&frame).unwrap();
        let header: Value = serde_json::from_slice(header).unwrap();
        assert_eq!(header["op"], "messages");
        assert_eq!(header["id"], "s");
        let messages = header["messages"].as_array().unwrap();
        assert_eq!(messages[0]["value_len"], 2);
        assert_eq!(messages[0]["value_format"], "bytes");
        assert_eq!(messages[0]["resume"], "0:5");
        assert_eq!(messages[0]["key"], "k");
        assert!(messages[0].get("value_b64").is_none());
        assert_eq!(messages[1]["value_format"], "json");
        assert_eq!(messages[1]["headers"]["h"], "v");
        assert_eq!(values, b"\x00\x01[1]");
    }
}
