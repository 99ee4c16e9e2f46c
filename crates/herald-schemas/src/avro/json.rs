//! Avro values to and from JSON, for readers (`decode_to_json`) and for
//! `herald produce --schema` (`encode_json`).
//!
//! Avro's own JSON encoding wraps every non-null union value as `{"type": value}` and writes
//! bytes as a string of code points 0-255; both are awkward to read and to type. The mapping
//! here is the "natural" one most tools show:
//!
//! | Avro                            | JSON                                              |
//! |---------------------------------|---------------------------------------------------|
//! | null, boolean, int, long        | null, boolean, number                             |
//! | float, double                   | number (NaN and infinities become `null`)         |
//! | string, enum, uuid              | string                                            |
//! | bytes, fixed, decimal           | base64 string (standard alphabet, padded); a decimal is its unscaled two's-complement big-endian bytes |
//! | big-decimal                     | string                                            |
//! | array, map, record              | array, object, object (fields in schema order)    |
//! | union                           | the branch's value itself, no `{"type": ...}` wrapper |
//! | date, time-*, timestamp-*       | the underlying number                             |
//! | duration                        | `{"months", "days", "millis"}`                    |
//!
//! Encoding accepts the same mapping, and for unions also Avro's wrapped form
//! (`{"string": "x"}`, `{"com.acme.Address": {...}}`) when the plain value matches no branch,
//! so input written for Confluent's console producer works too. A union value is encoded
//! with the first branch it matches. Missing record fields take their default.

use apache_avro::{
    schema::{Name, Schema},
    types::Value,
    Days, Decimal, Duration, Millis, Months,
};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::{Map, Number, Value as Json};

use super::validate::Names;
use crate::ValidationError;

/// An Avro value as JSON (see the module doc for the mapping).
pub(crate) fn value_to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => Json::from(*i),
        Value::Long(i)
        | Value::TimeMicros(i)
        | Value::TimestampMillis(i)
        | Value::TimestampMicros(i)
        | Value::TimestampNanos(i)
        | Value::LocalTimestampMillis(i)
        | Value::LocalTimestampMicros(i)
        | Value::LocalTimestampNanos(i) => Json::from(*i),
        Value::Float(f) => Number::from_f64(f64::from(*f)).map_or(Json::Null, Json::Number),
        Value::Double(f) => Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Bytes(b) | Value::Fixed(_, b) => Json::String(STANDARD.encode(b)),
        Value::String(s) | Value::Enum(_, s) => Json::String(s.clone()),
        Value::Union(_, inner) => value_to_json(inner),
        Value::Array(items) => Json::Array(items.iter().map(value_to_json).collect()),
        Value::Map(entries) => {
            let mut keys: Vec<_> = entries.keys().collect();
            keys.sort();
            Json::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), value_to_json(&entries[k])))
                    .collect(),
            )
        }
        Value::Record(fields) => Json::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), value_to_json(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Decimal(d) => match <Vec<u8>>::try_from(d) {
            Ok(bytes) => Json::String(STANDARD.encode(bytes)),
            Err(_) => Json::Null,
        },
        Value::BigDecimal(d) => Json::String(d.to_string()),
        Value::Duration(d) => {
            let raw: [u8; 12] = (*d).into();
            let part = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
            serde_json::json!({"months": part(0), "days": part(4), "millis": part(8)})
        }
        Value::Uuid(u) => Json::String(u.to_string()),
    }
}

/// A JSON value as an Avro value of `schema` (see the module doc for the mapping).
pub(crate) fn json_to_value(
    json: &Json,
    schema: &Schema,
    names: &Names,
) -> Result<Value, ValidationError> {
    let mut path = String::from("$");
    convert(json, schema, names, &mut path, 0)
}

fn fail<T>(path: &str, message: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError::new(path, message))
}

fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

fn convert(
    json: &Json,
    schema: &Schema,
    names: &Names,
    path: &mut String,
    depth: usize,
) -> Result<Value, ValidationError> {
    if depth > super::validate::MAX_DEPTH {
        return fail(path, "nested too deeply");
    }
    let expected = |what: &str| -> Result<Value, ValidationError> {
        fail(path, format!("expected {what}, found {}", kind(json)))
    };
    let long = || json.as_i64();
    let int = || json.as_i64().and_then(|i| i32::try_from(i).ok());
    let base64 = |p: &str| -> Result<Vec<u8>, ValidationError> {
        match json.as_str() {
            Some(s) => STANDARD
                .decode(s)
                .map_err(|e| ValidationError::new(p, format!("invalid base64: {e}"))),
            None => Err(ValidationError::new(
                p,
                format!("expected a base64 string, found {}", kind(json)),
            )),
        }
    };
    Ok(match schema {
        Schema::Null => match json {
            Json::Null => Value::Null,
            _ => return expected("null"),
        },
        Schema::Boolean => match json.as_bool() {
            Some(b) => Value::Boolean(b),
            None => return expected("a boolean"),
        },
        Schema::Int => int()
            .map(Value::Int)
            .map_or_else(|| expected("an int (32-bit integer)"), Ok)?,
        Schema::Date => int()
            .map(Value::Date)
            .map_or_else(|| expected("an int (days)"), Ok)?,
        Schema::TimeMillis => int()
            .map(Value::TimeMillis)
            .map_or_else(|| expected("an int (milliseconds)"), Ok)?,
        Schema::Long => long()
            .map(Value::Long)
            .map_or_else(|| expected("a long (64-bit integer)"), Ok)?,
        Schema::TimeMicros => long()
            .map(Value::TimeMicros)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::TimestampMillis => long()
            .map(Value::TimestampMillis)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::TimestampMicros => long()
            .map(Value::TimestampMicros)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::TimestampNanos => long()
            .map(Value::TimestampNanos)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::LocalTimestampMillis => long()
            .map(Value::LocalTimestampMillis)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::LocalTimestampMicros => long()
            .map(Value::LocalTimestampMicros)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::LocalTimestampNanos => long()
            .map(Value::LocalTimestampNanos)
            .map_or_else(|| expected("a long"), Ok)?,
        Schema::Float => match json.as_f64() {
            Some(f) => Value::Float(f as f32),
            None => return expected("a number"),
        },
        Schema::Double => match json.as_f64() {
            Some(f) => Value::Double(f),
            None => return expected("a number"),
        },
        Schema::String => match json.as_str() {
            Some(s) => Value::String(s.to_owned()),
            None => return expected("a string"),
        },
        Schema::Uuid => match json.as_str().map(apache_avro::Uuid::parse_str) {
            Some(Ok(u)) => Value::Uuid(u),
            Some(Err(e)) => return fail(path, format!("invalid uuid: {e}")),
            None => return expected("a uuid string"),
        },
        Schema::Bytes => Value::Bytes(base64(path)?),
        Schema::Fixed(fixed) => {
            let bytes = base64(path)?;
            if bytes.len() != fixed.size {
                return fail(
                    path,
                    format!(
                        "fixed {} needs {} bytes, found {}",
                        fixed.name.fullname(None),
                        fixed.size,
                        bytes.len()
                    ),
                );
            }
            Value::Fixed(fixed.size, bytes)
        }
        Schema::Decimal(_) => Value::Decimal(Decimal::from(base64(path)?)),
        Schema::BigDecimal => {
            return fail(path, "encoding big-decimal from JSON is not supported yet")
        }
        Schema::Duration => {
            let part = |key: &str| {
                json.get(key)
                    .and_then(Json::as_u64)
                    .and_then(|v| u32::try_from(v).ok())
            };
            match (part("months"), part("days"), part("millis")) {
                (Some(m), Some(d), Some(ms)) => {
                    Value::Duration(Duration::new(Months::new(m), Days::new(d), Millis::new(ms)))
                }
                _ => {
                    return expected(
                        "an object {\"months\", \"days\", \"millis\"} of unsigned 32-bit integers",
                    )
                }
            }
        }
        Schema::Enum(e) => match json.as_str() {
            Some(s) => match e.symbols.iter().position(|sym| sym == s) {
                Some(i) => Value::Enum(i as u32, s.to_owned()),
                None => {
                    return fail(
                        path,
                        format!(
                            "{s:?} is not a symbol of enum {} ({})",
                            e.name.fullname(None),
                            e.symbols.join(", ")
                        ),
                    )
                }
            },
            None => return expected("an enum symbol (string)"),
        },
        Schema::Union(union) => {
            let variants = union.variants();
            for (i, branch) in variants.iter().enumerate() {
                if let Ok(v) = convert(json, branch, names, path, depth + 1) {
                    return Ok(Value::Union(i as u32, Box::new(v)));
                }
            }
            // Avro's JSON encoding: {"type name": value}.
            if let Json::Object(map) = json {
                if map.len() == 1 {
                    if let Some((key, inner)) = map.iter().next() {
                        for (i, branch) in variants.iter().enumerate() {
                            if branch_name(branch).as_deref() == Some(key.as_str()) {
                                let v = convert(inner, branch, names, path, depth + 1)?;
                                return Ok(Value::Union(i as u32, Box::new(v)));
                            }
                        }
                    }
                }
            }
            let branches: Vec<String> = variants
                .iter()
                .map(|b| branch_name(b).unwrap_or_else(|| "?".to_owned()))
                .collect();
            return fail(
                path,
                format!(
                    "{} matches no branch of the union [{}]",
                    kind(json),
                    branches.join(", ")
                ),
            );
        }
        Schema::Array(array) => {
            let Json::Array(items) = json else {
                return expected("an array");
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                out.push(convert(item, &array.items, names, path, depth + 1)?);
                path.truncate(len);
            }
            Value::Array(out)
        }
        Schema::Map(map) => {
            let Json::Object(entries) = json else {
                return expected("an object (map)");
            };
            let mut out = std::collections::HashMap::with_capacity(entries.len());
            for (key, item) in entries {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                out.insert(
                    key.clone(),
                    convert(item, &map.types, names, path, depth + 1)?,
                );
                path.truncate(len);
            }
            Value::Map(out)
        }
        Schema::Record(record) => {
            let Json::Object(entries) = json else {
                return expected(&format!(
                    "an object (record {})",
                    record.name.fullname(None)
                ));
            };
            if let Some(unknown) = entries.keys().find(|k| !record.lookup.contains_key(*k)) {
                return fail(
                    path,
                    format!(
                        "unknown field {unknown:?} for record {}",
                        record.name.fullname(None)
                    ),
                );
            }
            let mut out = Vec::with_capacity(record.fields.len());
            for field in &record.fields {
                let len = path.len();
                path.push('.');
                path.push_str(&field.name);
                let value = match (entries.get(&field.name), &field.default) {
                    (Some(v), _) => convert(v, &field.schema, names, path, depth + 1)?,
                    (None, Some(default)) => {
                        // A union's default is for its first branch.
                        let schema = match &field.schema {
                            Schema::Union(u) => u.variants().first().unwrap_or(&field.schema),
                            s => s,
                        };
                        let v = convert(default, schema, names, path, depth + 1)?;
                        match &field.schema {
                            Schema::Union(_) => Value::Union(0, Box::new(v)),
                            _ => v,
                        }
                    }
                    (None, None) => return fail(path, "missing field (it has no default)"),
                };
                path.truncate(len);
                out.push((field.name.clone(), value));
            }
            Value::Record(out)
        }
        Schema::Ref { name } => match names.get(name) {
            Some(named) => return convert(json, named, names, path, depth + 1),
            None => return fail(path, format!("unknown type {}", name.fullname(None))),
        },
    })
}

/// How Avro's JSON encoding names a union branch.
fn branch_name(schema: &Schema) -> Option<String> {
    let full = |n: &Name| Some(n.fullname(None));
    match schema {
        Schema::Null => Some("null".into()),
        Schema::Boolean => Some("boolean".into()),
        Schema::Int | Schema::Date | Schema::TimeMillis => Some("int".into()),
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => Some("long".into()),
        Schema::Float => Some("float".into()),
        Schema::Double => Some("double".into()),
        Schema::Bytes | Schema::BigDecimal => Some("bytes".into()),
        Schema::String | Schema::Uuid => Some("string".into()),
        Schema::Array(_) => Some("array".into()),
        Schema::Map(_) => Some("map".into()),
        Schema::Record(r) => full(&r.name),
        Schema::Enum(e) => full(&e.name),
        Schema::Fixed(f) => full(&f.name),
        Schema::Ref { name } => full(name),
        Schema::Decimal(d) => branch_name(&d.inner),
        Schema::Duration | Schema::Union(_) => None,
    }
}
