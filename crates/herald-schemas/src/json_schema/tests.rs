//! JSON Schema: drafts, validation paths, references, compatibility.

use serde_json::json;

use crate::{compat, CompatibilityLevel, CompiledSchema, SchemaError, SchemaSource, SchemaType};

fn schema(value: serde_json::Value) -> CompiledSchema {
    CompiledSchema::compile(&SchemaSource::new(SchemaType::Json, value.to_string()))
        .expect("valid schema")
}

fn person(extra: serde_json::Value) -> serde_json::Value {
    let mut base = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]},
            "tags": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name"]
    });
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

#[test]
fn draft7_by_default_and_2020_12_when_asked() {
    // `dependentRequired` is a 2019-09+ keyword that draft 7 does not know.
    let deps = json!({"type": "object", "dependentRequired": {"a": ["b"]}});
    let d7 = schema(deps.clone());
    d7.validate_json(&json!({"a": 1}))
        .expect("draft 7 ignores dependentRequired");
    let mut d2020 = deps;
    d2020["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    let d2020 = schema(d2020);
    assert!(d2020.validate_json(&json!({"a": 1})).is_err());
    // prefixItems is 2020-12.
    let tuple = schema(
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
        "prefixItems": [{"type": "string"}], "items": false}),
    );
    tuple.validate_json(&json!(["a"])).expect("valid");
    assert!(tuple.validate_json(&json!(["a", 1])).is_err());
}

#[test]
fn validation_errors_have_instance_paths() {
    let s = schema(person(json!({})));
    s.validate_json(&json!({"name": "Ann", "age": 3, "address": {"zip": "1"}}))
        .expect("valid");
    let e = s
        .validate_json(&json!({"name": "Ann", "address": {"zip": 12345}}))
        .expect_err("zip is a number");
    assert_eq!(e.path, "$.address.zip");
    let e = s
        .validate_json(&json!({"name": "Ann", "tags": ["a", 2]}))
        .expect_err("tag 1");
    assert_eq!(e.path, "$.tags[1]");
    let e = s
        .validate_json(&json!({"age": -1}))
        .expect_err("two errors");
    assert!(e.message.contains("1 more error"), "{e}");
}

#[test]
fn payload_bytes() {
    let s = schema(person(json!({})));
    s.validate(br#"{"name": "Ann"}"#, &[]).expect("valid");
    let e = s.validate(b"\x00\x01not json", &[]).expect_err("not JSON");
    assert!(e.message.contains("not JSON"), "{e}");
    assert!(s.validate(br#"{"name": 1}"#, &[]).is_err());
    assert_eq!(
        s.decode_to_json(br#"{"name":"Ann"}"#, &[]).expect("parses"),
        json!({"name": "Ann"})
    );
    assert_eq!(
        s.encode_json(&json!({"name": "Ann"}), &[]).expect("valid"),
        br#"{"name":"Ann"}"#
    );
    assert!(s.encode_json(&json!({}), &[]).is_err());
}

#[test]
fn invalid_schemas() {
    for text in ["{not json", r#"{"type": 5}"#, r#"{"$ref": "missing.json"}"#] {
        match CompiledSchema::compile(&SchemaSource::new(SchemaType::Json, text)) {
            Err(SchemaError::Invalid(m)) => assert!(m.contains("JSON"), "{m}"),
            other => panic!("{text}: expected Invalid, got {other:?}"),
        }
    }
}

#[test]
fn references_by_name() {
    let address = SchemaSource::new(
        SchemaType::Json,
        json!({"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]})
            .to_string(),
    );
    let source = SchemaSource::new(
        SchemaType::Json,
        json!({"type": "object", "properties": {"home": {"$ref": "address.json"}}}).to_string(),
    )
    .with_reference("address.json", address);
    let s = CompiledSchema::compile(&source).expect("compiles");
    s.validate_json(&json!({"home": {"zip": "1"}}))
        .expect("valid");
    let e = s
        .validate_json(&json!({"home": {}}))
        .expect_err("zip required");
    assert_eq!(e.path, "$.home");
}

fn backward(new: serde_json::Value, old: serde_json::Value) -> Vec<String> {
    compat::check(CompatibilityLevel::Backward, &schema(new), &[&schema(old)])
}

#[test]
fn property_added_under_open_model() {
    // As Confluent's PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL: an old writer may have sent
    // `email` as a number, which the new reader refuses.
    let old = person(json!({}));
    let mut new = old.clone();
    new["properties"]["email"] = json!({"type": "string"});
    let problems = backward(new.clone(), old.clone());
    assert!(
        problems
            .iter()
            .any(|p| p.contains("/properties/email") && p.contains("open content model")),
        "{problems:?}"
    );
    // A property that accepts anything may be added.
    let mut anything = old.clone();
    anything["properties"]["note"] = json!({});
    assert!(backward(anything, old.clone()).is_empty());
    new["required"] = json!(["name", "email"]);
    let problems = backward(new, old);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("required property \"email\"")),
        "{problems:?}"
    );
}

#[test]
fn property_added_under_closed_and_partly_open_models() {
    let closed = person(json!({"additionalProperties": false}));
    let mut added = closed.clone();
    added["properties"]["email"] = json!({"type": "string"});
    added["additionalProperties"] = json!(false);
    assert!(backward(added, closed).is_empty(), "closed: compatible");

    // Partly open: extra properties were strings; a new string property is covered, a new
    // integer property is not.
    let partly = person(json!({"additionalProperties": {"type": "string"}}));
    let mut covered = partly.clone();
    covered["properties"]["email"] = json!({"type": "string"});
    assert!(backward(covered, partly.clone()).is_empty(), "covered");
    let mut uncovered = partly.clone();
    uncovered["properties"]["count"] = json!({"type": "integer"});
    let problems = backward(uncovered, partly);
    assert!(
        problems.iter().any(|p| p.contains("/properties/count")),
        "{problems:?}"
    );
}

#[test]
fn types_widened_and_narrowed() {
    let int = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let num = json!({"type": "object", "properties": {"n": {"type": "number"}}});
    let either = json!({"type": "object", "properties": {"n": {"type": ["number", "string"]}}});
    assert!(backward(num.clone(), int.clone()).is_empty(), "widened");
    assert!(backward(either.clone(), num.clone()).is_empty(), "widened");
    let problems = backward(int, num.clone());
    assert!(
        problems
            .iter()
            .any(|p| p.contains("/properties/n") && p.contains("narrowed")),
        "{problems:?}"
    );
    assert!(!backward(num, either).is_empty());
}

#[test]
fn enums_and_bounds() {
    let e = |values: serde_json::Value| json!({"enum": values});
    assert!(backward(e(json!(["a", "b", "c"])), e(json!(["a", "b"]))).is_empty());
    let problems = backward(e(json!(["a"])), e(json!(["a", "b"])));
    assert!(problems.iter().any(|p| p.contains("\"b\"")), "{problems:?}");
    assert!(!backward(
        json!({"type": "string", "maxLength": 5}),
        json!({"type": "string", "maxLength": 10})
    )
    .is_empty());
    assert!(backward(
        json!({"type": "string", "maxLength": 10}),
        json!({"type": "string", "maxLength": 5})
    )
    .is_empty());
}

#[test]
fn closing_the_content_model() {
    let open = person(json!({}));
    let closed = person(json!({"additionalProperties": false}));
    let problems = backward(closed.clone(), open.clone());
    assert!(
        problems.iter().any(|p| p.contains("closed")),
        "{problems:?}"
    );
    assert!(
        backward(open.clone(), closed.clone()).is_empty(),
        "opening is backward compatible"
    );
    // Removing a property from a closed model breaks; from an open one it does not.
    let mut closed_less = closed.clone();
    closed_less["properties"]
        .as_object_mut()
        .expect("object")
        .remove("tags");
    assert!(!backward(closed_less, closed).is_empty());
    let mut open_less = open.clone();
    open_less["properties"]
        .as_object_mut()
        .expect("object")
        .remove("tags");
    assert!(backward(open_less, open).is_empty());
}
