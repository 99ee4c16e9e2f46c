//! Unit tests of the batch format: round trips, the header layout, and that corrupt, truncated
//! or hostile input is refused the same way by `decode_batch` and `visit_records`.

use bytes::Bytes;

use super::records::{put_varint, unzigzag, zigzag, Reader};
use super::*;
use crate::record::{RecordKey, RecordValue};

const ALL: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

fn sample_records() -> Vec<Record> {
    vec![
        Record {
            offset_delta: 0,
            timestamp: 1_764_400_000_000,
            key: Some(RecordKey::Text("user-42".into())),
            value: RecordValue::Json(Bytes::from_static(br#"{"any":"json"}"#)),
            headers: vec![("trace".into(), "abc".into()), ("é".into(), String::new())],
        },
        Record {
            offset_delta: 1,
            timestamp: 1_764_399_999_000, // going backwards
            key: Some(RecordKey::Bytes(Bytes::from_static(&[0, 159, 255]))),
            value: RecordValue::Bytes(Bytes::from_static(&[1, 2, 3, 0, 255])),
            headers: Vec::new(),
        },
        Record {
            offset_delta: 5, // a gap, as after compaction
            timestamp: 1_764_400_000_500,
            key: None,
            value: RecordValue::Bytes(Bytes::new()),
            headers: vec![("k".into(), "v".repeat(200))],
        },
        Record {
            offset_delta: 300,
            timestamp: 1_764_400_000_400,
            key: None,
            value: RecordValue::Json(Bytes::from_static(b"null")),
            headers: Vec::new(),
        },
    ]
}

fn small_record(delta: u32, timestamp: i64) -> Record {
    Record {
        offset_delta: delta,
        timestamp,
        key: Some(RecordKey::Text("k".into())),
        value: RecordValue::Json(Bytes::from_static(b"1")),
        headers: vec![("h".into(), "v".into())],
    }
}

/// Decodes `buf` both ways, with [`decode_batch`] and with [`visit_records`] turning every
/// view into a record, checks that they agree (the same header and records in the same
/// order, or the same error) and that every view agrees with its record, and returns
/// `decode_batch`'s result.
pub(super) fn decode_both(buf: &[u8]) -> Result<(BatchHeader, Vec<Record>), BatchError> {
    let decoded = decode_batch(buf);
    let mut visited = Vec::new();
    let visit = visit_records(buf, |view| {
        let record = view.to_record().expect("a visited view converts");
        assert_view_matches(&view, &record);
        visited.push(record);
    });
    match (&decoded, visit) {
        (Ok((header, records)), Ok(visit_header)) => {
            assert_eq!(visit_header, *header);
            assert_eq!(&visited, records);
        }
        (Err(error), Err(visit_error)) => assert_eq!(visit_error, *error),
        (decoded, visit) => {
            panic!("decode_batch gave {decoded:?} but visit_records {visit:?}")
        }
    }
    decoded
}

fn assert_view_matches(view: &RecordView<'_>, record: &Record) {
    assert_eq!(view.offset_delta, record.offset_delta);
    assert_eq!(view.timestamp, record.timestamp);
    assert_eq!(view.key, record.key.as_ref().map(RecordKey::as_bytes));
    let text_key = matches!(record.key, Some(RecordKey::Text(_)));
    assert_eq!(view.key_is_text, text_key);
    assert_eq!(view.value, record.value.as_bytes());
    let json_value = matches!(record.value, RecordValue::Json(_));
    assert_eq!(view.value_is_json, json_value);
    assert_eq!(view.is_tombstone(), record.is_tombstone());
    for (name, _) in &record.headers {
        let first = record.headers.iter().find(|(other, _)| other == name);
        assert_eq!(view.header(name), first.map(|(_, value)| value.as_str()));
    }
    assert_eq!(view.header("no such header"), None);
}

fn stamp() -> ProducerStamp {
    ProducerStamp {
        producer_id: 77,
        producer_epoch: 3,
        base_sequence: 1000,
    }
}

#[test]
fn compression_names_round_trip() {
    for compression in ALL {
        assert_eq!(Compression::parse(compression.as_str()), Some(compression));
    }
    assert_eq!(Compression::parse("gzip"), None);
    assert_eq!(Compression::parse("LZ4"), None);
    assert_eq!(Compression::default(), Compression::None);
}

#[test]
fn compression_serde_uses_api_spelling() {
    for compression in ALL {
        let json = serde_json::to_string(&compression).unwrap();
        assert_eq!(json, format!("\"{}\"", compression.as_str()));
        assert_eq!(
            serde_json::from_str::<Compression>(&json).unwrap(),
            compression
        );
    }
    assert!(serde_json::from_str::<Compression>("\"gzip\"").is_err());
}

#[test]
fn producer_stamp_none() {
    assert_eq!(ProducerStamp::NONE.producer_id, -1);
    assert_eq!(ProducerStamp::NONE.producer_epoch, -1);
    assert_eq!(ProducerStamp::NONE.base_sequence, -1);
    assert!(!ProducerStamp::NONE.is_idempotent());
    assert!(stamp().is_idempotent());
    assert_eq!(ProducerStamp::default(), ProducerStamp::NONE);
}

#[test]
fn round_trip_every_compression() {
    let records = sample_records();
    for compression in ALL {
        let encoded = encode_batch(&records, compression, stamp()).unwrap();
        let (header, decoded) = decode_both(&encoded).unwrap();
        assert_eq!(decoded, records, "{compression:?}");
        assert_eq!(header.compression, compression);
        assert!(!header.compacted);
        assert_eq!(header.record_count, 4);
        assert_eq!(header.offset_span, 301);
        assert_eq!(header.first_timestamp, 1_764_400_000_000);
        assert_eq!(header.max_timestamp, 1_764_400_000_500);
        assert_eq!(header.producer, stamp());
        assert_eq!(header.batch_len(), encoded.len());
        assert_eq!(decode_header(&encoded).unwrap(), header);
    }
}

#[test]
fn round_trip_single_record_without_producer() {
    let records = vec![small_record(0, 5)];
    let encoded = encode_batch(&records, Compression::None, ProducerStamp::NONE).unwrap();
    let (header, decoded) = decode_both(&encoded).unwrap();
    assert_eq!(decoded, records);
    assert_eq!(header.producer, ProducerStamp::NONE);
    assert_eq!(header.offset_span, 1);
    assert_eq!(header.records_len, header.uncompressed_len);
}

#[test]
fn round_trip_extreme_timestamps_and_deltas() {
    let records = vec![
        small_record(0, i64::MAX),
        small_record(1, i64::MIN),
        small_record(u32::MAX - 1, 0),
    ];
    for compression in ALL {
        let encoded = encode_batch(&records, compression, stamp()).unwrap();
        let (header, decoded) = decode_both(&encoded).unwrap();
        assert_eq!(decoded, records);
        assert_eq!(header.offset_span, u32::MAX);
        assert_eq!(header.max_timestamp, i64::MAX);
    }
}

#[test]
fn visited_views_are_the_decoded_records() {
    let mut records = sample_records();
    // Values near the tombstone rule: a padded JSON null (a tombstone), the bytes of `null`
    // and a JSON string "null" (neither).
    let near_nulls: [(&[u8], bool); 3] =
        [(b" null\n", true), (b"null", false), (b"\"null\"", true)];
    for (index, (value, json)) in near_nulls.into_iter().enumerate() {
        let value = Bytes::copy_from_slice(value);
        records.push(Record {
            offset_delta: 301 + index as u32,
            timestamp: 1_764_400_000_100,
            key: Some(RecordKey::Text(format!("key-{index}"))),
            value: if json {
                RecordValue::Json(value)
            } else {
                RecordValue::Bytes(value)
            },
            headers: vec![("h".into(), "ü".into())],
        });
    }
    let tombstones = [false, false, false, true, true, false, false];
    assert_eq!(
        records.iter().map(Record::is_tombstone).collect::<Vec<_>>(),
        tombstones
    );
    for compression in ALL {
        let batches = [
            encode_batch(&records, compression, stamp()).unwrap(),
            encode_compacted_batch(&records[1..5], compression, stamp(), 400, i64::MAX).unwrap(),
            encode_compacted_batch(&records[3..], compression, stamp(), 400, i64::MAX).unwrap(),
            encode_compacted_batch(&[], compression, stamp(), 400, 7).unwrap(),
        ];
        for batch in batches {
            let (header, decoded) = decode_batch(&batch).unwrap();
            let mut visited = Vec::new();
            let mut seen_tombstones = Vec::new();
            let visit_header = visit_records(&batch, |view| {
                // Stored uncompressed, the view borrows straight from the batch.
                if header.compression == Compression::None {
                    let within = batch.as_ptr_range();
                    assert!(within.contains(&view.value.as_ptr()) || view.value.is_empty());
                }
                seen_tombstones.push(view.is_tombstone());
                visited.push(view.to_record().unwrap());
            })
            .unwrap();
            assert_eq!(visit_header, header, "{compression:?}");
            assert_eq!(visited, decoded, "{compression:?}");
            let expected: Vec<bool> = decoded.iter().map(Record::is_tombstone).collect();
            assert_eq!(seen_tombstones, expected);
            assert_eq!(decode_both(&batch).unwrap().1, decoded);
        }
    }
}

#[test]
fn visit_may_see_records_of_a_batch_it_then_refuses() {
    let records = vec![small_record(2, 50), small_record(7, 100)];
    let plain = encode_batch(&records, Compression::None, stamp()).unwrap();
    // Only once both records are read does the span turn out not to match them.
    let bad_span = doctored(&plain, |bytes| {
        bytes[11..15].copy_from_slice(&9u32.to_be_bytes())
    });
    // Likewise a stray byte after the last record.
    let trailing = doctored(&plain, |bytes| {
        bytes.push(0);
        let len = bytes.len() - BATCH_HEADER_LEN;
        let len = (len as u32).to_be_bytes();
        bytes[45..49].copy_from_slice(&len);
        bytes[49..53].copy_from_slice(&len);
    });
    for batch in [bad_span, trailing] {
        let mut seen = Vec::new();
        let result = visit_records(&batch, |view| seen.push(view.offset_delta));
        assert!(matches!(result, Err(BatchError::Corrupt(_))), "{result:?}");
        assert_eq!(seen, [2, 7]);
        assert_eq!(decode_batch(&batch).unwrap_err(), result.unwrap_err());
    }
}

#[test]
fn a_view_changed_into_an_invalid_text_key_does_not_convert() {
    let encoded = encode_batch(&sample_records(), Compression::None, stamp()).unwrap();
    let mut checked = 0;
    visit_records(&encoded, |mut view| {
        if view.key == Some(&[0, 159, 255]) {
            assert!(!view.key_is_text);
            assert!(view.to_record().is_ok());
            view.key_is_text = true;
            assert!(matches!(view.to_record(), Err(BatchError::Corrupt(_))));
            checked += 1;
        }
    })
    .unwrap();
    assert_eq!(checked, 1);
}

#[test]
fn header_layout_is_as_documented() {
    let encoded = encode_batch(&sample_records(), Compression::Lz4, stamp()).unwrap();
    assert_eq!(encoded[0], BATCH_MAGIC);
    assert_eq!(encoded[1], BATCH_VERSION);
    let crc = u32::from_be_bytes(encoded[2..6].try_into().unwrap());
    assert_eq!(crc, crc32c::crc32c(&encoded[6..]));
    assert_eq!(encoded[6], 1);
    assert_eq!(u32::from_be_bytes(encoded[7..11].try_into().unwrap()), 4);
    assert_eq!(i64::from_be_bytes(encoded[31..39].try_into().unwrap()), 77);
    let records_len = u32::from_be_bytes(encoded[45..49].try_into().unwrap()) as usize;
    assert_eq!(encoded.len(), BATCH_HEADER_LEN + records_len);
}

#[test]
fn empty_batch_is_an_error() {
    for compression in ALL {
        assert_eq!(
            encode_batch(&[], compression, ProducerStamp::NONE),
            Err(BatchError::Empty)
        );
    }
}

#[test]
fn non_increasing_deltas_are_refused() {
    let records = vec![small_record(3, 0), small_record(3, 0)];
    assert!(matches!(
        encode_batch(&records, Compression::None, ProducerStamp::NONE),
        Err(BatchError::InvalidRecords(_))
    ));
    let records = vec![small_record(3, 0), small_record(2, 0)];
    assert!(encode_batch(&records, Compression::None, ProducerStamp::NONE).is_err());
    let records = vec![small_record(u32::MAX, 0)];
    assert!(encode_batch(&records, Compression::None, ProducerStamp::NONE).is_err());
}

#[test]
fn every_flipped_byte_is_detected() {
    let records = vec![small_record(0, 10), small_record(2, 9)];
    for compression in ALL {
        let batches = [
            encode_batch(&records, compression, stamp()).unwrap(),
            encode_compacted_batch(&records, compression, stamp(), 9, 20).unwrap(),
            encode_compacted_batch(&[], compression, stamp(), 9, 20).unwrap(),
        ];
        for encoded in batches {
            flip_every_byte(&encoded, compression);
        }
    }
}

fn flip_every_byte(encoded: &[u8], compression: Compression) {
    for position in 0..encoded.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut damaged = encoded.to_vec();
            damaged[position] ^= flip;
            assert!(
                decode_both(&damaged).is_err(),
                "{compression:?}: flipping {flip:#x} at {position} went unnoticed"
            );
            assert!(decode_header(&damaged).is_err());
        }
    }
}

#[test]
fn crc_mismatch_is_reported_as_such() {
    let encoded = encode_batch(&sample_records(), Compression::None, stamp()).unwrap();
    let mut damaged = encoded.to_vec();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x10;
    assert!(matches!(
        decode_both(&damaged),
        Err(BatchError::CrcMismatch { .. })
    ));
    damaged = encoded.to_vec();
    damaged[0] = b'X';
    assert_eq!(decode_both(&damaged), Err(BatchError::BadMagic));
    damaged = encoded.to_vec();
    damaged[1] = 9;
    assert_eq!(
        decode_both(&damaged),
        Err(BatchError::UnsupportedVersion(9))
    );
}

#[test]
fn every_truncation_is_detected() {
    for compression in ALL {
        let records = sample_records();
        let batches = [
            encode_batch(&records, compression, stamp()).unwrap(),
            encode_compacted_batch(&records[1..3], compression, stamp(), 400, i64::MAX).unwrap(),
            encode_compacted_batch(&[], compression, stamp(), 400, 0).unwrap(),
        ];
        for encoded in batches {
            for len in 0..encoded.len() {
                assert_eq!(
                    decode_both(&encoded[..len]),
                    Err(BatchError::Truncated),
                    "{compression:?} at {len}"
                );
                assert_eq!(decode_header(&encoded[..len]), Err(BatchError::Truncated));
            }
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    let mut encoded = encode_batch(&sample_records(), Compression::None, stamp())
        .unwrap()
        .to_vec();
    encoded.push(0);
    assert!(matches!(decode_both(&encoded), Err(BatchError::Corrupt(_))));
}

/// A deterministic pseudo-random byte stream (xorshift), so the test needs no extra crate.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn garbage_is_rejected_without_panicking() {
    for seed in 0..2000u64 {
        let len = (seed as usize * 7) % 300;
        let mut bytes = garbage(seed, len);
        assert!(decode_both(&bytes).is_err());
        // With a valid magic and version the decoder has to go further before refusing.
        if bytes.len() >= 2 {
            bytes[0] = BATCH_MAGIC;
            bytes[1] = BATCH_VERSION;
            assert!(decode_both(&bytes).is_err());
        }
    }
}

/// Re-signs a hand-made batch so the structural checks behind the CRC are exercised.
fn forge(mut header: Vec<u8>, section: &[u8]) -> Vec<u8> {
    header.extend_from_slice(section);
    resign(header)
}

/// Recomputes the CRC of a (possibly doctored) batch.
pub(super) fn resign(mut batch: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&batch[CRC_END..]);
    batch[CRC_START..CRC_END].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// A copy of `batch` with `edit` applied to its bytes, re-signed.
fn doctored(batch: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = batch.to_vec();
    edit(&mut bytes);
    resign(bytes)
}

fn is_corrupt(result: Result<(BatchHeader, Vec<Record>), BatchError>) -> bool {
    matches!(result, Err(BatchError::Corrupt(_)))
}

fn forged_header(codec: u8, count: u32, span: u32, records_len: u32, uncompressed: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(BATCH_MAGIC);
    out.push(BATCH_VERSION);
    out.extend_from_slice(&[0; 4]);
    out.push(codec);
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&span.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&records_len.to_be_bytes());
    out.extend_from_slice(&uncompressed.to_be_bytes());
    out
}

#[test]
fn garbage_behind_a_valid_crc_is_rejected() {
    for seed in 0..2000u64 {
        let len = 5 + (seed as usize % 120);
        let section = garbage(seed, len);
        let count = 1 + (seed % 4) as u32;
        let codec = (seed % 3) as u8;
        let uncompressed = if codec == 0 {
            len as u32
        } else {
            (seed * 37 % 4096) as u32 + 5
        };
        let forged = forge(
            forged_header(codec, count, 1000, len as u32, uncompressed),
            &section,
        );
        // Signed, so the CRC passes: what refuses them is the structure behind it. No
        // garbage of these seeds lays out 1 to 4 records ending at offset 999 with timestamp 0.
        let refused = decode_both(&forged).expect_err("garbage behind a valid CRC");
        assert!(
            matches!(refused, BatchError::Corrupt(_) | BatchError::Truncated),
            "seed {seed}: refused for the wrong reason: {refused:?}"
        );
    }
}

#[test]
fn hostile_lengths_are_refused_before_allocating() {
    // A huge declared uncompressed length, correctly signed.
    let forged = forge(forged_header(2, 1, 1, 5, u32::MAX), &[0; 5]);
    assert!(matches!(decode_both(&forged), Err(BatchError::Corrupt(_))));
    // A huge header count inside a valid record.
    let mut section = vec![0u8, 0, 0, 0];
    section.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let forged = forge(
        forged_header(0, 1, 1, section.len() as u32, section.len() as u32),
        &section,
    );
    assert_eq!(decode_both(&forged), Err(BatchError::Truncated));
    // A huge value length.
    let section = [0u8, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0];
    let forged = forge(forged_header(0, 1, 1, 9, 9), &section);
    assert_eq!(decode_both(&forged), Err(BatchError::Truncated));
    // More records claimed than the bytes can hold.
    let forged = forge(forged_header(0, 1000, 1000, 5, 5), &[0; 5]);
    assert!(matches!(decode_both(&forged), Err(BatchError::Corrupt(_))));
}

#[test]
fn structural_checks_behind_the_crc() {
    // A minimal valid record: attributes 0, delta 0, ts delta 0, empty value, no headers.
    let good = [0u8, 0, 0, 0, 0];
    assert!(decode_both(&forge(forged_header(0, 1, 1, 5, 5), &good)).is_ok());
    let cases: Vec<(Vec<u8>, &[u8])> = vec![
        (forged_header(7, 1, 1, 5, 5), &good),    // unknown codec
        (forged_header(0x10, 1, 1, 5, 5), &good), // reserved attribute bits
        (forged_header(0, 0, 1, 5, 5), &good),    // no records
        (forged_header(0, 1, 2, 5, 5), &good),    // span does not match
        (forged_header(0, 1, 1, 5, 6), &good),    // lengths differ, uncompressed
        (forged_header(0, 1, 1, 5, 5), &[0x08, 0, 0, 0, 0]), // reserved record bits
        (forged_header(0, 1, 1, 5, 5), &[REC_KEY_TEXT, 0, 0, 0, 0]), // text flag, no key
        (forged_header(0, 1, 1, 5, 5), &[0, 0, 2, 0, 0]), // first timestamp differs
        (forged_header(1, 1, 1, 5, 5), &good),    // not lz4 data
        (forged_header(2, 1, 1, 5, 5), &good),    // not zstd data
    ];
    for (index, (header, section)) in cases.into_iter().enumerate() {
        assert!(
            matches!(
                decode_both(&forge(header, section)),
                Err(BatchError::Corrupt(_))
            ),
            "case {index}"
        );
    }
    // Invalid UTF-8 in a text key.
    let section = [REC_KEY_PRESENT | REC_KEY_TEXT, 0, 0, 1, 0xff, 0, 0];
    let forged = forge(forged_header(0, 1, 1, 7, 7), &section);
    assert!(matches!(decode_both(&forged), Err(BatchError::Corrupt(_))));
    // An overlong varint.
    let section = [
        0u8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0, 0, 0,
    ];
    let forged = forge(forged_header(0, 1, 1, 15, 15), &section);
    assert!(matches!(decode_both(&forged), Err(BatchError::Corrupt(_))));
}

#[test]
fn compression_shrinks_repetitive_batches() {
    let records: Vec<Record> = (0..200)
        .map(|i| Record {
            offset_delta: i,
            timestamp: 1_764_400_000_000 + i64::from(i),
            key: Some(RecordKey::Text(format!("user-{}", i % 10))),
            value: RecordValue::Json(Bytes::from(
                r#"{"event":"page_view","path":"/products/widgets","agent":"Mozilla/5.0"}"#,
            )),
            headers: vec![("content-type".into(), "application/json".into())],
        })
        .collect();
    let plain = encode_batch(&records, Compression::None, ProducerStamp::NONE).unwrap();
    for compression in [Compression::Lz4, Compression::Zstd] {
        let packed = encode_batch(&records, compression, ProducerStamp::NONE).unwrap();
        assert!(
            packed.len() * 4 < plain.len(),
            "{compression:?}: {} vs {}",
            packed.len(),
            plain.len()
        );
        assert_eq!(decode_both(&packed).unwrap().1, records);
    }
}

#[test]
fn compacted_round_trip_every_compression() {
    let records = sample_records();
    let original =
        decode_header(&encode_batch(&records, Compression::None, stamp()).unwrap()).unwrap();
    // Every non-empty subset of the records is something compaction might leave of them.
    for mask in 1..(1u32 << records.len()) {
        let survivors: Vec<Record> = records
            .iter()
            .enumerate()
            .filter(|(index, _)| mask & (1 << index) != 0)
            .map(|(_, record)| record.clone())
            .collect();
        for compression in ALL {
            let encoded = encode_compacted_batch(
                &survivors,
                compression,
                stamp(),
                original.offset_span,
                original.max_timestamp,
            )
            .unwrap();
            let (header, decoded) = decode_both(&encoded).unwrap();
            assert_eq!(decoded, survivors, "{compression:?} {mask:#06b}");
            assert!(header.compacted);
            assert_eq!(header.compression, compression);
            assert_eq!(header.record_count as usize, survivors.len());
            assert_eq!(header.offset_span, 301);
            assert_eq!(header.first_timestamp, survivors[0].timestamp);
            assert_eq!(header.max_timestamp, 1_764_400_000_500);
            assert_eq!(header.producer, stamp());
            assert_eq!(header.batch_len(), encoded.len());
            assert_eq!(decode_header(&encoded).unwrap(), header);
            assert_eq!(encoded[6], compression.codec_id() | ATTR_COMPACTED);
        }
    }
}

#[test]
fn compacted_batch_may_end_early_and_keep_a_later_max() {
    let survivors = vec![
        small_record(2, 100),
        small_record(7, 50),
        small_record(40, 90),
    ];
    for compression in ALL {
        let encoded =
            encode_compacted_batch(&survivors, compression, ProducerStamp::NONE, 1000, 5000)
                .unwrap();
        let (header, decoded) = decode_both(&encoded).unwrap();
        assert_eq!(decoded, survivors, "{compression:?}");
        assert!(header.compacted);
        assert_eq!(header.record_count, 3);
        assert_eq!(header.offset_span, 1000);
        assert_eq!(header.first_timestamp, 100);
        assert_eq!(header.max_timestamp, 5000);
    }
    // The extremes: the last offset a span can hold, the latest timestamp there is.
    let survivors = vec![small_record(u32::MAX - 1, i64::MIN)];
    let encoded =
        encode_compacted_batch(&survivors, Compression::Zstd, stamp(), u32::MAX, i64::MAX).unwrap();
    let (header, decoded) = decode_both(&encoded).unwrap();
    assert_eq!(decoded, survivors);
    assert_eq!(header.offset_span, u32::MAX);
    assert_eq!(header.max_timestamp, i64::MAX);
}

#[test]
fn empty_compacted_batch_round_trip() {
    for compression in ALL {
        let encoded =
            encode_compacted_batch(&[], compression, stamp(), 301, 1_764_400_000_500).unwrap();
        assert_eq!(encoded.len(), BATCH_HEADER_LEN);
        assert_eq!(encoded[6], ATTR_COMPACTED, "no codec whatever was asked");
        let (header, records) = decode_both(&encoded).unwrap();
        assert!(records.is_empty());
        assert_eq!(
            header,
            BatchHeader {
                compression: Compression::None,
                compacted: true,
                record_count: 0,
                offset_span: 301,
                first_timestamp: 1_764_400_000_500,
                max_timestamp: 1_764_400_000_500,
                producer: stamp(),
                records_len: 0,
                uncompressed_len: 0,
            }
        );
        assert_eq!(header.batch_len(), BATCH_HEADER_LEN);
        assert_eq!(decode_header(&encoded).unwrap(), header);
    }
}

#[test]
fn compacted_encoding_checks_records_against_span_and_max() {
    fn invalid(result: Result<Bytes, BatchError>) -> bool {
        matches!(result, Err(BatchError::InvalidRecords(_)))
    }
    let none = Compression::None;
    let producer = ProducerStamp::NONE;
    let records = vec![small_record(3, 10), small_record(9, 20)];
    assert!(encode_compacted_batch(&records, none, producer, 10, 20).is_ok());
    assert!(invalid(encode_compacted_batch(
        &records, none, producer, 9, 20
    )));
    assert!(invalid(encode_compacted_batch(
        &records, none, producer, 5, 20
    )));
    assert!(invalid(encode_compacted_batch(
        &records, none, producer, 10, 19
    )));
    assert!(invalid(encode_compacted_batch(
        &records, none, producer, 0, 20
    )));
    assert!(invalid(encode_compacted_batch(&[], none, producer, 0, 20)));
    let repeated = vec![small_record(3, 0), small_record(3, 0)];
    assert!(invalid(encode_compacted_batch(
        &repeated, none, producer, 10, 0
    )));
    let decreasing = vec![small_record(3, 0), small_record(2, 0)];
    assert!(invalid(encode_compacted_batch(
        &decreasing,
        none,
        producer,
        10,
        0
    )));
}

#[test]
fn without_the_flag_span_max_and_count_stay_strict() {
    let none = Compression::None;
    let producer = ProducerStamp::NONE;
    let clear_flag = |batch: &[u8]| doctored(batch, |bytes| bytes[6] &= !ATTR_COMPACTED);
    let survivors = vec![small_record(2, 50), small_record(7, 100)];

    // A span beyond the last delta + 1, a max beyond the records', no records at all: each
    // fine in a compacted batch, corrupt once the flag is cleared.
    let compacted = [
        encode_compacted_batch(&survivors, none, producer, 9, 100).unwrap(),
        encode_compacted_batch(&survivors, none, producer, 8, 101).unwrap(),
        encode_compacted_batch(&[], none, producer, 8, 101).unwrap(),
    ];
    for (index, batch) in compacted.iter().enumerate() {
        assert!(decode_both(batch).is_ok(), "case {index}");
        assert!(is_corrupt(decode_both(&clear_flag(batch))), "case {index}");
    }
    assert!(matches!(
        decode_header(&clear_flag(&compacted[2])),
        Err(BatchError::Corrupt(_))
    ));

    // With exactly the span and max its records give, a compacted batch differs from the
    // ordinary one only by the flag.
    let exact = encode_compacted_batch(&survivors, none, producer, 8, 100).unwrap();
    let plain = encode_batch(&survivors, none, producer).unwrap();
    assert_eq!(clear_flag(&exact), plain.to_vec());

    // The ordinary batch doctored the same ways is refused, unless the flag is set too.
    let set_span = |bytes: &mut Vec<u8>| bytes[11..15].copy_from_slice(&9u32.to_be_bytes());
    let set_max = |bytes: &mut Vec<u8>| bytes[23..31].copy_from_slice(&101i64.to_be_bytes());
    let set_flag = |bytes: &mut Vec<u8>| bytes[6] |= ATTR_COMPACTED;
    assert!(is_corrupt(decode_both(&doctored(&plain, set_span))));
    assert!(is_corrupt(decode_both(&doctored(&plain, set_max))));
    let no_count = |bytes: &mut Vec<u8>| bytes[7..11].copy_from_slice(&0u32.to_be_bytes());
    assert!(is_corrupt(decode_both(&doctored(&plain, no_count))));
    let both = |bytes: &mut Vec<u8>| {
        set_span(bytes);
        set_max(bytes);
        set_flag(bytes);
    };
    assert_eq!(decode_both(&doctored(&plain, both)).unwrap().1, survivors);
    // A zero count with the flag but a records section left is corrupt too.
    let emptied = |bytes: &mut Vec<u8>| {
        no_count(bytes);
        set_flag(bytes);
    };
    assert!(is_corrupt(decode_both(&doctored(&plain, emptied))));
}

#[test]
fn compacted_records_beyond_the_span_or_max_are_refused() {
    let survivors = vec![small_record(2, 50), small_record(7, 100)];
    for compression in ALL {
        let compacted =
            encode_compacted_batch(&survivors, compression, ProducerStamp::NONE, 9, 100).unwrap();
        for span in [2u32, 3, 7] {
            let bad = doctored(&compacted, |bytes| {
                bytes[11..15].copy_from_slice(&span.to_be_bytes())
            });
            assert!(is_corrupt(decode_both(&bad)), "{compression:?} span {span}");
        }
        let fine = doctored(&compacted, |bytes| {
            bytes[11..15].copy_from_slice(&8u32.to_be_bytes())
        });
        assert!(decode_both(&fine).is_ok());
        let bad = doctored(&compacted, |bytes| {
            bytes[23..31].copy_from_slice(&99i64.to_be_bytes())
        });
        assert!(is_corrupt(decode_both(&bad)), "{compression:?} max");
    }
    // A minimal record at delta 1 needs a span of at least 2.
    let section = [0u8, 1, 0, 0, 0];
    let forged = |span| forge(forged_header(ATTR_COMPACTED, 1, span, 5, 5), &section);
    assert!(is_corrupt(decode_both(&forged(1))));
    assert!(decode_both(&forged(2)).is_ok());
}

#[test]
fn empty_compacted_batch_is_a_bare_header() {
    assert!(decode_both(&forge(forged_header(ATTR_COMPACTED, 0, 1, 0, 0), &[])).is_ok());
    let late_first = {
        let mut header = forged_header(ATTR_COMPACTED, 0, 1, 0, 0);
        header[15..23].copy_from_slice(&1i64.to_be_bytes());
        header
    };
    let early_first = {
        let mut header = forged_header(ATTR_COMPACTED, 0, 1, 0, 0);
        header[15..23].copy_from_slice(&(-1i64).to_be_bytes());
        header
    };
    let cases: Vec<(Vec<u8>, &[u8])> = vec![
        (forged_header(ATTR_COMPACTED | 1, 0, 1, 0, 0), &[]), // lz4
        (forged_header(ATTR_COMPACTED | 2, 0, 1, 0, 0), &[]), // zstd
        (forged_header(ATTR_COMPACTED, 0, 0, 0, 0), &[]),     // covers no offsets
        (forged_header(ATTR_COMPACTED, 0, 1, 0, 5), &[]),     // claims a section
        (forged_header(ATTR_COMPACTED, 0, 1, 5, 5), &[0; 5]), // has a section
        (late_first, &[]),
        (early_first, &[]),
    ];
    for (index, (header, section)) in cases.into_iter().enumerate() {
        let forged = forge(header, section);
        assert!(is_corrupt(decode_both(&forged)), "case {index}");
        assert!(decode_header(&forged).is_err(), "case {index}");
    }
}

#[test]
fn reserved_attribute_bits_are_still_refused() {
    let records = vec![small_record(2, 50), small_record(7, 100)];
    for compression in ALL {
        let batches = [
            encode_batch(&records, compression, stamp()).unwrap(),
            encode_compacted_batch(&records, compression, stamp(), 9, 200).unwrap(),
            encode_compacted_batch(&[], compression, stamp(), 9, 200).unwrap(),
        ];
        for batch in batches {
            assert!(decode_both(&batch).is_ok());
            for bit in 4..8 {
                let bad = doctored(&batch, |bytes| bytes[6] |= 1 << bit);
                assert!(is_corrupt(decode_both(&bad)), "{compression:?} bit {bit}");
                assert!(matches!(decode_header(&bad), Err(BatchError::Corrupt(_))));
            }
        }
    }
}

#[test]
fn compacted_garbage_behind_a_valid_crc_never_panics() {
    for seed in 0..2000u64 {
        let len = seed as usize % 120;
        let section = garbage(seed, len);
        let codec = (seed % 3) as u8 | ATTR_COMPACTED;
        let uncompressed = if codec & CODEC_MASK == 0 {
            len as u32
        } else {
            (seed * 37 % 4096) as u32
        };
        let count = (seed % 4) as u32;
        let span = (seed * 13 % 2000) as u32;
        let forged = forge(
            forged_header(codec, count, span, len as u32, uncompressed),
            &section,
        );
        let _ = decode_both(&forged);
    }
}

#[test]
fn varints_round_trip() {
    for value in [
        0u64,
        1,
        127,
        128,
        300,
        u64::from(u32::MAX),
        u64::MAX - 1,
        u64::MAX,
    ] {
        let mut out = Vec::new();
        put_varint(&mut out, value);
        let mut reader = Reader { buf: &out };
        assert_eq!(reader.varint().unwrap(), value);
        assert!(reader.buf.is_empty());
    }
    for value in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
        assert_eq!(unzigzag(zigzag(value)), value);
    }
    assert_eq!(zigzag(-1), 1);
    assert_eq!(zigzag(1), 2);
}

/// The worked example of docs/binary-batches.md, byte for byte: the document and the encoder
/// must not drift apart.
#[test]
fn the_documented_example_is_what_the_encoder_writes() {
    let records = vec![
        Record {
            offset_delta: 0,
            timestamp: 1_700_000_000_000,
            key: Some(RecordKey::Text("k1".into())),
            value: RecordValue::Json(Bytes::from_static(br#"{"a":1}"#)),
            headers: vec![("h".into(), "v".into())],
        },
        Record {
            offset_delta: 1,
            timestamp: 1_700_000_000_005,
            key: None,
            value: RecordValue::Bytes(Bytes::from_static(&[0xff])),
            headers: Vec::new(),
        },
    ];
    let batch = encode_batch(&records, Compression::None, ProducerStamp::NONE).expect("encode");
    let hex: String = batch.iter().map(|byte| format!("{byte:02x}")).collect();
    let documented = concat!(
        "48",
        "01",
        "a3279707",
        "00",
        "00000002",
        "00000002",
        "0000018bcfe56800",
        "0000018bcfe56805",
        "ffffffffffffffff",
        "ffff",
        "ffffffff",
        "00000019",
        "00000019",
        "07",
        "00",
        "00",
        "02",
        "6b31",
        "07",
        "7b2261223a317d",
        "01",
        "01",
        "68",
        "01",
        "76",
        "00",
        "01",
        "0a",
        "01",
        "ff",
        "00",
    );
    assert_eq!(hex, documented, "{hex}");
}
