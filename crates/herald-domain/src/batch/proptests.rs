//! Property tests of the batch decoder against arbitrary input: whatever the bytes, decoding
//! never panics; bytes that are not a batch are refused; a valid batch with any one byte
//! changed, cut short or extended is refused; and what decodes is what was encoded. Also that
//! [`encoded_record_len`] is what the encoder writes, since produce limits rely on it.

use bytes::Bytes;
use proptest::prelude::*;

use super::records::encode_record;
use super::tests::{decode_both, resign};
use super::*;
use crate::record::{RecordKey, RecordValue};

fn key() -> impl Strategy<Value = Option<RecordKey>> {
    prop_oneof![
        Just(None),
        ".{0,20}".prop_map(|text| Some(RecordKey::Text(text))),
        proptest::collection::vec(any::<u8>(), 0..20)
            .prop_map(|bytes| Some(RecordKey::Bytes(Bytes::from(bytes)))),
    ]
}

fn value() -> impl Strategy<Value = RecordValue> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|bytes| RecordValue::Bytes(Bytes::from(bytes))),
        "[ -~]{0,300}".prop_map(|text| RecordValue::Json(Bytes::from(text))),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((".{0,10}", ".{0,10}"), 0..6)
}

/// Records with strictly increasing offset deltas (gaps allowed) and any timestamps.
fn records() -> impl Strategy<Value = Vec<Record>> {
    proptest::collection::vec((0u32..1000, any::<i64>(), key(), value(), headers()), 1..12)
        .prop_map(|fields| {
            let mut delta = 0u32;
            fields
                .into_iter()
                .enumerate()
                .map(|(index, (gap, timestamp, key, value, headers))| {
                    if index > 0 {
                        delta += gap + 1;
                    }
                    Record {
                        offset_delta: delta,
                        timestamp,
                        key,
                        value,
                        headers,
                    }
                })
                .collect()
        })
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Lz4),
        Just(Compression::Zstd)
    ]
}

fn stamp() -> impl Strategy<Value = ProducerStamp> {
    prop_oneof![
        Just(ProducerStamp::NONE),
        (0i64..1 << 40, 0i16..100, 0i32..1 << 30).prop_map(|(id, epoch, sequence)| {
            ProducerStamp {
                producer_id: id,
                producer_epoch: epoch,
                base_sequence: sequence,
            }
        }),
    ]
}

/// A valid encoded batch and what it holds.
fn batch() -> impl Strategy<Value = (Vec<u8>, Vec<Record>, ProducerStamp)> {
    (records(), compression(), stamp()).prop_map(|(records, compression, stamp)| {
        let encoded = encode_batch(&records, compression, stamp).expect("valid records encode");
        (encoded.to_vec(), records, stamp)
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(decode_both(&bytes).is_err());
    }

    /// With magic and version right and the CRC signed, the structure behind it decides: it
    /// never panics, and anything it accepts is a batch that encodes back to what it holds.
    #[test]
    fn signed_garbage_never_panics_and_what_decodes_is_consistent(
        mut bytes in proptest::collection::vec(any::<u8>(), BATCH_HEADER_LEN..1024),
        codec in 0u8..3,
    ) {
        bytes[0] = BATCH_MAGIC;
        bytes[1] = BATCH_VERSION;
        bytes[6] = codec;
        let records_len = (bytes.len() - BATCH_HEADER_LEN) as u32;
        bytes[45..49].copy_from_slice(&records_len.to_be_bytes());
        if codec == 0 {
            bytes[49..53].copy_from_slice(&records_len.to_be_bytes());
        }
        let bytes = resign(bytes);
        if let Ok((header, decoded)) = decode_both(&bytes) {
            let again = encode_batch(&decoded, header.compression, header.producer)
                .expect("decoded records encode");
            let (_, round_trip) = decode_both(&again).expect("re-encoded batch decodes");
            prop_assert_eq!(round_trip, decoded);
        }
    }

    #[test]
    fn valid_batches_decode_to_what_was_encoded((encoded, records, stamp) in batch()) {
        let (header, decoded) = decode_both(&encoded).expect("a valid batch decodes");
        prop_assert_eq!(decoded, records);
        prop_assert_eq!(header.producer, stamp);
    }

    /// Any one byte changed: magic and version are checked first, the CRC covers the rest.
    #[test]
    fn a_changed_byte_is_refused(
        (encoded, _, _) in batch(),
        position in any::<prop::sample::Index>(),
        change in 1u8..=255,
    ) {
        let mut changed = encoded.clone();
        let at = position.index(changed.len());
        changed[at] ^= change;
        let refused = decode_both(&changed).expect_err("a changed byte");
        // The records length says where the batch ends, so it is checked against the input's
        // length before the CRC is computed over it.
        let expected = match at {
            0 => matches!(refused, BatchError::BadMagic),
            1 => matches!(refused, BatchError::UnsupportedVersion(_)),
            45..=48 => matches!(refused, BatchError::Truncated | BatchError::Corrupt(_)),
            _ => matches!(refused, BatchError::CrcMismatch { .. }),
        };
        prop_assert!(expected, "byte {} changed: refused as {:?}", at, refused);
    }

    #[test]
    fn a_truncated_or_extended_batch_is_refused(
        (encoded, _, _) in batch(),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 1..16),
    ) {
        let cut = cut.index(encoded.len());
        prop_assert!(decode_both(&encoded[..cut]).is_err());
        let mut extended = encoded.clone();
        extended.extend_from_slice(&extra);
        prop_assert!(decode_both(&extended).is_err());
    }

    /// The length computed for produce limits is the length the encoder writes, for any
    /// record at any offset and time delta.
    #[test]
    fn computed_record_lengths_are_the_encoded_ones(
        records in records(),
        first_timestamp in any::<i64>(),
    ) {
        for record in &records {
            let mut out = Vec::new();
            encode_record(&mut out, record, first_timestamp);
            let time_delta = record.timestamp.wrapping_sub(first_timestamp);
            prop_assert_eq!(
                encoded_record_len(record, record.offset_delta, time_delta),
                out.len()
            );
            prop_assert!(out.len() <= record.encoded_len() + crate::record::MAX_DELTA_GROWTH);
        }
    }
}
