//! The export file format: what is written reads back the same, and a file cut short, changed,
//! foreign or newer is refused with the error that says so.

use std::io::Cursor;

use bytes::Bytes;
use serde_json::json;

use super::*;
use herald_domain::batch::{encode_batch, encode_compacted_batch, ProducerStamp};
use herald_domain::{Compression, Record, RecordKey, RecordValue};

fn records(deltas: &[u32], keyed: bool) -> Vec<Record> {
    deltas
        .iter()
        .map(|&offset_delta| Record {
            offset_delta,
            timestamp: 1_700_000_000_000 + i64::from(offset_delta),
            key: keyed.then(|| RecordKey::Text(format!("key-{offset_delta}"))),
            value: RecordValue::Bytes(Bytes::from(vec![offset_delta as u8; 10])),
            headers: vec![("trace".into(), format!("t{offset_delta}"))],
        })
        .collect()
}

fn header(partitions: u32) -> ExportHeader {
    ExportHeader {
        topic: "orders".into(),
        partition_count: partitions,
        replication_factor: 3,
        config: json!({"cleanup_policy": "compact", "retention_ms": -1})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        exported_at_ms: 1_700_000_000_000,
        export_id: "0123456789abcdef".into(),
        partitions: (0..partitions)
            .map(|partition| PartitionRange {
                partition,
                log_start_offset: 0,
                high_watermark: 100,
            })
            .collect(),
    }
}

/// Batches of three partitions: plain, LZ4, zstd and a compacted one with gaps.
fn frames() -> Vec<(u32, u64, Bytes)> {
    let plain = encode_batch(
        &records(&[0, 1, 2], true),
        Compression::None,
        ProducerStamp::NONE,
    );
    let lz4 = encode_batch(
        &records(&[0, 1], false),
        Compression::Lz4,
        ProducerStamp::NONE,
    );
    let zstd = encode_batch(&records(&[0], true), Compression::Zstd, ProducerStamp::NONE);
    let compacted = encode_compacted_batch(
        &records(&[1, 5], true),
        Compression::None,
        ProducerStamp::NONE,
        8,
        1_700_000_000_009,
    );
    vec![
        (0, 0, plain.expect("encode")),
        (2, 40, lz4.expect("encode")),
        (0, 3, zstd.expect("encode")),
        (1, 17, compacted.expect("encode")),
    ]
}

fn write_file(frames: &[(u32, u64, Bytes)]) -> (Vec<u8>, ExportTrailer) {
    let mut writer = ArchiveWriter::new(Vec::new(), &header(3)).expect("header");
    for (partition, base_offset, batch) in frames {
        writer
            .write_frame(*partition, *base_offset, batch)
            .expect("frame");
    }
    writer.finish().expect("finish")
}

/// Every frame of a file, or the first error.
fn read_all(file: &[u8]) -> Result<(ExportHeader, Vec<Frame>, ExportTrailer), ArchiveError> {
    let mut reader = ArchiveReader::open(Cursor::new(file))?;
    let mut frames = Vec::new();
    while let Some(frame) = reader.next_frame()? {
        frames.push(frame);
    }
    let trailer = reader.trailer().cloned().expect("a trailer at the end");
    Ok((reader.header().clone(), frames, trailer))
}

#[test]
fn a_file_reads_back_as_written() {
    let written = frames();
    let (file, trailer) = write_file(&written);
    assert_eq!(file[..8], MAGIC);
    let (read_header, read, read_trailer) = read_all(&file).expect("reads");
    assert_eq!(read_header, header(3));
    assert_eq!(read_trailer, trailer);
    assert_eq!(read.len(), written.len());
    for (frame, (partition, base_offset, batch)) in read.iter().zip(&written) {
        assert_eq!(
            (frame.partition, frame.base_offset, &frame.batch),
            (*partition, *base_offset, batch)
        );
    }
    let counts: Vec<(u64, u64)> = trailer
        .partitions
        .iter()
        .map(|counts| (counts.batches, counts.records))
        .collect();
    assert_eq!(counts, vec![(2, 4), (1, 2), (1, 2)]);
    assert_eq!((trailer.batches(), trailer.records()), (4, 8));
}

#[test]
fn an_empty_topic_is_a_header_and_an_end_marker() {
    let (file, trailer) = write_file(&[]);
    let (_, frames, read) = read_all(&file).expect("reads");
    assert!(frames.is_empty());
    assert_eq!((read.batches(), read.records()), (0, 0));
    assert_eq!(read, trailer);
}

#[test]
fn every_cut_of_a_file_is_refused_as_truncated() {
    let (file, _) = write_file(&frames());
    for length in 0..file.len() {
        match read_all(&file[..length]) {
            Err(ArchiveError::Truncated { frames }) => assert!(frames <= 4),
            other => panic!("cut at {length} of {}: {other:?}", file.len()),
        }
    }
}

#[test]
fn a_foreign_or_newer_file_is_refused_at_once() {
    let (file, _) = write_file(&frames());
    assert!(matches!(
        ArchiveReader::open(Cursor::new(b"{\"messages\":[]}".as_slice())),
        Err(ArchiveError::BadMagic)
    ));
    let mut text_mode = file.clone();
    text_mode.remove(4); // a CR dropped by a line-ending conversion
    assert!(matches!(
        ArchiveReader::open(Cursor::new(text_mode)),
        Err(ArchiveError::BadMagic)
    ));
    let mut newer = file.clone();
    newer[8..10].copy_from_slice(&2u16.to_be_bytes());
    let error = ArchiveReader::open(Cursor::new(newer)).err();
    assert!(
        matches!(error, Some(ArchiveError::UnsupportedVersion(2))),
        "{error:?}"
    );
}

#[test]
fn a_changed_byte_anywhere_is_refused() {
    let (file, _) = write_file(&frames());
    for at in 8..file.len() {
        let mut changed = file.clone();
        changed[at] ^= 0x01;
        match read_all(&changed) {
            Err(ArchiveError::Corrupt(_) | ArchiveError::Truncated { .. }) => {}
            // The version's low bit: 1 becomes 0, or a newer one.
            Err(ArchiveError::UnsupportedVersion(_)) if at < 10 => {}
            other => panic!("byte {at} changed: {other:?}"),
        }
    }
}

#[test]
fn bytes_after_the_end_marker_are_refused() {
    let (mut file, _) = write_file(&frames());
    file.push(0);
    let error = read_all(&file).err();
    assert!(
        matches!(&error, Some(ArchiveError::Corrupt(detail)) if detail.contains("follow the end marker")),
        "{error:?}"
    );
}

#[test]
fn the_writer_refuses_what_no_reader_would_take() {
    let mut writer = ArchiveWriter::new(Vec::new(), &header(2)).expect("header");
    let (_, _, batch) = frames().remove(0);
    assert!(matches!(
        writer.write_frame(2, 0, &batch),
        Err(ArchiveError::Invalid(_))
    ));
    let mut damaged = batch.to_vec();
    damaged[60] ^= 1;
    assert!(matches!(
        writer.write_frame(0, 0, &damaged),
        Err(ArchiveError::Corrupt(_))
    ));
    let mut unnumbered = header(2);
    unnumbered.partitions.swap(0, 1);
    assert!(matches!(
        ArchiveWriter::new(Vec::new(), &unnumbered),
        Err(ArchiveError::Invalid(_))
    ));
}
