//! The request bodies of `herald bench produce`: messages of a chosen size, as JSON strings,
//! base64 or raw bytes, with or without keys, built once before the clock starts.

use base64::Engine;
use bytes::Bytes;

/// How many different bodies rotate through the requests.
const DISTINCT_BODIES: usize = 4;
/// The most bodies built to cover `--keys`: keys beyond `MAX_KEYED_BODIES * --batch-size` are
/// not sent.
const MAX_KEYED_BODIES: u64 = 256;

/// How the values travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// `{"messages":[{"value":"<text>"},...]}`.
    JsonString,
    /// `{"messages":[{"value_b64":"<base64>"},...]}`.
    JsonBase64,
    /// The raw value as an `application/octet-stream` body.
    Raw,
    /// One batch in the stored layout (`application/vnd.herald.batch`, docs/binary-batches.md)
    /// of bytes values, posted to one partition.
    Batch,
}

impl BodyMode {
    pub(super) fn name(self) -> &'static str {
        match self {
            BodyMode::JsonString => "json",
            BodyMode::JsonBase64 => "json-b64",
            BodyMode::Raw => "raw",
            BodyMode::Batch => "binary",
        }
    }

    pub(super) fn content_type(self) -> &'static str {
        match self {
            BodyMode::Raw => "application/octet-stream",
            BodyMode::Batch => "application/vnd.herald.batch",
            _ => "application/json",
        }
    }
}

/// A deterministic pseudo-random generator (xorshift64*): payloads differ between bodies without
/// a dependency on `rand`.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// `size` bytes of value: letters and digits for JSON strings (no escaping, so the value really
/// is `size` bytes), arbitrary bytes otherwise.
pub fn payload(size: usize, seed: u64, mode: BodyMode) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut random = XorShift::new(seed);
    (0..size)
        .map(|_| {
            let n = random.next();
            match mode {
                BodyMode::JsonString => ALPHABET[(n % ALPHABET.len() as u64) as usize],
                _ => (n >> 56) as u8,
            }
        })
        .collect()
}

/// Message keys of a run: message `n` of the run's bodies gets key `k{(first + n) % distinct}`.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    pub first: u64,
    pub distinct: u64,
}

/// One request body carrying `count` messages of `size` bytes.
pub fn request_body(count: u64, size: usize, seed: u64, mode: BodyMode) -> Bytes {
    keyed_request_body(count, size, seed, mode, None)
}

/// Like [`request_body`], with keys.
pub fn keyed_request_body(
    count: u64,
    size: usize,
    seed: u64,
    mode: BodyMode,
    keys: Option<Keys>,
) -> Bytes {
    if mode == BodyMode::Raw {
        return Bytes::from(payload(size, seed, mode));
    }
    if mode == BodyMode::Batch {
        return batch_body(count, size, seed, keys);
    }
    let (field, encoded_len) = match mode {
        BodyMode::JsonBase64 => ("value_b64", size.div_ceil(3) * 4),
        _ => ("value", size),
    };
    let mut body = String::with_capacity(16 + count as usize * (encoded_len + field.len() + 8));
    body.push_str(r#"{"messages":["#);
    for i in 0..count {
        if i > 0 {
            body.push(',');
        }
        let value = payload(size, seed.wrapping_mul(1_000_003).wrapping_add(i), mode);
        body.push('{');
        if let Some(keys) = keys {
            body.push_str(&format!(
                r#""key":"k{}","#,
                (keys.first + i) % keys.distinct.max(1)
            ));
        }
        body.push('"');
        body.push_str(field);
        body.push_str(r#"":""#);
        match mode {
            BodyMode::JsonBase64 => {
                base64::engine::general_purpose::STANDARD.encode_string(&value, &mut body)
            }
            // Letters and digits only: valid UTF-8 and nothing to escape.
            _ => body.push_str(&String::from_utf8_lossy(&value)),
        }
        body.push_str(r#""}"#);
    }
    body.push_str("]}");
    Bytes::from(body)
}

/// A batch in the stored layout of `count` bytes values, timestamped now, uncompressed.
fn batch_body(count: u64, size: usize, seed: u64, keys: Option<Keys>) -> Bytes {
    use herald_domain::batch::{encode_batch, ProducerStamp};
    use herald_domain::{Compression, Record, RecordKey, RecordValue};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            offset_delta: i as u32,
            timestamp: now,
            key: keys.map(|keys| {
                RecordKey::Text(format!("k{}", (keys.first + i) % keys.distinct.max(1)))
            }),
            value: RecordValue::Bytes(Bytes::from(payload(
                size,
                seed.wrapping_mul(1_000_003).wrapping_add(i),
                BodyMode::Batch,
            ))),
            headers: Vec::new(),
        })
        .collect();
    // Bench sizes (at most 100,000 records, values of a few KB) always encode.
    encode_batch(&records, Compression::None, ProducerStamp::NONE).unwrap_or_default()
}

/// The prebuilt bodies of a run: full batches, plus the one smaller batch at the end when
/// `--messages` is not a multiple of the batch size.
#[derive(Debug)]
pub struct Bodies {
    pub full: Vec<Bytes>,
    pub per_request: u64,
    pub remainder: Option<Bytes>,
}

impl Bodies {
    /// With `keys`, enough distinct bodies that every key is sent (up to [`MAX_KEYED_BODIES`]).
    pub fn build(total: u64, per_request: u64, size: usize, mode: BodyMode, keys: u64) -> Self {
        let distinct = if keys == 0 {
            DISTINCT_BODIES as u64
        } else {
            keys.div_ceil(per_request)
                .clamp(DISTINCT_BODIES as u64, MAX_KEYED_BODIES)
        };
        let keys_of = |body: u64| {
            (keys > 0).then_some(Keys {
                first: body * per_request,
                distinct: keys,
            })
        };
        let full = (0..distinct)
            .map(|body| keyed_request_body(per_request, size, body + 1, mode, keys_of(body)))
            .collect();
        let rest = total % per_request;
        let remainder =
            (rest > 0).then(|| keyed_request_body(rest, size, 99, mode, keys_of(distinct)));
        Bodies {
            full,
            per_request,
            remainder,
        }
    }

    /// Bodies whose messages take their values from `values` in turn (`--values-file`): bytes
    /// as `value_b64`, or in a stored batch with `BodyMode::Batch`.
    pub fn of_values(total: u64, per_request: u64, values: &[Vec<u8>], mode: BodyMode) -> Self {
        let body = |count: u64, first: u64| -> Bytes {
            let pick = |i: u64| &values[((first + i) % values.len().max(1) as u64) as usize];
            if mode == BodyMode::Batch {
                use herald_domain::batch::{encode_batch, ProducerStamp};
                use herald_domain::{Compression, Record, RecordValue};
                let records: Vec<Record> = (0..count)
                    .map(|i| Record {
                        offset_delta: i as u32,
                        timestamp: 0,
                        key: None,
                        value: RecordValue::Bytes(Bytes::from(pick(i).clone())),
                        headers: Vec::new(),
                    })
                    .collect();
                return encode_batch(&records, Compression::None, ProducerStamp::NONE)
                    .unwrap_or_default();
            }
            let mut body = String::from(r#"{"messages":["#);
            for i in 0..count {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(r#"{"value_b64":""#);
                base64::engine::general_purpose::STANDARD.encode_string(pick(i), &mut body);
                body.push_str(r#""}"#);
            }
            body.push_str("]}");
            Bytes::from(body)
        };
        let full = (0..DISTINCT_BODIES as u64)
            .map(|turn| body(per_request, turn * per_request))
            .collect();
        let rest = total % per_request;
        Bodies {
            full,
            per_request,
            remainder: (rest > 0).then(|| body(rest, 0)),
        }
    }

    /// The body for a request of `count` messages (the `turn`-th of its worker).
    pub fn get(&self, count: u64, turn: usize) -> Bytes {
        match &self.remainder {
            Some(rest) if count != self.per_request => rest.clone(),
            _ => self.full[turn % self.full.len()].clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn json_string_bodies_have_exact_sizes() {
        let body = request_body(3, 100, 1, BodyMode::JsonString);
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        let messages = parsed["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        for message in messages {
            assert_eq!(message["value"].as_str().unwrap().len(), 100);
        }
        assert_ne!(messages[0], messages[1], "values differ");
    }

    #[test]
    fn keyed_bodies_send_every_key() {
        let bodies = Bodies::build(100_000, 100, 10, BodyMode::JsonString, 1000);
        assert_eq!(bodies.full.len(), 10);
        let mut keys = std::collections::BTreeSet::new();
        for body in &bodies.full {
            let parsed: Value = serde_json::from_slice(body).unwrap();
            for message in parsed["messages"].as_array().unwrap() {
                keys.insert(message["key"].as_str().unwrap().to_string());
                assert_eq!(message["value"].as_str().unwrap().len(), 10);
            }
        }
        assert_eq!(keys.len(), 1000);
        assert!(keys.contains("k0") && keys.contains("k999"));
    }

    #[test]
    fn base64_bodies_decode_to_the_size() {
        let body = request_body(2, 1000, 1, BodyMode::JsonBase64);
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        let encoded = parsed["messages"][1]["value_b64"].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(decoded.len(), 1000);
    }

    #[test]
    fn batch_bodies_are_valid_batches_of_the_size() {
        let body = request_body(5, 100, 1, BodyMode::Batch);
        let (header, records) = herald_domain::batch::decode_batch(&body).expect("a batch");
        assert_eq!(header.record_count, 5);
        assert!(records
            .iter()
            .all(|record| record.value.as_bytes().len() == 100));
        assert_ne!(records[0].value, records[1].value, "values differ");
    }

    #[test]
    fn raw_bodies_are_the_value() {
        assert_eq!(request_body(1, 64, 1, BodyMode::Raw).len(), 64);
    }

    #[test]
    fn bodies_cover_the_remainder() {
        let bodies = Bodies::build(2500, 1000, 10, BodyMode::JsonString, 0);
        assert_eq!(bodies.full.len(), DISTINCT_BODIES);
        let count = |body: Bytes| {
            let parsed: Value = serde_json::from_slice(&body).unwrap();
            parsed["messages"].as_array().unwrap().len()
        };
        assert_eq!(count(bodies.get(1000, 5)), 1000);
        assert_eq!(count(bodies.get(500, 0)), 500);
        assert!(Bodies::build(2000, 1000, 10, BodyMode::Raw, 0)
            .remainder
            .is_none());
    }
}
