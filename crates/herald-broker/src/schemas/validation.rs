//! Validation at produce: a topic whose config names a key or value subject takes only
//! messages that follow one of the subject's versions (`docs/schemas.md`, "Validation").
//!
//! - Bytes (`value_b64`, `application/octet-stream`, a binary batch's byte values) must be in
//!   Confluent's wire format: magic byte 0, the id of a schema one of the subject's live
//!   versions holds, Protobuf's message indexes, then a payload that decodes with that schema.
//! - A JSON value (`value`) is checked against the subject's latest live version, which must
//!   then be a JSON Schema; a JSON `null` (a tombstone) is always taken.
//! - A text key is checked as a JSON string against a JSON Schema key subject.
//!
//! A request's validator is made once per request from one metadata version; the compiled
//! schemas come from the node's cache. An id the validator does not know (registered through
//! another node a moment ago) makes it catch up with the metadata leader once and look again.

use std::collections::HashMap;
use std::sync::Arc;

use super::SchemaService;
use crate::{BrokerError, BrokerResult, ErrorCode};
use herald_domain::schemas::{SchemaFormat, SchemaId, SchemaRegistry};
use herald_schemas::{wire, CompiledSchema, SchemaType};

/// Which part of a message a subject governs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Key,
    Value,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Key => "key",
            Part::Value => "value",
        }
    }
}

/// One part of a message, as the produce paths hold it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// JSON text.
    Json(&'a [u8]),
    /// A text key.
    Text(&'a str),
    Bytes(&'a [u8]),
}

/// What one subject allows, as of one metadata version.
struct SubjectRule {
    subject: String,
    /// The schema ids the subject's live versions hold, with their version numbers.
    versions: HashMap<SchemaId, u32>,
    /// The latest live version: its id and format (JSON values are checked against it).
    latest: Option<(SchemaId, u32, SchemaFormat)>,
    compiled: HashMap<SchemaId, Arc<CompiledSchema>>,
}

impl SubjectRule {
    fn of(registry: &SchemaRegistry, subject: &str) -> SubjectRule {
        let mut versions = HashMap::new();
        let mut latest = None;
        if let Some(found) = registry.subjects.get(subject) {
            for (version, id) in found.live_versions() {
                versions.insert(id, version);
                if let Some(schema) = registry.schemas.get(&id) {
                    latest = Some((id, version, schema.format));
                }
            }
        }
        SubjectRule {
            subject: subject.to_string(),
            versions,
            latest,
            compiled: HashMap::new(),
        }
    }
}

/// The checks of one produce request to a topic with subjects.
pub(crate) struct TopicValidator {
    service: SchemaService,
    key: Option<SubjectRule>,
    value: Option<SubjectRule>,
    /// Whether this request already caught up with the metadata leader.
    synced: bool,
}

impl SchemaService {
    /// The validator for a produce to `topic`, `None` when the topic names no subject (the
    /// common case: one map lookup).
    pub(crate) fn validator(&self, topic: &str) -> Option<TopicValidator> {
        let state = self.state();
        let bound = state.schemas.topics.get(topic)?;
        Some(TopicValidator {
            service: self.clone(),
            key: bound
                .key_subject
                .as_deref()
                .map(|subject| SubjectRule::of(&state.schemas, subject)),
            value: bound
                .value_subject
                .as_deref()
                .map(|subject| SubjectRule::of(&state.schemas, subject)),
            synced: false,
        })
    }
}

/// Why a check did not pass.
pub(crate) enum Refusal {
    /// The message does not follow the subject.
    Failed(BrokerError),
    /// The validator does not know the schema id the message names (or the subject has no
    /// version yet): it may have been registered through another node a moment ago.
    Unknown(BrokerError),
}

impl TopicValidator {
    /// Checks one part of message `position`, catching up with the metadata leader once when
    /// it names what this node does not know yet: 400 `schema_validation_failed` saying which
    /// message, which subject and schema, and where in the value.
    pub(crate) async fn check(
        &mut self,
        position: usize,
        part: Part,
        payload: Payload<'_>,
    ) -> BrokerResult<()> {
        match self.check_now(position, part, payload) {
            Ok(()) => Ok(()),
            Err(Refusal::Failed(error)) => Err(error),
            Err(Refusal::Unknown(error)) => {
                if !self.refresh().await? {
                    return Err(error);
                }
                self.check_now(position, part, payload)
                    .map_err(|refusal| match refusal {
                        Refusal::Failed(error) | Refusal::Unknown(error) => error,
                    })
            }
        }
    }

    /// Catches up with the metadata leader (once per request) and takes the subjects' versions
    /// again: false when it did already.
    pub(crate) async fn refresh(&mut self) -> BrokerResult<bool> {
        if self.synced {
            return Ok(false);
        }
        self.synced = true;
        self.service
            .barrier
            .sync(self.service.core.cluster())
            .await?;
        let state = self.service.state();
        for rule in [self.key.as_mut(), self.value.as_mut()]
            .into_iter()
            .flatten()
        {
            let fresh = SubjectRule::of(&state.schemas, &rule.subject);
            rule.versions = fresh.versions;
            rule.latest = fresh.latest;
        }
        Ok(true)
    }

    /// Checks one part of a message with what this node knows now.
    pub(crate) fn check_now(
        &mut self,
        position: usize,
        part: Part,
        payload: Payload<'_>,
    ) -> Result<(), Refusal> {
        let service = self.service.clone();
        let rule = match part {
            Part::Key => self.key.as_mut(),
            Part::Value => self.value.as_mut(),
        };
        let Some(rule) = rule else {
            return Ok(());
        };
        match payload {
            Payload::Json(json) => {
                if json.trim_ascii() == b"null" {
                    return Ok(());
                }
                let value: serde_json::Value = serde_json::from_slice(json).map_err(|error| {
                    Refusal::Failed(BrokerError::InvalidRequest(format!(
                        "message {position}: {}: {error}",
                        part.name()
                    )))
                })?;
                rule.check_json(&service, position, part, &value)
            }
            Payload::Text(text) => {
                let value = serde_json::Value::String(text.to_string());
                rule.check_json(&service, position, part, &value)
            }
            Payload::Bytes(bytes) => rule.check_bytes(&service, position, part, bytes),
        }
    }
}

impl SubjectRule {
    fn check_json(
        &mut self,
        service: &SchemaService,
        position: usize,
        part: Part,
        value: &serde_json::Value,
    ) -> Result<(), Refusal> {
        let subject = &self.subject;
        let Some((id, version, format)) = self.latest else {
            return Err(Refusal::Unknown(failed(
                position,
                part,
                &format!("subject '{subject}' has no schema to check it against"),
            )));
        };
        if format != SchemaFormat::Json {
            return Err(Refusal::Failed(failed(
                position,
                part,
                &format!(
                    "subject '{subject}' holds {} schemas: send the {} as bytes in the Confluent wire format (magic byte 0, schema id, payload), as `{}_b64` or a binary body",
                    format.as_str(),
                    part.name(),
                    part.name()
                ),
            )));
        }
        let compiled = self.compiled(service, position, part, id)?;
        compiled.validate_json(value).map_err(|error| {
            Refusal::Failed(failed(
                position,
                part,
                &format!(
                    "does not follow subject '{}' version {version} (schema id {id}): at {}: {}",
                    self.subject, error.path, error.message
                ),
            ))
        })
    }

    fn check_bytes(
        &mut self,
        service: &SchemaService,
        position: usize,
        part: Part,
        bytes: &[u8],
    ) -> Result<(), Refusal> {
        let subject = &self.subject;
        let id = wire::schema_id(bytes).map_err(|error| {
            Refusal::Failed(failed(
                position,
                part,
                &format!("subject '{subject}': {error}"),
            ))
        })?;
        let Some(version) = self.versions.get(&id).copied() else {
            return Err(Refusal::Unknown(failed(
                position,
                part,
                &format!("schema id {id} is not a live version of subject '{subject}'"),
            )));
        };
        let compiled = self.compiled(service, position, part, id)?;
        let is_protobuf = compiled.schema_type() == SchemaType::Protobuf;
        let header = wire::parse(bytes, is_protobuf).map_err(|error| {
            Refusal::Failed(failed(
                position,
                part,
                &format!("subject '{}': {error}", self.subject),
            ))
        })?;
        compiled
            .validate(header.payload, &header.message_indexes)
            .map_err(|error| {
                Refusal::Failed(failed(
                    position,
                    part,
                    &format!(
                        "does not follow subject '{}' version {version} (schema id {id}): at {}: {}",
                        self.subject, error.path, error.message
                    ),
                ))
            })
    }

    fn compiled(
        &mut self,
        service: &SchemaService,
        position: usize,
        part: Part,
        id: SchemaId,
    ) -> Result<Arc<CompiledSchema>, Refusal> {
        if let Some(hit) = self.compiled.get(&id) {
            return Ok(hit.clone());
        }
        let state = service.state();
        match service.compiled.get(&state.schemas, id) {
            Ok(Some(compiled)) => {
                self.compiled.insert(id, compiled.clone());
                Ok(compiled)
            }
            Ok(None) => Err(Refusal::Unknown(failed(
                position,
                part,
                &format!("schema id {id} is not known"),
            ))),
            Err(error) => Err(Refusal::Failed(error)),
        }
    }
}

fn failed(position: usize, part: Part, reason: &str) -> BrokerError {
    BrokerError::Schema {
        code: ErrorCode::SchemaValidationFailed,
        message: format!("message {position}: {} {reason}", part.name()),
    }
}
