//! What the registry stores for a schema version: its type, its text and its references.
//!
//! The registry resolves references (subject + version) to their stored text before
//! compiling, so this crate never does I/O: a [`SchemaSource`] carries the whole tree.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// The three schema languages of Confluent's registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    /// Confluent's default when a registration has no `schemaType`.
    #[default]
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    /// The name used on the wire (`AVRO`, `PROTOBUF`, `JSON`).
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The unknown name, for an error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown schema type {0:?}: expected AVRO, PROTOBUF or JSON")]
pub struct UnknownSchemaType(pub String);

impl FromStr for SchemaType {
    type Err = UnknownSchemaType;

    /// Case-insensitive, as Confluent's registry accepts `avro` too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "AVRO" => Ok(SchemaType::Avro),
            "PROTOBUF" => Ok(SchemaType::Protobuf),
            "JSON" => Ok(SchemaType::Json),
            _ => Err(UnknownSchemaType(s.to_owned())),
        }
    }
}

/// A reference as Confluent's API spells it: `{"name", "subject", "version"}`.
///
/// `name` is how the referring schema names it: an Avro full name, a `.proto` import path or
/// a JSON Schema `$ref` URI.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// A schema's text with its references already resolved (recursively), as the registry
/// stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaSource {
    pub schema_type: SchemaType,
    pub schema: String,
    pub references: Vec<ResolvedReference>,
}

impl SchemaSource {
    /// A schema without references.
    pub fn new(schema_type: SchemaType, schema: impl Into<String>) -> Self {
        SchemaSource {
            schema_type,
            schema: schema.into(),
            references: Vec::new(),
        }
    }

    /// Adds a resolved reference (builder style, for tests and the CLI).
    pub fn with_reference(mut self, name: impl Into<String>, source: SchemaSource) -> Self {
        self.references.push(ResolvedReference {
            name: name.into(),
            source,
        });
        self
    }

    /// Every reference of the tree, depth first with a reference's own references before
    /// it, each name once (the first one wins, as an import is only read once).
    pub(crate) fn flatten_references(&self) -> Vec<&ResolvedReference> {
        fn walk<'a>(
            source: &'a SchemaSource,
            seen: &mut Vec<&'a str>,
            out: &mut Vec<&'a ResolvedReference>,
            depth: usize,
        ) {
            // The registry rejects cycles; this bound only keeps a bad tree from recursing
            // forever.
            if depth > 64 {
                return;
            }
            for reference in &source.references {
                if seen.contains(&reference.name.as_str()) {
                    continue;
                }
                seen.push(&reference.name);
                walk(&reference.source, seen, out, depth + 1);
                out.push(reference);
            }
        }
        let mut seen = Vec::new();
        let mut out = Vec::new();
        walk(self, &mut seen, &mut out, 0);
        out
    }
}

/// A reference's name together with the referenced schema (itself resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedReference {
    pub name: String,
    pub source: SchemaSource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_type_names() {
        assert_eq!(SchemaType::default(), SchemaType::Avro);
        assert_eq!("protobuf".parse::<SchemaType>(), Ok(SchemaType::Protobuf));
        assert_eq!(SchemaType::Json.to_string(), "JSON");
        assert!("XML".parse::<SchemaType>().is_err());
        assert_eq!(
            serde_json::to_string(&SchemaType::Protobuf).ok().as_deref(),
            Some("\"PROTOBUF\"")
        );
        let t: SchemaType = serde_json::from_str("\"JSON\"").expect("parses");
        assert_eq!(t, SchemaType::Json);
    }

    #[test]
    fn reference_serde_is_confluents() {
        let r: SchemaReference =
            serde_json::from_str(r#"{"name":"a.proto","subject":"a","version":2}"#)
                .expect("parses");
        assert_eq!(r.version, 2);
        assert_eq!(
            serde_json::to_value(&r).expect("serializes"),
            serde_json::json!({"name":"a.proto","subject":"a","version":2})
        );
    }

    #[test]
    fn references_flatten_dependencies_first() {
        let leaf = SchemaSource::new(SchemaType::Avro, "leaf");
        let mid = SchemaSource::new(SchemaType::Avro, "mid").with_reference("leaf", leaf.clone());
        let root = SchemaSource::new(SchemaType::Avro, "root")
            .with_reference("mid", mid)
            .with_reference("leaf", leaf);
        let names: Vec<_> = root
            .flatten_references()
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["leaf", "mid"]);
    }
}
