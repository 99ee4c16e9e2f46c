//! Decoding for readers (`decode=json`): a value (or key) in Confluent's wire format comes back
//! as JSON, with the schema it was decoded with, so curl, browsers and the console read Avro
//! and Protobuf messages without a deserializer (`docs/schemas.md`, "Reading decoded").
//!
//! Decoding never fails a read: a part that cannot be decoded keeps its bytes and says why.
//! One decoder serves one read (or one stream), and keeps the schemas it compiled.

use std::collections::HashMap;
use std::sync::Arc;

use super::SchemaService;
use crate::BrokerResult;
use herald_domain::schemas::SchemaId;
use herald_schemas::{wire, CompiledSchema, SchemaType};

/// The schema a part was decoded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedWith {
    pub schema_id: SchemaId,
    /// The subject (and its version) that holds the id: the topic's own subject when it does,
    /// else the first that does.
    pub subject: Option<String>,
    pub version: Option<u32>,
}

/// What decoding one part gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// JSON, and the schema it came from.
    Json(serde_json::Value, DecodedWith),
    /// Left as it was, and why.
    Failed(String),
}

/// Decodes the parts of one read's messages.
pub struct MessageDecoder {
    service: SchemaService,
    topic: String,
    compiled: HashMap<SchemaId, Arc<CompiledSchema>>,
    synced: bool,
}

impl SchemaService {
    /// A decoder for messages of `topic`.
    pub fn decoder(&self, topic: &str) -> MessageDecoder {
        MessageDecoder {
            service: self.clone(),
            topic: topic.to_string(),
            compiled: HashMap::new(),
            synced: false,
        }
    }
}

impl MessageDecoder {
    /// Decodes bytes in Confluent's wire format.
    pub async fn decode(&mut self, bytes: &[u8]) -> Decoded {
        match self.try_decode(bytes).await {
            Ok(decoded) => decoded,
            Err(error) => Decoded::Failed(error.to_string()),
        }
    }

    async fn try_decode(&mut self, bytes: &[u8]) -> BrokerResult<Decoded> {
        let id = match wire::schema_id(bytes) {
            Ok(id) => id,
            Err(error) => return Ok(Decoded::Failed(error.to_string())),
        };
        let compiled = match self.compiled.get(&id) {
            Some(hit) => hit.clone(),
            None => {
                let state = self.service.state();
                let mut found = self.service.compiled.get(&state.schemas, id)?;
                if found.is_none() && !self.synced {
                    // Registered through another node a moment ago.
                    self.synced = true;
                    self.service
                        .barrier
                        .sync(self.service.core.cluster())
                        .await?;
                    let state = self.service.state();
                    found = self.service.compiled.get(&state.schemas, id)?;
                }
                let Some(compiled) = found else {
                    return Ok(Decoded::Failed(format!("schema id {id} is not known")));
                };
                self.compiled.insert(id, compiled.clone());
                compiled
            }
        };
        let is_protobuf = compiled.schema_type() == SchemaType::Protobuf;
        let header = match wire::parse(bytes, is_protobuf) {
            Ok(header) => header,
            Err(error) => return Ok(Decoded::Failed(error.to_string())),
        };
        match compiled.decode_to_json(header.payload, &header.message_indexes) {
            Ok(json) => Ok(Decoded::Json(json, self.decoded_with(id))),
            Err(error) => Ok(Decoded::Failed(format!(
                "does not decode with schema id {id}: at {}: {}",
                error.path, error.message
            ))),
        }
    }

    fn decoded_with(&self, schema_id: SchemaId) -> DecodedWith {
        let state = self.service.state();
        let registry = &state.schemas;
        let bound = registry.topics.get(&self.topic);
        let own = bound
            .into_iter()
            .flat_map(|bound| [&bound.value_subject, &bound.key_subject])
            .flatten()
            .find_map(|subject| {
                registry
                    .live_version_with(subject, schema_id)
                    .map(|version| (subject.clone(), version))
            });
        let (subject, version) = match own {
            Some((subject, version)) => (Some(subject), Some(version)),
            None => match registry.versions_of(schema_id).into_iter().next() {
                Some((subject, version, _)) => (Some(subject), Some(version)),
                None => (None, None),
            },
        };
        DecodedWith {
            schema_id,
            subject,
            version,
        }
    }
}
