//! JSON Schema compatibility: does every document valid under the writer's schema stay valid
//! under the reader's?
//!
//! JSON Schema has no resolution rules like Avro's; compatibility means that the reader's
//! schema accepts at least what the writer's accepted. Deciding that exactly is not possible
//! in general, so this checks the structural rules below (a subset of Confluent's
//! `JsonSchema` rules) and says nothing about the rest.
//!
//! Checked, recursively through `properties`, `additionalProperties` and `items`:
//! - `type`: a type the writer allows that the reader does not is a narrowing (`integer` is
//!   within `number`); an absent `type` allows everything;
//! - `enum` / `const`: a value the writer allows that the reader's `enum` lacks; a reader
//!   `enum` where the writer had none;
//! - `required`: a property the reader requires that the writer did not;
//! - properties under the open/closed content model: a writer property the reader dropped
//!   while the reader is closed (`additionalProperties: false`) is an error, or it must be
//!   valid against the reader's `additionalProperties` schema; a property the reader added
//!   must accept whatever the writer's `additionalProperties` let through under that name,
//!   since a writer of an open model may have sent it with any value. So adding a property
//!   to an open model (`additionalProperties` absent or `true`) breaks unless the property
//!   accepts anything, as Confluent's `PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL`; adding one to
//!   a closed model is compatible; a partly open model (`additionalProperties` a schema)
//!   needs the new property to accept what that schema did. Close the model
//!   (`additionalProperties: false`) to add properties freely;
//! - `additionalProperties` going from open (absent or `true`) to `false` or to a schema;
//! - bounds tightened: `minimum`, `exclusiveMinimum`, `minLength`, `minItems`,
//!   `minProperties` raised (or added); `maximum`, `exclusiveMaximum`, `maxLength`,
//!   `maxItems`, `maxProperties` lowered (or added); `pattern` and `multipleOf` added or
//!   changed;
//! - a `$ref` whose target changed (compared as text; references are not followed);
//! - boolean schemas: a reader `false` rejects everything, a reader `true` accepts anything.
//!
//! Not checked: `oneOf`/`anyOf`/`allOf`/`not`, `if`/`then`/`else`, `patternProperties`,
//! `dependencies`/`dependentSchemas`, `prefixItems` and tuple `items`, `format`, the content
//! of referenced schemas, and local `$ref`s into `definitions`/`$defs`.

use serde_json::{Map, Value};

/// Every reason why a document valid under `writer` may be invalid under `reader`.
pub(crate) fn can_read(writer: &Value, reader: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    check(writer, reader, &mut String::from("#"), &mut problems, 0);
    problems
}

static EMPTY_MAP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

fn check(writer: &Value, reader: &Value, path: &mut String, out: &mut Vec<String>, depth: usize) {
    if depth > 64 {
        return;
    }
    let (w, r) = match (writer, reader) {
        (_, Value::Bool(true)) | (Value::Bool(false), _) => return,
        (_, Value::Bool(false)) => {
            out.push(format!(
                "{path}: the reader's schema is false and rejects everything"
            ));
            return;
        }
        (Value::Bool(true), Value::Object(r)) => (&*EMPTY_MAP, r),
        (Value::Object(w), Value::Object(r)) => (w, r),
        _ => {
            out.push(format!("{path}: not a schema"));
            return;
        }
    };
    if r.is_empty() {
        return;
    }

    if let Some(rref) = r.get("$ref") {
        if w.get("$ref") != Some(rref) {
            out.push(format!("{path}: $ref changed to {rref}"));
        }
        return;
    }

    check_types(w, r, path, out);
    check_enum(w, r, path, out);
    check_bounds(w, r, path, out);
    check_object(w, r, path, out, depth);

    if let (Some(wi), Some(ri)) = (w.get("items"), r.get("items")) {
        if wi.is_object() || wi.is_boolean() {
            let len = path.len();
            path.push_str("/items");
            check(wi, ri, path, out, depth + 1);
            path.truncate(len);
        }
    } else if let (None, Some(ri)) = (w.get("items"), r.get("items")) {
        if ri != &Value::Bool(true) && ri != &Value::Object(Map::new()) {
            out.push(format!(
                "{path}: the reader constrains array items that were unconstrained"
            ));
        }
    }
}

const ALL_TYPES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];

fn types(schema: &Map<String, Value>) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn check_types(w: &Map<String, Value>, r: &Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let Some(rtypes) = types(r) else { return };
    let wtypes = types(w).unwrap_or_else(|| ALL_TYPES.to_vec());
    let narrowed: Vec<&str> = wtypes
        .into_iter()
        .filter(|t| !(rtypes.contains(t) || (*t == "integer" && rtypes.contains(&"number"))))
        .collect();
    if !narrowed.is_empty() {
        out.push(format!(
            "{path}: type narrowed: the reader no longer accepts {} (it accepts {})",
            narrowed.join(", "),
            rtypes.join(", ")
        ));
    }
}

fn enum_values(schema: &Map<String, Value>) -> Option<Vec<&Value>> {
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(values.iter().collect());
    }
    schema.get("const").map(|c| vec![c])
}

fn check_enum(w: &Map<String, Value>, r: &Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let Some(rvalues) = enum_values(r) else {
        return;
    };
    match enum_values(w) {
        None => out.push(format!(
            "{path}: the reader added an enum (or const) restriction"
        )),
        Some(wvalues) => {
            let removed: Vec<String> = wvalues
                .into_iter()
                .filter(|v| !rvalues.contains(v))
                .map(Value::to_string)
                .collect();
            if !removed.is_empty() {
                out.push(format!(
                    "{path}: enum values removed: {}",
                    removed.join(", ")
                ));
            }
        }
    }
}

fn check_bounds(w: &Map<String, Value>, r: &Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let num = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64);
    for key in [
        "minimum",
        "exclusiveMinimum",
        "minLength",
        "minItems",
        "minProperties",
    ] {
        if let Some(rv) = num(r, key) {
            match num(w, key) {
                Some(wv) if wv >= rv => {}
                Some(wv) => out.push(format!("{path}: {key} raised from {wv} to {rv}")),
                None => out.push(format!("{path}: {key} {rv} added")),
            }
        }
    }
    for key in [
        "maximum",
        "exclusiveMaximum",
        "maxLength",
        "maxItems",
        "maxProperties",
    ] {
        if let Some(rv) = num(r, key) {
            match num(w, key) {
                Some(wv) if wv <= rv => {}
                Some(wv) => out.push(format!("{path}: {key} lowered from {wv} to {rv}")),
                None => out.push(format!("{path}: {key} {rv} added")),
            }
        }
    }
    for key in ["pattern", "multipleOf"] {
        if let Some(rv) = r.get(key) {
            if w.get(key) != Some(rv) {
                out.push(format!("{path}: {key} added or changed to {rv}"));
            }
        }
    }
}

/// `true` or `{}`: a schema every value is valid under.
fn accepts_anything(schema: &Value) -> bool {
    match schema {
        Value::Bool(accepts) => *accepts,
        Value::Object(keywords) => keywords.is_empty(),
        _ => false,
    }
}

/// `additionalProperties` as a schema; absent means open (`true`).
fn additional(schema: &Map<String, Value>) -> &Value {
    static TRUE: Value = Value::Bool(true);
    schema.get("additionalProperties").unwrap_or(&TRUE)
}

fn check_object(
    w: &Map<String, Value>,
    r: &Map<String, Value>,
    path: &mut String,
    out: &mut Vec<String>,
    depth: usize,
) {
    let wprops = w
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&EMPTY_MAP);
    let rprops = r
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&EMPTY_MAP);
    let (wadd, radd) = (additional(w), additional(r));

    for (name, wschema) in wprops {
        let len = path.len();
        path.push_str("/properties/");
        path.push_str(name);
        match rprops.get(name) {
            Some(rschema) => check(wschema, rschema, path, out, depth + 1),
            None if radd == &Value::Bool(false) => out.push(format!(
                "{path}: property removed while the reader's content model is closed (additionalProperties: false)"
            )),
            None => check(wschema, radd, path, out, depth + 1),
        }
        path.truncate(len);
    }

    for (name, rschema) in rprops {
        if wprops.contains_key(name) || wadd == &Value::Bool(false) {
            continue;
        }
        let len = path.len();
        path.push_str("/properties/");
        path.push_str(name);
        if wadd == &Value::Bool(true) && !accepts_anything(rschema) {
            out.push(format!(
                "{path}: property added to an open content model (writers may have sent it with any value; close the model with additionalProperties: false to add properties)"
            ));
        } else {
            check(wadd, rschema, path, out, depth + 1);
        }
        path.truncate(len);
    }

    if wadd != radd {
        let len = path.len();
        path.push_str("/additionalProperties");
        match (wadd, radd) {
            (Value::Bool(true), Value::Bool(false)) => out.push(format!(
                "{path}: the content model was closed (additionalProperties went from open to false)"
            )),
            (Value::Bool(true), _) => out.push(format!(
                "{path}: additional properties, unconstrained before, must now match a schema"
            )),
            _ => check(wadd, radd, path, out, depth + 1),
        }
        path.truncate(len);
    }

    let required = |m: &Map<String, Value>| -> Vec<String> {
        m.get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let wreq = required(w);
    for name in required(r) {
        if !wreq.contains(&name) {
            out.push(format!("{path}: required property {name:?} added"));
        }
    }
}
