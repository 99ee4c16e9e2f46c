//! Avro: compiling, validating (and agreeing with apache-avro), JSON.

use apache_avro::Schema;
use proptest::prelude::*;
use serde_json::json;

use crate::{CompiledSchema, SchemaError, SchemaSource, SchemaType};

pub(super) fn avro(text: &str) -> CompiledSchema {
    CompiledSchema::compile(&SchemaSource::new(SchemaType::Avro, text)).expect("valid schema")
}

fn avro_err(text: &str) -> String {
    match CompiledSchema::compile(&SchemaSource::new(SchemaType::Avro, text)) {
        Err(SchemaError::Invalid(m)) => m,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

pub(super) fn inner(schema: &CompiledSchema) -> &super::AvroSchema {
    match &schema.inner {
        crate::compiled::Inner::Avro(a) => a,
        _ => panic!("not avro"),
    }
}

/// The benchmark's and tests' ~1 KB record: 15 fields of most kinds.
pub(crate) const ORDER: &str = include_str!("../../examples/order.avsc");

pub(crate) fn order_json(i: i64) -> serde_json::Value {
    json!({
        "id": i,
        "customer": format!("customer number {i} with a reasonably long display name"),
        "email": format!("customer{i}@example.com"),
        "total": 1234.5 + i as f64,
        "tax": 12.25,
        "quantity": (i % 100) as i32,
        "created": 1_700_000_000_000_i64 + i,
        "status": "PAID",
        "paid": true,
        "note": if i % 2 == 0 { json!("leave at the door, ring twice; the dog is friendly") } else { json!(null) },
        "tags": (0..8).map(|t| format!("tag-{t}-{}", "x".repeat(20))).collect::<Vec<_>>(),
        "scores": (0..16).map(|s| s as f64 * 1.5).collect::<Vec<_>>(),
        "address": {"street": "1 Infinite Loop, Building 4, Floor 3", "city": "Cupertino", "zip": "95014"},
        "attributes": {"channel": "web", "campaign": "spring-sale-2024", "referrer": "https://example.com/landing/page?utm=1", "locale": "en-US"},
        "checksum": "AAECAwQFBgcICQoLDA0ODw=="
    })
}

fn encode(schema: &CompiledSchema, value: &serde_json::Value) -> Vec<u8> {
    schema.encode_json(value, &[]).expect("encodes")
}

#[test]
fn compiles_valid_schemas() {
    let s = avro(ORDER);
    assert_eq!(s.schema_type(), SchemaType::Avro);
    assert!(s
        .canonical()
        .starts_with(r#"{"name":"com.acme.Order","type":"record""#));
    avro(r#""string""#);
    avro(r#"{"type": "array", "items": ["null", "long"]}"#);
}

#[test]
fn rejects_invalid_schemas() {
    assert!(avro_err(r#"{"type": "record", "name": "A", "fields": ["#).contains("Avro"));
    let unknown =
        avro_err(r#"{"type": "record", "name": "A", "fields": [{"name": "x", "type": "strin"}]}"#);
    assert!(unknown.contains("strin"), "{unknown}");
    let default = avro_err(
        r#"{"type": "record", "name": "A", "fields": [{"name": "x", "type": "int", "default": "nope"}]}"#,
    );
    assert!(default.contains("x"), "{default}");
}

#[test]
fn references_provide_named_types() {
    let address = SchemaSource::new(
        SchemaType::Avro,
        r#"{"type": "record", "name": "Address", "namespace": "com.acme",
            "fields": [{"name": "zip", "type": "string"}]}"#,
    );
    let source = SchemaSource::new(
        SchemaType::Avro,
        r#"{"type": "record", "name": "Customer", "namespace": "com.acme",
            "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "com.acme.Address"},
                       {"name": "work", "type": ["null", "com.acme.Address"], "default": null}]}"#,
    )
    .with_reference("com.acme.Address", address);
    let schema = CompiledSchema::compile(&source).expect("compiles with its reference");
    let value = json!({"name": "Ann", "home": {"zip": "12345"}, "work": {"zip": "99999"}});
    let bytes = encode(&schema, &value);
    schema.validate(&bytes, &[]).expect("valid");
    assert_eq!(schema.decode_to_json(&bytes, &[]).expect("decodes"), value);
    // Without the reference the type is unknown.
    let alone = SchemaSource {
        references: Vec::new(),
        ..source
    };
    assert!(CompiledSchema::compile(&alone).is_err());
}

#[test]
fn validates_payloads_written_by_apache_avro() {
    let schema = avro(ORDER);
    let parsed = Schema::parse_str(ORDER).expect("parses");
    for i in 0..20 {
        let bytes = encode(&schema, &order_json(i));
        // Same bytes as apache-avro writes from its own Value.
        let value = inner(&schema)
            .decode_with_apache_avro(&bytes)
            .expect("decodes");
        // apache-avro writes its own Value (map entries in another order, same content).
        let again = apache_avro::to_avro_datum(&parsed, value).expect("writes");
        assert_eq!(bytes.len(), again.len());
        schema.validate(&again, &[]).expect("valid");
        assert_eq!(
            schema.decode_to_json(&again, &[]).expect("decodes"),
            schema.decode_to_json(&bytes, &[]).expect("decodes")
        );
        schema.validate(&bytes, &[]).expect("valid");
    }
}

#[test]
fn rejects_truncated_and_trailing_bytes() {
    let schema = avro(ORDER);
    let bytes = encode(&schema, &order_json(1));
    for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
        assert!(schema.validate(&bytes[..cut], &[]).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    let e = schema.validate(&longer, &[]).expect_err("trailing byte");
    assert!(e.message.contains("trailing"), "{e}");
}

#[test]
fn rejects_bad_union_and_enum_indexes() {
    let union = avro(
        r#"{"type": "record", "name": "R", "fields": [{"name": "u", "type": ["null", "string"]}]}"#,
    );
    union.validate(&[0x00], &[]).expect("null branch");
    union
        .validate(&[0x02, 0x02, b'a'], &[])
        .expect("string branch");
    let e = union.validate(&[0x04], &[]).expect_err("branch 2 of 2");
    assert_eq!(e.path, "$.u");
    assert!(e.message.contains("union branch index 2"), "{e}");
    assert!(union.validate(&[0x01], &[]).is_err(), "branch -1");

    let status = avro(r#"{"type": "enum", "name": "S", "symbols": ["A", "B"]}"#);
    status.validate(&[0x02], &[]).expect("B");
    assert!(status.validate(&[0x04], &[]).is_err());
    assert!(status.validate(&[0x01], &[]).is_err());
}

#[test]
fn rejects_invalid_utf8_and_huge_lengths() {
    let s =
        avro(r#"{"type": "record", "name": "R", "fields": [{"name": "name", "type": "string"}]}"#);
    let e = s.validate(&[0x04, 0xff, 0xfe], &[]).expect_err("not UTF-8");
    assert_eq!(e.path, "$.name");
    assert!(e.message.contains("UTF-8"), "{e}");
    // A length of ~2 GB in a 10-byte payload.
    let mut bytes = Vec::new();
    let mut v: u64 = 2_000_000_000 << 1;
    while v >= 0x80 {
        bytes.push((v as u8) | 0x80);
        v >>= 7;
    }
    bytes.push(v as u8);
    bytes.resize(10, b'a');
    let e = s.validate(&bytes, &[]).expect_err("lying length");
    assert!(e.message.contains("truncated"), "{e}");
    assert!(s.decode_to_json(&bytes, &[]).is_err());
    // Arrays claiming more items than bytes, and of zero-width items.
    let arr = avro(r#"{"type": "array", "items": "long"}"#);
    assert!(arr
        .validate(&[0xfe, 0xff, 0xff, 0xff, 0x0f, 0x00], &[])
        .is_err());
    let nulls = avro(r#"{"type": "array", "items": "null"}"#);
    nulls
        .validate(&[0xfe, 0xff, 0xff, 0xff, 0x0f, 0x00], &[])
        .expect("a billion nulls take no bytes");
}

#[test]
fn rejects_malformed_scalars() {
    let int = avro(r#""int""#);
    int.validate(&[0x80, 0x80, 0x80, 0x80, 0x0f], &[])
        .expect("i32 max range");
    assert!(
        int.validate(&[0x80, 0x80, 0x80, 0x80, 0x10], &[]).is_err(),
        "beyond i32"
    );
    let long = avro(r#""long""#);
    assert!(long.validate(&[0xff; 11], &[]).is_err());
    let boolean = avro(r#""boolean""#);
    assert!(boolean.validate(&[2], &[]).is_err());
    let fixed = avro(r#"{"type": "fixed", "name": "F", "size": 4}"#);
    assert!(fixed.validate(&[1, 2, 3], &[]).is_err());
}

#[test]
fn nested_error_paths() {
    let schema = avro(ORDER);
    let mut value = order_json(3);
    value["address"]["zip"] = json!("é");
    let mut bytes = encode(&schema, &value);
    let pos = bytes
        .windows(2)
        .position(|w| w == "é".as_bytes())
        .expect("found");
    bytes[pos] = 0xff;
    let e = schema.validate(&bytes, &[]).expect_err("bad zip");
    assert_eq!(e.path, "$.address.zip");
}

#[test]
fn json_round_trip() {
    let schema = avro(ORDER);
    let value = order_json(42);
    let bytes = encode(&schema, &value);
    assert_eq!(schema.decode_to_json(&bytes, &[]).expect("decodes"), value);
    // Avro's wrapped union form is accepted too.
    let mut wrapped = value.clone();
    wrapped["note"] = json!({"string": "hi"});
    let bytes = encode(&schema, &wrapped);
    assert_eq!(
        schema.decode_to_json(&bytes, &[]).expect("decodes")["note"],
        json!("hi")
    );
    // Defaults fill in missing fields.
    let mut missing = value.clone();
    missing.as_object_mut().expect("object").remove("note");
    let bytes = encode(&schema, &missing);
    assert_eq!(
        schema.decode_to_json(&bytes, &[]).expect("decodes")["note"],
        json!(null)
    );
}

#[test]
fn encode_json_errors_name_the_field() {
    let schema = avro(ORDER);
    let mut value = order_json(1);
    value["address"]["zip"] = json!(95014);
    let e = schema
        .encode_json(&value, &[])
        .expect_err("zip is a number");
    assert_eq!(e.path, "$.address.zip");
    let mut value = order_json(1);
    value["status"] = json!("LOST");
    assert_eq!(
        schema
            .encode_json(&value, &[])
            .expect_err("bad symbol")
            .path,
        "$.status"
    );
    let mut value = order_json(1);
    value.as_object_mut().expect("object").remove("email");
    assert_eq!(
        schema.encode_json(&value, &[]).expect_err("missing").path,
        "$.email"
    );
    assert!(
        schema.validate_json(&value).is_err(),
        "Avro needs the wire format"
    );
}

// ---- the validator agrees with apache-avro ----

fn agree(schema: &CompiledSchema, bytes: &[u8]) {
    let ours = schema.validate(bytes, &[]);
    let theirs = inner(schema).decode_with_apache_avro(bytes).is_ok();
    if let Err(e) = &ours {
        if e.message == super::validate::UNION_INDEX_MISSING {
            // apache-avro reads a missing union index at the end as null; we do not.
            return;
        }
        if e.message == super::validate::INT_TOO_LONG {
            // apache-avro reads an int of up to 10 bytes; Java (and we) refuse past 5.
            return;
        }
    }
    let ours = ours.is_ok();
    assert_eq!(
        ours, theirs,
        "validator {ours} vs apache-avro {theirs} on {bytes:?}"
    );
}

const SMALL: &str = r#"{"type": "record", "name": "S", "fields": [
    {"name": "a", "type": "int"},
    {"name": "b", "type": ["null", "string", "long"]},
    {"name": "c", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y", "Z"]}},
    {"name": "d", "type": {"type": "array", "items": "boolean"}},
    {"name": "e", "type": {"type": "map", "values": "float"}},
    {"name": "f", "type": {"type": "fixed", "name": "F2", "size": 2}}]}"#;

#[test]
fn agrees_with_apache_avro_on_mutations() {
    let schema = avro(ORDER);
    let bytes = encode(&schema, &order_json(7));
    agree(&schema, &bytes);
    for i in 0..bytes.len() {
        agree(&schema, &bytes[..i]);
    }
    let small = avro(SMALL);
    let good = encode(
        &small,
        &json!({"a": 1, "b": 5, "c": "Z", "d": [true, false], "e": {"k": 1.5}, "f": "AAE="}),
    );
    agree(&small, &good);
    for i in 0..good.len() {
        for b in [0x00, 0x01, 0x02, 0x7f, 0x80, 0xff] {
            let mut m = good.clone();
            m[i] = b;
            agree(&small, &m);
        }
    }
}

#[test]
fn a_tenth_varint_byte_keeps_only_the_64th_bit_as_java_and_apache_avro_do() {
    let recursive = avro(
        r#"{"type": "record", "name": "L", "fields": [
        {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "L"]}]}"#,
    );
    // Found by the random-bytes property: a 10-byte varint whose last byte is 4.
    let mut bytes = vec![182, 141, 233, 222, 203, 242, 131, 225, 137, 4, 0];
    agree(&recursive, &bytes);
    assert!(recursive.validate(&bytes, &[]).is_ok());
    // An eleventh byte is refused by all three.
    bytes[9] = 0x84;
    bytes.insert(10, 0x01);
    agree(&recursive, &bytes);
    assert!(recursive.validate(&bytes, &[]).is_err());
    // An int padded past 5 bytes: refused, as Java's decoder does.
    let small = avro(SMALL);
    let padded = [0x82, 0x80, 0x80, 0x80, 0x80, 0x00];
    let failure = small.validate(&padded, &[]).expect_err("padded int");
    assert_eq!(failure.message, super::validate::INT_TOO_LONG);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic_and_agree(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let small = avro(SMALL);
        agree(&small, &bytes);
        let order = avro(ORDER);
        let _ = order.validate(&bytes, &[]);
        let _ = order.decode_to_json(&bytes, &[]);
        let recursive = avro(r#"{"type": "record", "name": "L", "fields": [
            {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "L"]}]}"#);
        agree(&recursive, &bytes);
    }

    #[test]
    fn encoded_values_validate(a in any::<i32>(), b in proptest::option::of(".{0,20}"), d in proptest::collection::vec(any::<bool>(), 0..10)) {
        let small = avro(SMALL);
        let value = json!({"a": a, "b": b, "c": "Y", "d": d, "e": {}, "f": "AAA="});
        let bytes = encode(&small, &value);
        prop_assert!(small.validate(&bytes, &[]).is_ok());
        agree(&small, &bytes);
    }
}

#[test]
fn deep_recursion_is_refused_not_overflowed() {
    let list = avro(
        r#"{"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}"#,
    );
    let mut bytes = vec![0x02; 100_000];
    bytes.push(0);
    let e = list.validate(&bytes, &[]).expect_err("too deep");
    assert!(e.message.contains("deeper"), "{e}");
    let mut ok = vec![0x02; 100];
    ok.push(0);
    list.validate(&ok, &[]).expect("100 levels");
}
