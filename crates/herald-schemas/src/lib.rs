//! Herald's Schema Registry core: everything about schemas that does no I/O.
//!
//! The registry (storage, REST API, replication) lives elsewhere and calls into this crate
//! to compile a registered schema ([`CompiledSchema::compile`]), to check a new version
//! against the old ones ([`compat::check`]), to validate produced messages
//! ([`CompiledSchema::validate`] after [`wire::parse`]) and to show messages as JSON
//! ([`CompiledSchema::decode_to_json`]). Each of the three schema types has its module:
//! `avro`, `protobuf` and `json_schema`, each with its compatibility rules in a `compat`
//! submodule.
//!
//! Validation runs on every produced message, so it is built to be cheap: Avro payloads are
//! checked by a walker that allocates nothing (`avro::validate`), and a compiled schema is
//! meant to be compiled once per version and shared.

#![forbid(unsafe_code)]

mod avro;
pub mod compat;
mod compiled;
mod error;
mod json_schema;
mod protobuf;
mod source;
pub mod wire;

pub use compat::CompatibilityLevel;
pub use compiled::CompiledSchema;
pub use error::{SchemaError, ValidationError};
pub use source::{ResolvedReference, SchemaReference, SchemaSource, SchemaType, UnknownSchemaType};
