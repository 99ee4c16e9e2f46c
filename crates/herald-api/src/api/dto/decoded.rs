//! `decode=json`: a read's messages with their Confluent wire-format parts decoded to JSON by
//! the broker's [`MessageDecoder`]. Decoding never fails a read: a part that does not decode
//! keeps its bytes, and `decode_error` says why.

use std::collections::HashMap;

use serde_json::value::to_raw_value;

use super::consume::{ConsumedMessageDto, DecodedSchemaDto};
use crate::broker::schemas::{Decoded, DecodedWith, MessageDecoder};
use crate::broker::ConsumedMessage;
use crate::domain::{RecordKey, RecordValue};

impl From<DecodedWith> for DecodedSchemaDto {
    fn from(with: DecodedWith) -> Self {
        DecodedSchemaDto {
            id: with.schema_id,
            subject: with.subject,
            version: with.version,
        }
    }
}

/// Whether a key looks like it is in the wire format (magic byte 0 and a schema id): most keys
/// are plain text or bytes, and are not reported as undecodable.
fn looks_encoded(bytes: &[u8]) -> bool {
    bytes.len() >= 5 && bytes[0] == 0
}

/// `message` as an answer, with its bytes value (and a wire-format key) decoded.
pub async fn decoded_message(
    decoder: &mut MessageDecoder,
    topic: &str,
    message: ConsumedMessage,
) -> ConsumedMessageDto {
    let key_bytes = match &message.key {
        Some(RecordKey::Bytes(bytes)) if looks_encoded(bytes) => Some(bytes.clone()),
        _ => None,
    };
    let value_bytes = match &message.value {
        RecordValue::Bytes(bytes) => Some(bytes.clone()),
        RecordValue::Json(_) => None,
    };
    let mut dto = ConsumedMessageDto::from_domain(topic, message);
    let mut errors = Vec::new();
    if let Some(bytes) = value_bytes {
        match decoder.decode(&bytes).await {
            Decoded::Json(json, with) => match to_raw_value(&json) {
                Ok(raw) => {
                    dto.value = Some(raw);
                    dto.value_b64 = None;
                    dto.value_schema = Some(with.into());
                }
                Err(error) => errors.push(format!("value: {error}")),
            },
            Decoded::Failed(reason) => errors.push(format!("value: {reason}")),
        }
    }
    if let Some(bytes) = key_bytes {
        match decoder.decode(&bytes).await {
            Decoded::Json(json, with) => {
                dto.key_json = Some(json);
                dto.key_schema = Some(with.into());
            }
            Decoded::Failed(reason) => errors.push(format!("key: {reason}")),
        }
    }
    if !errors.is_empty() {
        dto.decode_error = Some(errors.join("; "));
    }
    dto
}

/// Decodes the messages of one read, or of a stream, which may span topics (a group poll),
/// with one decoder per topic. It holds its own handle on the broker, so a stream's task can
/// keep it.
pub struct ReadDecoder {
    broker: crate::broker::Broker,
    decoders: HashMap<String, MessageDecoder>,
}

impl ReadDecoder {
    pub fn new(broker: &crate::broker::Broker) -> Self {
        ReadDecoder {
            broker: broker.clone(),
            decoders: HashMap::new(),
        }
    }

    /// A decoder when `decode` asks for one (`decode=json`).
    pub fn when_asked(
        broker: &crate::broker::Broker,
        decode: Option<super::consume::DecodeMode>,
    ) -> Option<Self> {
        decode.map(|_| ReadDecoder::new(broker))
    }

    pub async fn message(&mut self, topic: &str, message: ConsumedMessage) -> ConsumedMessageDto {
        let broker = &self.broker;
        let decoder = self
            .decoders
            .entry(topic.to_string())
            .or_insert_with(|| broker.schemas().decoder(topic));
        decoded_message(decoder, topic, message).await
    }

    /// `message` as an answer: decoded with a decoder, as stored without one.
    pub async fn maybe(
        decoder: Option<&mut ReadDecoder>,
        topic: &str,
        message: ConsumedMessage,
    ) -> ConsumedMessageDto {
        match decoder {
            Some(decoder) => decoder.message(topic, message).await,
            None => ConsumedMessageDto::from_domain(topic, message),
        }
    }
}
