//! JSON Schema: validated with the `jsonschema` crate.
//!
//! The draft comes from `$schema` (draft 4, 6, 7, 2019-09 or 2020-12); without one it is
//! draft 7, as Confluent's registry assumes. References are other JSON schemas registered
//! under their reference `name`; a `$ref` to that name (`"address.json"`, resolved against
//! the default base URI `json-schema:///`) or to the name as a full URI is answered from
//! memory by [`InMemoryRetriever`]. Nothing is ever fetched over the network or from files:
//! the crate's HTTP and file resolvers are not even compiled in.

pub(crate) mod compat;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use jsonschema::{Draft, Retrieve, Uri, Validator};
use serde_json::Value;

use crate::{error::pointer_to_path, SchemaError, SchemaSource, SchemaType, ValidationError};

/// A compiled JSON schema.
pub(crate) struct JsonSchema {
    validator: Validator,
    /// The schema as parsed, for compatibility checks.
    pub(crate) schema: Value,
    canonical: String,
}

impl std::fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSchema")
            .field("schema", &self.canonical)
            .finish()
    }
}

/// The referenced schemas by reference name.
struct InMemoryRetriever {
    schemas: HashMap<String, Value>,
}

impl Retrieve for InMemoryRetriever {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let full = uri.as_str();
        let relative = full.strip_prefix("json-schema:///").unwrap_or(full);
        self.schemas
            .get(full)
            .or_else(|| self.schemas.get(relative))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{full} is not one of the schema's references ({})",
                    self.schemas.keys().cloned().collect::<Vec<_>>().join(", ")
                )
                .into()
            })
    }
}

fn draft_of(schema: &Value) -> Draft {
    let Some(uri) = schema.get("$schema").and_then(Value::as_str) else {
        return Draft::Draft7;
    };
    if uri.contains("draft-04") {
        Draft::Draft4
    } else if uri.contains("draft-06") {
        Draft::Draft6
    } else if uri.contains("2019-09") {
        Draft::Draft201909
    } else if uri.contains("2020-12") {
        Draft::Draft202012
    } else {
        Draft::Draft7
    }
}

fn parse_json(text: &str, what: &str) -> Result<Value, SchemaError> {
    serde_json::from_str(text).map_err(|e| SchemaError::Invalid(format!("{what} is not JSON: {e}")))
}

impl JsonSchema {
    pub(crate) fn compile(source: &SchemaSource) -> Result<Self, SchemaError> {
        let schema = parse_json(&source.schema, "JSON schema")?;
        let mut schemas = HashMap::new();
        for reference in source.flatten_references() {
            if reference.source.schema_type != SchemaType::Json {
                return Err(SchemaError::Reference(format!(
                    "{:?} is a {} schema; a JSON schema can only reference JSON schemas",
                    reference.name, reference.source.schema_type
                )));
            }
            let value = parse_json(
                &reference.source.schema,
                &format!("the reference {:?}", reference.name),
            )?;
            schemas.insert(reference.name.clone(), value);
        }
        let validator = jsonschema::options()
            .with_draft(draft_of(&schema))
            .with_retriever(InMemoryRetriever { schemas })
            .build(&schema)
            .map_err(|e| {
                SchemaError::Invalid(format!(
                    "JSON schema at {}: {e}",
                    pointer_to_path(e.instance_path().as_str())
                ))
            })?;
        let canonical = serde_json::to_string(&schema)
            .map_err(|e| SchemaError::Invalid(format!("JSON schema: {e}")))?;
        Ok(JsonSchema {
            validator,
            schema,
            canonical,
        })
    }

    /// Compact JSON with sorted keys.
    pub(crate) fn canonical(&self) -> &str {
        &self.canonical
    }

    pub(crate) fn validate(&self, payload: &[u8]) -> Result<(), ValidationError> {
        let value = parse_payload(payload)?;
        self.validate_json(&value)
    }

    /// The first error, with how many more there are.
    pub(crate) fn validate_json(&self, value: &Value) -> Result<(), ValidationError> {
        let mut errors = self.validator.iter_errors(value);
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let more = errors.count();
        let mut message = first.to_string();
        if more > 0 {
            message.push_str(&format!(
                " (and {more} more error{})",
                if more == 1 { "" } else { "s" }
            ));
        }
        Err(ValidationError::new(
            pointer_to_path(first.instance_path().as_str()),
            message,
        ))
    }

    /// The payload as parsed (not validated: a reader wants to see what is there).
    pub(crate) fn decode_to_json(&self, payload: &[u8]) -> Result<Value, ValidationError> {
        parse_payload(payload)
    }

    pub(crate) fn encode_json(&self, value: &Value) -> Result<Vec<u8>, ValidationError> {
        self.validate_json(value)?;
        serde_json::to_vec(value).map_err(|e| ValidationError::at_root(e.to_string()))
    }
}

fn parse_payload(payload: &[u8]) -> Result<Value, ValidationError> {
    serde_json::from_slice(payload)
        .map_err(|e| ValidationError::at_root(format!("the payload is not JSON: {e}")))
}
