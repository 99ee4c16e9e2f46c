//! `herald produce --schema SUBJECT`: each stdin line is a JSON value, encoded with the
//! subject's latest schema (Avro or Protobuf binary, or JSON) and framed in Confluent's wire
//! format (magic byte 0, the schema id, Protobuf's message indexes), so a topic whose
//! `value_subject` is the subject takes it and any Confluent deserializer reads it.
//!
//! The schema and the schemas it references are fetched from the node's registry once, and
//! compiled here with the same code the node validates with (`herald_schemas`).

use anyhow::Context;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::client::Api;
use herald_schemas::{wire, CompiledSchema, ResolvedReference, SchemaSource, SchemaType};

/// How deep references are followed (as the node does).
const MAX_REFERENCE_DEPTH: usize = 16;

/// One version of a subject as the registry answers it.
#[derive(Debug, Deserialize)]
struct SubjectVersion {
    id: u32,
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
    schema: String,
    #[serde(default)]
    references: Vec<Reference>,
}

#[derive(Debug, Deserialize)]
struct Reference {
    name: String,
    subject: String,
    version: u32,
}

/// The subject's latest schema, compiled, and what frames its payloads.
pub struct SchemaEncoder {
    subject: String,
    schema_id: u32,
    compiled: CompiledSchema,
}

impl SchemaEncoder {
    /// Fetches and compiles the latest version of `subject`.
    pub async fn fetch(api: &Api, subject: &str) -> anyhow::Result<SchemaEncoder> {
        let latest = fetch_version(api, subject, "latest").await?;
        let source = Box::pin(source_of(api, &latest, 0)).await?;
        let compiled = CompiledSchema::compile(&source).with_context(|| {
            format!("the latest schema of subject '{subject}' does not compile")
        })?;
        Ok(SchemaEncoder {
            subject: subject.to_string(),
            schema_id: latest.id,
            compiled,
        })
    }

    /// One line (a JSON value) as a produce message with the encoded value in `value_b64`.
    pub fn line_to_message(
        &self,
        line: &[u8],
        key: Option<&str>,
        partition: Option<u32>,
        line_number: u64,
    ) -> anyhow::Result<Value> {
        let value: Value = serde_json::from_slice(line).with_context(|| {
            format!("stdin line {line_number} is not a JSON value (--schema encodes JSON lines)")
        })?;
        let encoded = self.encode(&value).with_context(|| {
            format!(
                "stdin line {line_number} does not fit subject '{}' (schema id {})",
                self.subject, self.schema_id
            )
        })?;
        let mut message = Map::new();
        if let Some(key) = key {
            message.insert("key".into(), Value::String(key.to_string()));
        }
        if let Some(partition) = partition {
            message.insert("partition".into(), Value::from(partition));
        }
        message.insert(
            "value_b64".into(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(encoded)),
        );
        Ok(Value::Object(message))
    }

    /// A value in the wire format: header, then the payload (Protobuf: the file's first
    /// message type).
    pub fn encode(&self, value: &Value) -> anyhow::Result<Vec<u8>> {
        let protobuf = self.compiled.schema_type() == SchemaType::Protobuf;
        let indexes: &[i32] = &[0];
        let payload = self
            .compiled
            .encode_json(value, indexes)
            .map_err(|error| anyhow::anyhow!("at {}: {}", error.path, error.message))?;
        let mut framed = Vec::with_capacity(payload.len() + 6);
        wire::encode_header(self.schema_id, protobuf.then_some(indexes), &mut framed);
        framed.extend_from_slice(&payload);
        Ok(framed)
    }
}

async fn fetch_version(api: &Api, subject: &str, version: &str) -> anyhow::Result<SubjectVersion> {
    let url = api.url(&["schema-registry", "subjects", subject, "versions", version]);
    api.send_json(api.http().get(url))
        .await
        .with_context(|| format!("could not fetch version {version} of subject '{subject}'"))
}

/// The version's source with its references fetched and resolved, recursively.
async fn source_of(
    api: &Api,
    version: &SubjectVersion,
    depth: usize,
) -> anyhow::Result<SchemaSource> {
    anyhow::ensure!(
        depth <= MAX_REFERENCE_DEPTH,
        "references nest deeper than {MAX_REFERENCE_DEPTH}"
    );
    let mut references = Vec::with_capacity(version.references.len());
    for reference in &version.references {
        let referenced =
            fetch_version(api, &reference.subject, &reference.version.to_string()).await?;
        references.push(ResolvedReference {
            name: reference.name.clone(),
            source: Box::pin(source_of(api, &referenced, depth + 1)).await?,
        });
    }
    let schema_type = match version.schema_type.as_deref() {
        None | Some("AVRO") => SchemaType::Avro,
        Some("PROTOBUF") => SchemaType::Protobuf,
        Some("JSON") => SchemaType::Json,
        Some(other) => anyhow::bail!("unknown schema type '{other}'"),
    };
    Ok(SchemaSource {
        schema_type,
        schema: version.schema.clone(),
        references,
    })
}
