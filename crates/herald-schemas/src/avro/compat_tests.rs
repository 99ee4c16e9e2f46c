//! Avro compatibility: the spec's resolution rules, levels, and agreement with apache-avro.

use super::tests::{avro, inner};
use crate::{compat, CompatibilityLevel, CompiledSchema};

fn record(fields: &str) -> CompiledSchema {
    avro(&format!(
        r#"{{"type": "record", "name": "R", "namespace": "ns", "fields": [{fields}]}}"#
    ))
}

fn backward(new: &CompiledSchema, old: &CompiledSchema) -> Vec<String> {
    compat::check(CompatibilityLevel::Backward, new, &[old])
}

fn forward(new: &CompiledSchema, old: &CompiledSchema) -> Vec<String> {
    compat::check(CompatibilityLevel::Forward, new, &[old])
}

/// apache-avro's checker on the same pair (for cases without aliases and references).
fn apache_can_read(writer: &CompiledSchema, reader: &CompiledSchema) -> bool {
    apache_avro::schema_compatibility::SchemaCompatibility::can_read(
        &inner(writer).root,
        &inner(reader).root,
    )
    .is_ok()
}

#[test]
fn adding_fields() {
    let v1 = record(r#"{"name": "a", "type": "int"}"#);
    let with_default =
        record(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "x"}"#);
    let without = record(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "string"}"#);
    assert!(backward(&with_default, &v1).is_empty());
    let problems = backward(&without, &v1);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("\"b\"") && problems[0].contains("no default"),
        "{problems:?}"
    );
    assert!(
        forward(&without, &v1).is_empty(),
        "old readers skip the new field"
    );
    assert!(apache_can_read(&v1, &with_default) && !apache_can_read(&v1, &without));
}

#[test]
fn removing_fields() {
    let v1 = record(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "string"}"#);
    let v2 = record(r#"{"name": "a", "type": "int"}"#);
    assert!(backward(&v2, &v1).is_empty(), "new readers ignore b");
    let problems = forward(&v2, &v1);
    assert!(problems.iter().any(|p| p.contains("\"b\"")), "{problems:?}");
    let v1_default =
        record(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}"#);
    assert!(forward(&v2, &v1_default).is_empty());
}

#[test]
fn promotions() {
    let int = record(r#"{"name": "a", "type": "int"}"#);
    let long = record(r#"{"name": "a", "type": "long"}"#);
    assert!(
        backward(&long, &int).is_empty(),
        "a long reader reads int data"
    );
    assert!(
        !backward(&int, &long).is_empty(),
        "an int reader cannot read long data"
    );
    assert!(apache_can_read(&int, &long) && !apache_can_read(&long, &int));
    let string = record(r#"{"name": "a", "type": "string"}"#);
    let bytes = record(r#"{"name": "a", "type": "bytes"}"#);
    assert!(compat::check(CompatibilityLevel::Full, &string, &[&bytes]).is_empty());
    assert!(!backward(&string, &int).is_empty());
}

#[test]
fn enum_symbols() {
    let e = |symbols: &str, extra: &str| {
        record(&format!(
            r#"{{"name": "s", "type": {{"type": "enum", "name": "S", "symbols": [{symbols}]{extra}}}}}"#
        ))
    };
    let ab = e(r#""A", "B""#, "");
    let abc = e(r#""A", "B", "C""#, "");
    assert!(
        backward(&abc, &ab).is_empty(),
        "symbol added: new readers know all old ones"
    );
    let problems = backward(&ab, &abc);
    assert!(problems.iter().any(|p| p.contains("[C]")), "{problems:?}");
    let ab_default = e(r#""A", "B""#, r#", "default": "A""#);
    assert!(
        backward(&ab_default, &abc).is_empty(),
        "a reader default covers removed symbols"
    );
}

#[test]
fn union_widening() {
    let narrow = record(r#"{"name": "u", "type": ["null", "string"]}"#);
    let wide = record(r#"{"name": "u", "type": ["null", "string", "long"]}"#);
    assert!(backward(&wide, &narrow).is_empty());
    assert!(
        !backward(&narrow, &wide).is_empty(),
        "a long written cannot be read"
    );
    let plain = record(r#"{"name": "u", "type": "string"}"#);
    assert!(
        backward(&narrow, &plain).is_empty(),
        "string into [null, string]"
    );
    assert!(
        !backward(&plain, &narrow).is_empty(),
        "null cannot be read as string"
    );
    assert!(apache_can_read(&narrow, &wide) && !apache_can_read(&wide, &narrow));
}

#[test]
fn renames_need_aliases() {
    let old =
        avro(r#"{"type": "record", "name": "Old", "fields": [{"name": "a", "type": "int"}]}"#);
    let renamed =
        avro(r#"{"type": "record", "name": "New", "fields": [{"name": "a", "type": "int"}]}"#);
    let aliased = avro(
        r#"{"type": "record", "name": "New", "aliases": ["Old"], "fields": [{"name": "b", "type": "int", "aliases": ["a"]}]}"#,
    );
    assert!(!backward(&renamed, &old).is_empty());
    assert!(
        backward(&aliased, &old).is_empty(),
        "{:?}",
        backward(&aliased, &old)
    );
}

#[test]
fn transitive_checks_every_version() {
    // v1 has no b; v2 adds b with a default; v3 drops the default.
    let v1 = record(r#"{"name": "a", "type": "int"}"#);
    let v2 = record(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}"#);
    let v3 = record(r#"{"name": "a", "type": "int"}, {"name": "b", "type": "int"}"#);
    assert!(compat::check(CompatibilityLevel::Backward, &v3, &[&v1, &v2]).is_empty());
    let problems = compat::check(CompatibilityLevel::BackwardTransitive, &v3, &[&v1, &v2]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("#1"), "{problems:?}");
}

#[test]
fn recursive_types_terminate() {
    let list = record(r#"{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "R"]}"#);
    let list2 = record(
        r#"{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "R"]}, {"name": "w", "type": "int", "default": 1}"#,
    );
    assert!(compat::check(CompatibilityLevel::FullTransitive, &list2, &[&list]).is_empty());
}
