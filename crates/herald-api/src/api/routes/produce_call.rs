//! One produce preparation for every transport that produces messages:
//! `POST /v1/topics/{topic}/messages` and the WebSocket `publish` frame (JSON or binary).
//!
//! Each transport decodes its own body into the broker's messages (a JSON batch, one raw value,
//! a frame's messages with their values apart); everything else lives here, in the order the
//! client's mistakes are answered: the topic's name, then the idempotency key, then the
//! messages; then the acks and idempotence the broker is given, its call, and the answer.

use crate::api::dto::produce::{AcksDto, DecodedProduce, ProduceResponse};
use crate::api::dto::topic::check_topic_name;
use crate::api::problem::ApiError;
use crate::broker::{validate_idempotency_key, Acks, Broker, Idempotence, ProduceMessage};

/// A produce to a topic whose name is checked.
#[derive(Debug)]
pub struct ProduceTo {
    topic: String,
}

/// A produce to a topic with its idempotency key checked, waiting for its messages.
#[derive(Debug)]
pub struct KeyedProduce {
    topic: String,
    idempotency_key: Option<String>,
}

/// A produce ready for the broker.
#[derive(Debug)]
pub struct PreparedProduce {
    topic: String,
    messages: Vec<ProduceMessage>,
    acks: Acks,
    idempotence: Idempotence,
}

impl ProduceTo {
    /// A produce to `topic`; refuses a name no topic can have.
    pub fn new(topic: String) -> Result<ProduceTo, ApiError> {
        check_topic_name(&topic)?;
        Ok(ProduceTo { topic })
    }

    /// With the request's idempotency key, if any: 1 to 255 printable ASCII characters.
    pub fn keyed(self, idempotency_key: Option<String>) -> Result<KeyedProduce, ApiError> {
        if let Some(key) = &idempotency_key {
            validate_idempotency_key(key).map_err(ApiError::invalid_request)?;
        }
        Ok(KeyedProduce {
            topic: self.topic,
            idempotency_key,
        })
    }
}

impl KeyedProduce {
    /// With the decoded messages (and an idempotent producer's fields) and the acks asked
    /// for (`all` when none).
    pub fn with(self, decoded: DecodedProduce, acks: Option<AcksDto>) -> PreparedProduce {
        PreparedProduce {
            topic: self.topic,
            messages: decoded.messages,
            acks: acks.unwrap_or_default().into(),
            idempotence: Idempotence {
                idempotency_key: self.idempotency_key,
                producer: decoded.producer,
            },
        }
    }
}

impl PreparedProduce {
    /// Produces through the broker; the answer as both transports send it.
    pub async fn send(self, broker: &Broker) -> Result<ProduceResponse, ApiError> {
        let answer = broker
            .produce()
            .produce(&self.topic, self.messages, self.acks, self.idempotence)
            .await?;
        Ok(answer.into())
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::api::dto::idempotence::idempotency_key;

    /// The header as `POST /v1/topics/{topic}/messages` takes it, through the one check.
    fn keyed_from_header(value: &[u8]) -> Result<KeyedProduce, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "idempotency-key",
            HeaderValue::from_bytes(value).expect("a header value"),
        );
        ProduceTo::new("orders".to_string())?.keyed(idempotency_key(&headers)?)
    }

    #[test]
    fn a_key_is_checked_once_for_every_transport() {
        assert!(keyed_from_header(b"order-17 retry #2").is_ok());
        assert!(keyed_from_header("k".repeat(255).as_bytes()).is_ok());
        for bad in ["", "tab\there", &"k".repeat(256)] {
            let error = keyed_from_header(bad.as_bytes()).expect_err(bad);
            assert_eq!(error.code.as_str(), "invalid_request", "{bad:?}");
        }
        // A WebSocket frame's key takes the same check.
        let from_frame = ProduceTo::new("orders".to_string())
            .expect("a topic name")
            .keyed(Some(String::new()));
        assert!(from_frame.is_err());
    }

    #[test]
    fn the_topic_is_answered_before_the_key() {
        let error = ProduceTo::new("bad name!".to_string())
            .and_then(|produce| produce.keyed(Some(String::new())))
            .expect_err("both are wrong");
        assert!(error.detail.contains("topic"), "{}", error.detail);
    }
}
