//! Protobuf schemas: `.proto` source compiled by `protox`, messages handled by
//! `prost-reflect`.
//!
//! A Protobuf subject's schema is a whole `.proto` file; which message a record holds is
//! said by the message indexes of its wire header: the path of indexes into the file's
//! top-level messages and then their nested messages (`[1, 0]` is the first message nested
//! in the second top-level one). The payload is a plain Protobuf encoding of that message.
//!
//! JSON is the canonical proto3 JSON mapping (`prost-reflect`'s serde support): field names
//! in lowerCamelCase, 64-bit integers as strings, bytes as base64, enums by name,
//! well-known types (`Timestamp`, `Duration`, ...) in their special forms.

pub(crate) mod compat;
pub(crate) mod resolver;
#[cfg(test)]
mod tests;

use prost_reflect::{
    DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor, SerializeOptions,
};

use crate::{SchemaError, SchemaSource, SchemaType, ValidationError};
use resolver::{MemoryResolver, MAIN_FILE};

/// A compiled `.proto` file and everything it imports.
#[derive(Debug)]
pub(crate) struct ProtoSchema {
    file: FileDescriptor,
    canonical: String,
}

impl ProtoSchema {
    pub(crate) fn compile(source: &SchemaSource) -> Result<Self, SchemaError> {
        let mut references = Vec::new();
        for reference in source.flatten_references() {
            if reference.source.schema_type != SchemaType::Protobuf {
                return Err(SchemaError::Reference(format!(
                    "{:?} is a {} schema; a .proto file can only import .proto files",
                    reference.name, reference.source.schema_type
                )));
            }
            references.push((reference.name.clone(), reference.source.schema.clone()));
        }
        let resolver = MemoryResolver::new(&source.schema, references.iter().cloned());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler
            .open_file(MAIN_FILE)
            .map_err(|e| SchemaError::Invalid(describe_error(&e, &source.schema, &references)))?;
        let pool: DescriptorPool = compiler.descriptor_pool();
        let file = pool.get_file_by_name(MAIN_FILE).ok_or_else(|| {
            SchemaError::Invalid("Protobuf: the compiled file is missing".to_owned())
        })?;
        if file.messages().len() == 0 {
            return Err(SchemaError::Invalid(
                "Protobuf: the file defines no message".to_owned(),
            ));
        }
        Ok(ProtoSchema {
            file,
            canonical: source.schema.trim().to_owned(),
        })
    }

    pub(crate) fn canonical(&self) -> &str {
        &self.canonical
    }

    pub(crate) fn file(&self) -> &FileDescriptor {
        &self.file
    }

    /// The message type that `indexes` select (`[]` is taken as `[0]`).
    pub(crate) fn message(&self, indexes: &[i32]) -> Result<MessageDescriptor, ValidationError> {
        let indexes = if indexes.is_empty() {
            &[0][..]
        } else {
            indexes
        };
        let not_found = || {
            ValidationError::at_root(format!(
                "message indexes {indexes:?} select no message of the schema"
            ))
        };
        let (first, rest) = indexes.split_first().ok_or_else(not_found)?;
        let mut message = usize::try_from(*first)
            .ok()
            .and_then(|i| self.file.messages().nth(i))
            .ok_or_else(not_found)?;
        for index in rest {
            message = usize::try_from(*index)
                .ok()
                .and_then(|i| message.child_messages().nth(i))
                .ok_or_else(not_found)?;
        }
        Ok(message)
    }

    fn decode(&self, payload: &[u8], indexes: &[i32]) -> Result<DynamicMessage, ValidationError> {
        let descriptor = self.message(indexes)?;
        DynamicMessage::decode(descriptor.clone(), payload).map_err(|e| {
            ValidationError::new(format!("message {}", descriptor.full_name()), e.to_string())
        })
    }

    pub(crate) fn validate(&self, payload: &[u8], indexes: &[i32]) -> Result<(), ValidationError> {
        self.decode(payload, indexes).map(drop)
    }

    pub(crate) fn decode_to_json(
        &self,
        payload: &[u8],
        indexes: &[i32],
    ) -> Result<serde_json::Value, ValidationError> {
        let message = self.decode(payload, indexes)?;
        message
            .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
            .map_err(|e| ValidationError::at_root(format!("cannot map to JSON: {e}")))
    }

    pub(crate) fn encode_json(
        &self,
        value: &serde_json::Value,
        indexes: &[i32],
    ) -> Result<Vec<u8>, ValidationError> {
        use prost::Message as _;
        let descriptor = self.message(indexes)?;
        let message = DynamicMessage::deserialize(descriptor, value)
            .map_err(|e| ValidationError::at_root(e.to_string()))?;
        Ok(message.encode_to_vec())
    }
}

/// protox's error text, with the line and column where the parser points.
fn describe_error(error: &protox::Error, main: &str, references: &[(String, String)]) -> String {
    use miette::Diagnostic as _;
    let file = error.file().unwrap_or(MAIN_FILE);
    let source = if file == MAIN_FILE {
        Some(main)
    } else {
        references
            .iter()
            .find(|(name, _)| name == file)
            .map(|(_, s)| s.as_str())
    };
    let shown = if file == MAIN_FILE {
        "the schema"
    } else {
        file
    };
    let offset = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| label.offset());
    match (source, offset) {
        (Some(source), Some(offset)) => {
            let before = source.get(..offset).unwrap_or(source);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("Protobuf: {shown}, line {line}, column {column}: {error}")
        }
        _ => format!("Protobuf: {shown}: {error}"),
    }
}
