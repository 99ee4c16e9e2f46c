//! Protobuf: compiling with imports, validating, JSON, message indexes, compatibility.

use prost::Message as _;
use prost_reflect::DynamicMessage;
use serde_json::json;

use crate::{compat, CompatibilityLevel, CompiledSchema, SchemaError, SchemaSource, SchemaType};

const ORDER: &str = r#"
syntax = "proto3";
package acme;

message Order {
  int64 id = 1;
  string customer = 2;
  repeated string tags = 3;
  Address address = 4;
}

message Address {
  string zip = 1;
  message Geo {
    double lat = 1;
    double lon = 2;
  }
  Geo geo = 2;
}
"#;

fn proto(text: &str) -> CompiledSchema {
    CompiledSchema::compile(&SchemaSource::new(SchemaType::Protobuf, text)).expect("compiles")
}

fn inner(schema: &CompiledSchema) -> &super::ProtoSchema {
    match &schema.inner {
        crate::compiled::Inner::Protobuf(p) => p,
        _ => panic!("not protobuf"),
    }
}

#[test]
fn compiles_and_round_trips_json() {
    let s = proto(ORDER);
    assert_eq!(s.schema_type(), SchemaType::Protobuf);
    assert_eq!(s.canonical(), ORDER.trim());
    let value =
        json!({"id": "7", "customer": "Ann", "tags": ["a", "b"], "address": {"zip": "12345"}});
    let bytes = s.encode_json(&value, &[0]).expect("encodes");
    s.validate(&bytes, &[0]).expect("valid");
    s.validate(&bytes, &[]).expect("[] means [0]");
    assert_eq!(s.decode_to_json(&bytes, &[0]).expect("decodes"), value);
    // Bytes written by prost-reflect itself.
    let descriptor = inner(&s).message(&[0]).expect("Order");
    let mut message = DynamicMessage::new(descriptor);
    message.set_field_by_name("customer", prost_reflect::Value::String("Bob".into()));
    let bytes = message.encode_to_vec();
    assert_eq!(
        s.decode_to_json(&bytes, &[0]).expect("decodes"),
        json!({"customer": "Bob"})
    );
}

#[test]
fn nested_message_by_indexes() {
    let s = proto(ORDER);
    let geo = json!({"lat": 1.5, "lon": -2.25});
    let bytes = s.encode_json(&geo, &[1, 0]).expect("Address.Geo");
    assert_eq!(s.decode_to_json(&bytes, &[1, 0]).expect("decodes"), geo);
    assert_eq!(
        inner(&s).message(&[1, 0]).expect("found").full_name(),
        "acme.Address.Geo"
    );
    for bad in [&[2][..], &[1, 1], &[0, 0], &[-1]] {
        let e = s.validate(&bytes, bad).expect_err("no such message");
        assert!(e.message.contains("select no message"), "{e}");
    }
}

#[test]
fn invalid_payloads() {
    let s = proto(ORDER);
    // Field 2 (string) with invalid UTF-8.
    assert!(s.validate(&[0x12, 0x02, 0xff, 0xfe], &[0]).is_err());
    // Length beyond the payload.
    assert!(s.validate(&[0x12, 0x7f, b'a'], &[0]).is_err());
    // Wire type 7 does not exist.
    assert!(s.validate(&[0x0f], &[0]).is_err());
}

#[test]
fn imports_from_references_and_well_known_types() {
    let address = SchemaSource::new(
        SchemaType::Protobuf,
        "syntax = \"proto3\";\npackage acme.common;\nmessage Address { string zip = 1; }\n",
    );
    let source = SchemaSource::new(
        SchemaType::Protobuf,
        r#"syntax = "proto3";
package acme;
import "acme/common/address.proto";
import "google/protobuf/timestamp.proto";
message Customer {
  acme.common.Address home = 1;
  google.protobuf.Timestamp since = 2;
}"#,
    )
    .with_reference("acme/common/address.proto", address);
    let s = CompiledSchema::compile(&source).expect("compiles");
    let value = json!({"home": {"zip": "1"}, "since": "2024-01-02T03:04:05Z"});
    let bytes = s.encode_json(&value, &[0]).expect("encodes");
    assert_eq!(s.decode_to_json(&bytes, &[0]).expect("decodes"), value);
    let missing = SchemaSource {
        references: Vec::new(),
        ..source
    };
    match CompiledSchema::compile(&missing) {
        Err(SchemaError::Invalid(m)) => assert!(m.contains("acme/common/address.proto"), "{m}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn malformed_source_names_the_line() {
    let text = "syntax = \"proto3\";\nmessage A {\n  int32 x = 1\n}\n";
    match CompiledSchema::compile(&SchemaSource::new(SchemaType::Protobuf, text)) {
        Err(SchemaError::Invalid(m)) => {
            assert!(m.contains("line 4") || m.contains("line 3"), "{m}")
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let unknown = "syntax = \"proto3\";\nmessage A {\n  Missing x = 1;\n}\n";
    match CompiledSchema::compile(&SchemaSource::new(SchemaType::Protobuf, unknown)) {
        Err(SchemaError::Invalid(m)) => {
            assert!(m.contains("Missing") && m.contains("line 3"), "{m}")
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn message(fields: &str) -> CompiledSchema {
    proto(&format!("syntax = \"proto3\";\npackage p;\nmessage M {{\n{fields}\n}}\nmessage Other {{ string s = 1; }}\n"))
}

fn full(new: &CompiledSchema, old: &CompiledSchema) -> Vec<String> {
    compat::check(CompatibilityLevel::Full, new, &[old])
}

#[test]
fn compat_fields_added_and_removed() {
    let v1 = message("int32 a = 1;");
    let v2 = message("int32 a = 1; string b = 2;");
    assert!(full(&v2, &v1).is_empty());
    assert!(full(&v1, &v2).is_empty());
}

#[test]
fn compat_type_changes() {
    let int32 = message("int32 a = 1;");
    let int64 = message("int64 a = 1;");
    let string = message("string a = 1;");
    let other = message("Other a = 1;");
    assert!(full(&int64, &int32).is_empty(), "varints read each other");
    let problems = full(&string, &int32);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("field 1") && p.contains("type changed")),
        "{problems:?}"
    );
    assert!(!full(&other, &string).is_empty(), "message vs string");
    assert!(full(&message("bytes a = 1;"), &string).is_empty());
    assert!(
        !full(&message("sint32 a = 1;"), &int32).is_empty(),
        "zig-zag vs varint"
    );
}

#[test]
fn compat_number_reused_with_another_type() {
    let v1 = message("int32 a = 1; string b = 2;");
    let v2 = message("int32 a = 1; double c = 2;");
    let problems = full(&v2, &v1);
    assert!(
        problems.iter().any(|p| p.contains("field 2")),
        "{problems:?}"
    );
}

#[test]
fn compat_message_removed() {
    let v1 = message("int32 a = 1;");
    let v2 = proto("syntax = \"proto3\";\npackage p;\nmessage M { int32 a = 1; }\n");
    let problems = compat::check(CompatibilityLevel::Backward, &v2, &[&v1]);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("p.Other") && p.contains("removed")),
        "{problems:?}"
    );
}

#[test]
fn compat_labels_and_oneofs() {
    let single = message("Other a = 1;");
    let repeated = message("repeated Other a = 1;");
    assert!(!full(&repeated, &single).is_empty());
    assert!(full(&message("repeated int32 a = 1;"), &message("int32 a = 1;")).is_empty());
    let v1 = message("int32 a = 1; oneof choice { string b = 2; }");
    let v2 = message("oneof choice { string b = 2; int32 a = 1; }");
    let problems = full(&v2, &v1);
    assert!(
        problems.iter().any(|p| p.contains("existing oneof")),
        "{problems:?}"
    );
}

#[test]
fn compat_required_fields_proto2() {
    let v1 = proto("syntax = \"proto2\";\nmessage M { optional int32 a = 1; }\n");
    let v2 =
        proto("syntax = \"proto2\";\nmessage M { optional int32 a = 1; required int32 b = 2; }\n");
    assert!(!compat::check(CompatibilityLevel::Backward, &v2, &[&v1]).is_empty());
    assert!(!compat::check(CompatibilityLevel::Backward, &v1, &[&v2]).is_empty());
}

#[test]
fn different_types_are_incompatible() {
    let p = message("int32 a = 1;");
    let a = CompiledSchema::compile(&SchemaSource::new(SchemaType::Avro, "\"int\"")).expect("avro");
    let problems = compat::check(CompatibilityLevel::Backward, &p, &[&a]);
    assert!(
        problems.iter().any(|m| m.contains("different types")),
        "{problems:?}"
    );
}
