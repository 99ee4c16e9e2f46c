//! Compatibility levels: which previous versions a new schema is checked against, and in
//! which direction.
//!
//! Following Confluent: BACKWARD means consumers using the new schema can read data written
//! with the previous one (the new schema is the reader), FORWARD means consumers of the
//! previous schema can read data written with the new one (the new schema is the writer),
//! FULL is both. The `_TRANSITIVE` levels check against every live version, the others only
//! against the latest. What "can read" means is each format's own rule set:
//! `avro::compat`, `protobuf::compat` and `json_schema::compat`.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::{compiled::Inner, CompiledSchema};

/// A subject's (or the registry's) compatibility level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CompatibilityLevel {
    /// Confluent's default.
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
    None,
}

impl CompatibilityLevel {
    pub const ALL: [CompatibilityLevel; 7] = [
        CompatibilityLevel::Backward,
        CompatibilityLevel::BackwardTransitive,
        CompatibilityLevel::Forward,
        CompatibilityLevel::ForwardTransitive,
        CompatibilityLevel::Full,
        CompatibilityLevel::FullTransitive,
        CompatibilityLevel::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CompatibilityLevel::Backward => "BACKWARD",
            CompatibilityLevel::BackwardTransitive => "BACKWARD_TRANSITIVE",
            CompatibilityLevel::Forward => "FORWARD",
            CompatibilityLevel::ForwardTransitive => "FORWARD_TRANSITIVE",
            CompatibilityLevel::Full => "FULL",
            CompatibilityLevel::FullTransitive => "FULL_TRANSITIVE",
            CompatibilityLevel::None => "NONE",
        }
    }

    fn is_transitive(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::FullTransitive
        )
    }

    /// (new schema reads old data, old schema reads new data)
    fn directions(self) -> (bool, bool) {
        match self {
            CompatibilityLevel::Backward | CompatibilityLevel::BackwardTransitive => (true, false),
            CompatibilityLevel::Forward | CompatibilityLevel::ForwardTransitive => (false, true),
            CompatibilityLevel::Full | CompatibilityLevel::FullTransitive => (true, true),
            CompatibilityLevel::None => (false, false),
        }
    }
}

impl fmt::Display for CompatibilityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The unknown name, for an error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compatibility level {0:?}: expected BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE or NONE")]
pub struct UnknownCompatibilityLevel(pub String);

impl FromStr for CompatibilityLevel {
    type Err = UnknownCompatibilityLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let upper = s.to_ascii_uppercase();
        CompatibilityLevel::ALL
            .into_iter()
            .find(|l| l.as_str() == upper)
            .ok_or_else(|| UnknownCompatibilityLevel(s.to_owned()))
    }
}

/// Checks `candidate` against `previous` (the subject's live versions, oldest first) at
/// `level`. Returns every incompatibility found as a readable message; empty means
/// compatible.
pub fn check(
    level: CompatibilityLevel,
    candidate: &CompiledSchema,
    previous: &[&CompiledSchema],
) -> Vec<String> {
    let (backward, forward) = level.directions();
    if !(backward || forward) {
        return Vec::new();
    }
    let against: &[&CompiledSchema] = if level.is_transitive() {
        previous
    } else {
        previous.last().map(std::slice::from_ref).unwrap_or(&[])
    };
    let mut problems = Vec::new();
    let count = previous.len();
    for (i, old) in against.iter().enumerate() {
        // Versions counted back from the newest, since the caller's numbering is not ours.
        let which = if level.is_transitive() {
            format!("previous schema #{} of {count} (oldest first)", i + 1)
        } else {
            "the latest schema".to_owned()
        };
        if old.schema_type() != candidate.schema_type() {
            problems.push(format!(
                "{which} is {} and the new schema is {}: schemas of different types are incompatible",
                old.schema_type(),
                candidate.schema_type()
            ));
            continue;
        }
        if backward {
            for p in can_read(old, candidate) {
                problems.push(format!(
                    "BACKWARD: the new schema cannot read data written with {which}: {p}"
                ));
            }
        }
        if forward {
            for p in can_read(candidate, old) {
                problems.push(format!(
                    "FORWARD: {which} cannot read data written with the new schema: {p}"
                ));
            }
        }
    }
    problems
}

/// Every reason why `reader` cannot read data written with `writer` (same type).
fn can_read(writer: &CompiledSchema, reader: &CompiledSchema) -> Vec<String> {
    match (&writer.inner, &reader.inner) {
        (Inner::Avro(w), Inner::Avro(r)) => crate::avro::compat::can_read(w.side(), r.side()),
        (Inner::Protobuf(w), Inner::Protobuf(r)) => {
            crate::protobuf::compat::can_read(w.file(), r.file())
        }
        (Inner::Json(w), Inner::Json(r)) => {
            crate::json_schema::compat::can_read(&w.schema, &r.schema)
        }
        _ => vec!["schemas of different types are incompatible".to_owned()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SchemaSource, SchemaType};

    fn avro(fields: &str) -> CompiledSchema {
        let text = format!(r#"{{"type": "record", "name": "R", "fields": [{fields}]}}"#);
        CompiledSchema::compile(&SchemaSource::new(SchemaType::Avro, text)).expect("valid")
    }

    #[test]
    fn level_names() {
        for level in CompatibilityLevel::ALL {
            assert_eq!(level.to_string().parse::<CompatibilityLevel>(), Ok(level));
            let json = serde_json::to_string(&level).expect("serializes");
            assert_eq!(json, format!("\"{level}\""));
        }
        assert_eq!(CompatibilityLevel::default(), CompatibilityLevel::Backward);
        assert_eq!(
            "full_transitive".parse(),
            Ok(CompatibilityLevel::FullTransitive)
        );
        assert!("SIDEWAYS".parse::<CompatibilityLevel>().is_err());
    }

    /// v1: a; v2: a, b (default); v3: a, b (no default). v3 reads v2 but not v1, and v1
    /// and v2 read v3's data; with c added without default (v4) nothing old reads... etc.
    #[test]
    fn every_level() {
        let v1 = avro(r#"{"name": "a", "type": "int"}"#);
        let v2 =
            avro(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}"#);
        let v3 = avro(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "int"}"#);
        let history = [&v1, &v2];
        use CompatibilityLevel::*;
        assert!(check(Backward, &v3, &history).is_empty());
        assert_eq!(check(BackwardTransitive, &v3, &history).len(), 1);
        // Forward: can old readers read v3 data? v1 and v2 both can (b is skipped / present).
        assert!(check(Forward, &v3, &history).is_empty());
        assert!(check(ForwardTransitive, &v3, &history).is_empty());
        // Dropping `a` (v0 reader needs it, no default): forward breaks.
        let no_a = avro(r#"{"name": "b", "type": "int", "default": 0}"#);
        assert!(!check(Forward, &no_a, &history).is_empty());
        assert!(check(Full, &v3, &history).is_empty());
        assert_eq!(check(FullTransitive, &v3, &history).len(), 1);
        assert!(check(None, &no_a, &history).is_empty());
        // No previous version: always compatible.
        assert!(check(FullTransitive, &v3, &[]).is_empty());
    }
}
