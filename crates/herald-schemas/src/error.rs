//! The two ways things go wrong: a schema that cannot be compiled ([`SchemaError`]) and a
//! message that does not match its schema ([`ValidationError`]).
//!
//! They are separate because they reach different people: a `SchemaError` answers the
//! registration (`422` with Confluent's "Invalid schema" code), a `ValidationError` answers a
//! produce or a read, and names *where in the value* the message breaks, so the producer can
//! find the offending field among thousands of records.

use std::fmt;

/// A schema could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema text is malformed, names an unknown type, has a bad default, ...; the
    /// message says what and (where the parser knows it) where.
    #[error("invalid schema: {0}")]
    Invalid(String),
    /// A schema reference could not be used (an unknown name, a cycle, a wrong type).
    #[error("invalid schema reference: {0}")]
    Reference(String),
}

/// A value (encoded payload or JSON) does not match its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Where in the value: `$` is the whole value, `$.address.zip`, `$.items[2]`; for
    /// Protobuf the field path as far as it is known.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl ValidationError {
    /// An error about the value as a whole.
    pub fn at_root(message: impl Into<String>) -> Self {
        ValidationError {
            path: "$".to_owned(),
            message: message.into(),
        }
    }

    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {}: {}", self.path, self.message)
    }
}

impl std::error::Error for ValidationError {}

/// Turns a JSON pointer (`/a/b/2`) into the `$.a.b[2]` form of [`ValidationError::path`].
pub(crate) fn pointer_to_path(pointer: &str) -> String {
    let mut path = String::from("$");
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            path.push('[');
            path.push_str(&segment);
            path.push(']');
        } else {
            path.push('.');
            path.push_str(&segment);
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_dollar_paths() {
        assert_eq!(pointer_to_path(""), "$");
        assert_eq!(pointer_to_path("/a/b/2"), "$.a.b[2]");
        assert_eq!(pointer_to_path("/a~1b/0/c"), "$.a/b[0].c");
    }

    #[test]
    fn display_names_the_place() {
        let e = ValidationError::new("$.zip", "expected a string");
        assert_eq!(e.to_string(), "at $.zip: expected a string");
    }
}
