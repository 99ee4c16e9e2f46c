//! Times validation per message: `cargo run --release --example validate_bench`.
//!
//! 100k Avro records of ~1 KB (15 fields: strings, longs, doubles, an enum, a union with
//! null, arrays, a nested record, a map and a fixed), validated by our walker and decoded by
//! apache-avro's `from_avro_datum` (what validation would cost without the walker); then a
//! Protobuf message decoded by prost-reflect and a JSON document validated by `jsonschema`.

use std::time::Instant;

use herald_schemas::{CompiledSchema, SchemaSource, SchemaType};
use serde_json::json;

const N: usize = 100_000;

fn per_record(label: &str, bytes: usize, f: impl Fn(usize)) {
    // Warm up, then time.
    for i in 0..N / 10 {
        f(i);
    }
    let start = Instant::now();
    for i in 0..N {
        f(i);
    }
    let ns = start.elapsed().as_nanos() as f64 / N as f64;
    println!("{label:<48} {bytes:>5} B/record  {ns:>8.0} ns/record");
}

fn main() {
    let order = include_str!("order.avsc");
    let schema =
        CompiledSchema::compile(&SchemaSource::new(SchemaType::Avro, order)).expect("schema");
    let records: Vec<Vec<u8>> = (0..64)
        .map(|i| schema.encode_json(&order_json(i), &[]).expect("encodes"))
        .collect();
    let size = records.iter().map(Vec::len).sum::<usize>() / records.len();
    per_record("avro: herald-schemas validate (walker)", size, |i| {
        schema.validate(&records[i % 64], &[]).expect("valid");
    });
    let parsed = apache_avro::Schema::parse_str(order).expect("parses");
    per_record("avro: apache_avro::from_avro_datum", size, |i| {
        let mut reader = &records[i % 64][..];
        apache_avro::from_avro_datum(&parsed, &mut reader, None).expect("decodes");
    });
    per_record("avro: decode_to_json", size, |i| {
        schema
            .decode_to_json(&records[i % 64], &[])
            .expect("decodes");
    });

    let proto = CompiledSchema::compile(&SchemaSource::new(
        SchemaType::Protobuf,
        include_str!("order.proto"),
    ))
    .expect("proto");
    let proto_json = json!({
        "id": "12345", "customer": "customer number 1 with a reasonably long display name",
        "email": "customer1@example.com", "total": 1235.5, "tax": 12.25, "quantity": 3,
        "created": "1700000000001", "status": "PAID", "paid": true,
        "note": "leave at the door, ring twice; the dog is friendly",
        "tags": (0..8).map(|t| format!("tag-{t}-{}", "x".repeat(60))).collect::<Vec<_>>(),
        "scores": (0..16).map(|s| s as f64 * 1.5).collect::<Vec<_>>(),
        "address": {"street": "1 Infinite Loop, Building 4, Floor 3", "city": "Cupertino", "zip": "95014"},
        "attributes": {"channel": "web", "campaign": "spring-sale-2024", "referrer": "https://example.com/landing/page?utm=1", "locale": "en-US"},
        "checksum": "AAECAwQFBgcICQoLDA0ODw=="
    });
    let proto_bytes = proto.encode_json(&proto_json, &[0]).expect("encodes");
    per_record(
        "protobuf: validate (DynamicMessage::decode)",
        proto_bytes.len(),
        |_| {
            proto.validate(&proto_bytes, &[0]).expect("valid");
        },
    );

    let json_schema = CompiledSchema::compile(&SchemaSource::new(
        SchemaType::Json,
        include_str!("order.schema.json"),
    ))
    .expect("json schema");
    let doc = serde_json::to_vec(&order_json(1)).expect("serializes");
    per_record("json: validate (parse + jsonschema)", doc.len(), |_| {
        json_schema.validate(&doc, &[]).expect("valid");
    });
    let value = order_json(1);
    per_record("json: validate_json (already parsed)", doc.len(), |_| {
        json_schema.validate_json(&value).expect("valid");
    });
}

fn order_json(i: i64) -> serde_json::Value {
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
        "tags": (0..8).map(|t| format!("tag-{t}-{}", "x".repeat(60))).collect::<Vec<_>>(),
        "scores": (0..16).map(|s| s as f64 * 1.5).collect::<Vec<_>>(),
        "address": {"street": "1 Infinite Loop, Building 4, Floor 3", "city": "Cupertino", "zip": "95014"},
        "attributes": {"channel": "web", "campaign": "spring-sale-2024", "referrer": "https://example.com/landing/page?utm=1", "locale": "en-US"},
        "checksum": "AAECAwQFBgcICQoLDA0ODw=="
    })
}
