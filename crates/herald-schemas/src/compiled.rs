//! [`CompiledSchema`]: one registered schema version, ready to validate and convert messages.
//!
//! Compiling parses the text, resolves references and builds what validation needs
//! (Avro's named types, Protobuf descriptors, a JSON Schema validator). That is far more
//! expensive than validating a message, so the registry compiles a version once and shares
//! it (`Arc<CompiledSchema>`) between all the requests that use its id.

use crate::{
    avro::AvroSchema, json_schema::JsonSchema, protobuf::ProtoSchema, SchemaError, SchemaSource,
    SchemaType, ValidationError,
};

/// A compiled schema of any of the three types.
#[derive(Debug)]
pub struct CompiledSchema {
    pub(crate) inner: Inner,
}

#[derive(Debug)]
pub(crate) enum Inner {
    Avro(AvroSchema),
    Protobuf(ProtoSchema),
    Json(JsonSchema),
}

impl CompiledSchema {
    /// Parses and checks a schema; [`SchemaError::Invalid`] says what is wrong with it.
    pub fn compile(source: &SchemaSource) -> Result<CompiledSchema, SchemaError> {
        let inner = match source.schema_type {
            SchemaType::Avro => Inner::Avro(AvroSchema::compile(source)?),
            SchemaType::Protobuf => Inner::Protobuf(ProtoSchema::compile(source)?),
            SchemaType::Json => Inner::Json(JsonSchema::compile(source)?),
        };
        Ok(CompiledSchema { inner })
    }

    pub fn schema_type(&self) -> SchemaType {
        match self.inner {
            Inner::Avro(_) => SchemaType::Avro,
            Inner::Protobuf(_) => SchemaType::Protobuf,
            Inner::Json(_) => SchemaType::Json,
        }
    }

    /// Confluent's normalized form, for `normalize=true` lookups: Avro's Parsing Canonical
    /// Form, compact JSON with sorted keys for JSON Schema, the trimmed source for Protobuf.
    pub fn canonical(&self) -> String {
        match &self.inner {
            Inner::Avro(s) => s.canonical().to_owned(),
            Inner::Protobuf(s) => s.canonical().to_owned(),
            Inner::Json(s) => s.canonical().to_owned(),
        }
    }

    /// Checks an encoded payload (the bytes after the Confluent wire header) against this
    /// schema. `message_indexes` (from the header) select the Protobuf message type and are
    /// ignored for the other types.
    pub fn validate(&self, payload: &[u8], message_indexes: &[i32]) -> Result<(), ValidationError> {
        match &self.inner {
            Inner::Avro(s) => s.validate(payload),
            Inner::Protobuf(s) => s.validate(payload, message_indexes),
            Inner::Json(s) => s.validate(payload),
        }
    }

    /// Checks a JSON value sent without a wire header: only JSON schemas accept that.
    pub fn validate_json(&self, value: &serde_json::Value) -> Result<(), ValidationError> {
        match &self.inner {
            Inner::Json(s) => s.validate_json(value),
            _ => Err(ValidationError::at_root(format!(
                "a {} schema needs the message in the Confluent wire format (magic byte 0, schema id, {} payload), not JSON",
                self.schema_type(),
                self.schema_type()
            ))),
        }
    }

    /// Decodes a payload (after the header) to JSON: Avro with the natural mapping of
    /// `avro::json` (unions as their value, bytes as base64), Protobuf with the canonical
    /// proto3 JSON mapping, JSON as parsed.
    pub fn decode_to_json(
        &self,
        payload: &[u8],
        message_indexes: &[i32],
    ) -> Result<serde_json::Value, ValidationError> {
        match &self.inner {
            Inner::Avro(s) => s.decode_to_json(payload),
            Inner::Protobuf(s) => s.decode_to_json(payload, message_indexes),
            Inner::Json(s) => s.decode_to_json(payload),
        }
    }

    /// Encodes a JSON value (the mapping of [`decode_to_json`](Self::decode_to_json)) to a
    /// payload, without the wire header; for a JSON schema, validates and serializes it.
    pub fn encode_json(
        &self,
        value: &serde_json::Value,
        message_indexes: &[i32],
    ) -> Result<Vec<u8>, ValidationError> {
        match &self.inner {
            Inner::Avro(s) => s.encode_json(value),
            Inner::Protobuf(s) => s.encode_json(value, message_indexes),
            Inner::Json(s) => s.encode_json(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_schemas_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CompiledSchema>();
    }
}
