//! Avro schemas: compiled with `apache-avro`, validated by our own walker.
//!
//! A schema's references are Avro named types (records, enums, fixed) registered under other
//! subjects; they are parsed together with the schema (`Schema::parse_str_with_list`) so the
//! schema can use a type by its full name. Every named type, the schema's own and its
//! references', is kept in one map to follow `Schema::Ref` while validating, converting and
//! checking compatibility.

pub(crate) mod compat;
#[cfg(test)]
mod compat_tests;
pub(crate) mod json;
#[cfg(test)]
mod tests;
pub(crate) mod validate;

use apache_avro::schema::{ResolvedSchema, Schema};

use crate::{SchemaError, SchemaSource, SchemaType, ValidationError};
use validate::Names;

/// A compiled Avro schema.
#[derive(Debug)]
pub(crate) struct AvroSchema {
    root: Schema,
    /// The named types from the references.
    references: Vec<Schema>,
    names: Names,
    canonical: String,
}

impl AvroSchema {
    pub(crate) fn compile(source: &SchemaSource) -> Result<Self, SchemaError> {
        let mut texts = Vec::new();
        for reference in source.flatten_references() {
            if reference.source.schema_type != SchemaType::Avro {
                return Err(SchemaError::Reference(format!(
                    "{:?} is a {} schema; an Avro schema can only reference Avro named types",
                    reference.name, reference.source.schema_type
                )));
            }
            texts.push(reference.source.schema.as_str());
        }
        let (root, references) = if texts.is_empty() {
            (Schema::parse_str(&source.schema), Vec::new())
        } else {
            match Schema::parse_str_with_list(&source.schema, &texts) {
                Ok((root, references)) => (Ok(root), references),
                Err(e) => (Err(e), Vec::new()),
            }
        };
        let root = root.map_err(|e| SchemaError::Invalid(format!("Avro: {e}")))?;
        let names = {
            // References first: resolving stops at a name it has not seen yet.
            let all: Vec<&Schema> = references.iter().chain(std::iter::once(&root)).collect();
            let resolved = ResolvedSchema::try_from(all)
                .map_err(|e| SchemaError::Invalid(format!("Avro: {e}")))?;
            resolved
                .get_names()
                .iter()
                .map(|(name, schema)| (name.clone(), (*schema).clone()))
                .collect::<Names>()
        };
        let canonical = root.canonical_form();
        Ok(AvroSchema {
            root,
            references,
            names,
            canonical,
        })
    }

    /// Avro's Parsing Canonical Form.
    pub(crate) fn canonical(&self) -> &str {
        &self.canonical
    }

    pub(crate) fn side(&self) -> compat::Side<'_> {
        compat::Side {
            schema: &self.root,
            names: &self.names,
        }
    }

    pub(crate) fn validate(&self, payload: &[u8]) -> Result<(), ValidationError> {
        validate::validate(&self.root, &self.names, payload)
    }

    /// Validates first (cheap, bounded), then decodes with apache-avro.
    pub(crate) fn decode_to_json(
        &self,
        payload: &[u8],
    ) -> Result<serde_json::Value, ValidationError> {
        self.validate(payload)?;
        let value = self.decode_with_apache_avro(payload)?;
        Ok(json::value_to_json(&value))
    }

    pub(crate) fn decode_with_apache_avro(
        &self,
        payload: &[u8],
    ) -> Result<apache_avro::types::Value, ValidationError> {
        let mut reader = payload;
        let value =
            apache_avro::from_avro_datum_schemata(&self.root, self.schemata(), &mut reader, None)
                .map_err(|e| ValidationError::at_root(format!("cannot decode: {e}")))?;
        if !reader.is_empty() {
            return Err(ValidationError::at_root(format!(
                "{} trailing bytes after the end of the record",
                reader.len()
            )));
        }
        Ok(value)
    }

    pub(crate) fn encode_json(
        &self,
        value: &serde_json::Value,
    ) -> Result<Vec<u8>, ValidationError> {
        let value = json::json_to_value(value, &self.root, &self.names)?;
        apache_avro::to_avro_datum_schemata(&self.root, self.schemata(), value)
            .map_err(|e| ValidationError::at_root(format!("cannot encode: {e}")))
    }

    fn schemata(&self) -> Vec<&Schema> {
        self.references
            .iter()
            .chain(std::iter::once(&self.root))
            .collect()
    }
}
