//! What the schema registry's operations take and answer (the API maps them to Confluent's
//! JSON shapes).

use crate::{BrokerError, BrokerResult, ErrorCode};
use herald_domain::schemas::{SchemaId, StoredSchema};

/// A version in a path: a number from 1, or the latest live one (`latest`, or `-1` as
/// Confluent's clients also send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSelector {
    Latest,
    Number(u32),
}

impl VersionSelector {
    pub fn parse(text: &str) -> BrokerResult<VersionSelector> {
        if text == "latest" || text == "-1" {
            return Ok(VersionSelector::Latest);
        }
        match text.parse::<u32>() {
            Ok(number) if (1..=i32::MAX as u32).contains(&number) => {
                Ok(VersionSelector::Number(number))
            }
            _ => Err(BrokerError::Schema {
                code: ErrorCode::InvalidVersion,
                message: format!(
                    "The specified version '{text}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
                ),
            }),
        }
    }
}

/// One version of a subject, with its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectSchema {
    pub subject: String,
    pub version: u32,
    pub id: SchemaId,
    pub schema: StoredSchema,
}

/// What a registration answers: the schema's id and the version it has in the subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    pub id: SchemaId,
    pub version: u32,
}

/// What a compatibility check found: nothing (compatible), or every break.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatibilityReport {
    pub messages: Vec<String>,
}

impl CompatibilityReport {
    pub fn is_compatible(&self) -> bool {
        self.messages.is_empty()
    }
}

/// Which versions a compatibility check compares a schema with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckAgainst {
    /// The versions the subject's level names (the latest, or all of them for a transitive
    /// level): what a registration would be checked against.
    Level,
    /// One version only.
    Version(VersionSelector),
}
