//! Giving a stored batch another producer stamp without touching its records: the header's
//! producer fields (bytes 31 to 44) are overwritten and the CRC-32C (bytes 2 to 5, over bytes
//! 6 to the end) computed again. The records section, compressed or not, is copied as it is.
//!
//! `herald topics import` writes a source cluster's batches to another cluster as an
//! idempotent producer this way: the bytes a reader gets are the source's, only who wrote them
//! changes. The batch is verified first, so a batch damaged on the way is refused rather than
//! given a fresh CRC that would hide the damage.

use bytes::{Bytes, BytesMut};

use super::{decode_header, BatchError, BatchHeader, ProducerStamp, CRC_END, CRC_START};

/// Where the producer fields start in the header: producer_id (8), producer_epoch (2),
/// base_sequence (4).
const PRODUCER_START: usize = 31;

/// A copy of the batch in `buf` (exactly one, verified: magic, version, lengths, CRC) with
/// `stamp` as its producer fields and its CRC computed again; answers the copy and the
/// original's header (its producer fields those of the original).
pub fn restamp(buf: &[u8], stamp: ProducerStamp) -> Result<(Bytes, BatchHeader), BatchError> {
    let header = decode_header(buf)?;
    let mut out = BytesMut::from(buf);
    let fields = &mut out[PRODUCER_START..PRODUCER_START + 14];
    fields[..8].copy_from_slice(&stamp.producer_id.to_be_bytes());
    fields[8..10].copy_from_slice(&stamp.producer_epoch.to_be_bytes());
    fields[10..14].copy_from_slice(&stamp.base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_END..]);
    out[CRC_START..CRC_END].copy_from_slice(&crc.to_be_bytes());
    Ok((out.freeze(), header))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{decode_batch, encode_batch, encode_compacted_batch};
    use crate::{Compression, Record, RecordKey, RecordValue};

    fn records(deltas: &[u32]) -> Vec<Record> {
        deltas
            .iter()
            .map(|&offset_delta| Record {
                offset_delta,
                timestamp: 1_700_000_000_000 + i64::from(offset_delta),
                key: Some(RecordKey::Text(format!("key-{offset_delta}"))),
                value: RecordValue::Json(Bytes::from(format!("{{\"n\":{offset_delta}}}"))),
                headers: vec![("h".into(), "v".into())],
            })
            .collect()
    }

    const STAMP: ProducerStamp = ProducerStamp {
        producer_id: 42,
        producer_epoch: 3,
        base_sequence: 1_000,
    };

    #[test]
    fn only_the_producer_fields_and_the_crc_change() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let original =
                encode_batch(&records(&[0, 1, 2]), compression, ProducerStamp::NONE).unwrap();
            let (stamped, header) = restamp(&original, STAMP).unwrap();
            assert_eq!(header.producer, ProducerStamp::NONE);
            assert_eq!(stamped.len(), original.len());
            assert_eq!(stamped[..2], original[..2]);
            assert_eq!(stamped[6..PRODUCER_START], original[6..PRODUCER_START]);
            assert_eq!(
                stamped[PRODUCER_START + 14..],
                original[PRODUCER_START + 14..]
            );
            let (decoded, decoded_records) = decode_batch(&stamped).unwrap();
            assert_eq!(decoded.producer, STAMP);
            assert_eq!(decoded_records, decode_batch(&original).unwrap().1);
        }
    }

    #[test]
    fn a_compacted_batch_keeps_its_gaps_and_span() {
        let original = encode_compacted_batch(
            &records(&[1, 4]),
            Compression::Zstd,
            ProducerStamp::NONE,
            9,
            1_700_000_000_009,
        )
        .unwrap();
        let (stamped, _) = restamp(&original, STAMP).unwrap();
        let (header, decoded) = decode_batch(&stamped).unwrap();
        assert!(header.compacted);
        assert_eq!((header.offset_span, header.producer), (9, STAMP));
        let deltas: Vec<u32> = decoded.iter().map(|record| record.offset_delta).collect();
        assert_eq!(deltas, vec![1, 4]);
    }

    #[test]
    fn a_damaged_batch_is_refused_not_resigned() {
        let mut damaged = encode_batch(&records(&[0]), Compression::None, ProducerStamp::NONE)
            .unwrap()
            .to_vec();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(matches!(
            restamp(&damaged, STAMP),
            Err(BatchError::CrcMismatch { .. })
        ));
        assert_eq!(restamp(&damaged[..20], STAMP), Err(BatchError::Truncated));
    }
}
