//! The Confluent wire format that serializers put in front of every message.
//!
//! ```text
//! byte 0      magic byte, always 0
//! bytes 1..5  schema id, big-endian
//! [PROTOBUF]  message indexes: zig-zag varint count, then that many zig-zag varints;
//!             the single byte 0 (count 0) is the common case and means [0]
//! rest        the payload in the schema's encoding
//! ```
//!
//! The header is parsed in two steps because whether message indexes follow depends on the
//! schema's type, which is only known after looking the id up: [`schema_id`] first, then
//! [`parse`]. Everything here is bounds-checked: a hostile header can only produce a
//! [`WireError`].

/// Why bytes are not a Confluent-framed message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the message does not start with the Confluent magic byte 0 (it is not in the schema registry's wire format)")]
    NoMagicByte,
    #[error(
        "the message is too short for the Confluent wire header (magic byte and 4-byte schema id)"
    )]
    Truncated,
    #[error("bad Protobuf message indexes in the wire header: {0}")]
    BadMessageIndexes(String),
}

/// A parsed header and the payload after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireHeader<'a> {
    pub schema_id: u32,
    /// Empty unless the schema is PROTOBUF; then never empty (`[0]` is the first message).
    pub message_indexes: Vec<i32>,
    pub payload: &'a [u8],
}

/// The magic byte, then the schema id.
const HEADER_LEN: usize = 5;

/// The schema id only (magic byte + 4 bytes), to look the schema's type up before [`parse`].
pub fn schema_id(bytes: &[u8]) -> Result<u32, WireError> {
    match bytes {
        [] => Err(WireError::Truncated),
        [magic, ..] if *magic != 0 => Err(WireError::NoMagicByte),
        [_, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err(WireError::Truncated),
    }
}

/// Parses the header; message indexes are read only when `schema_type_is_protobuf`.
pub fn parse(bytes: &[u8], schema_type_is_protobuf: bool) -> Result<WireHeader<'_>, WireError> {
    let schema_id = schema_id(bytes)?;
    let mut rest = &bytes[HEADER_LEN..];
    let mut message_indexes = Vec::new();
    if schema_type_is_protobuf {
        let count = read_zigzag_i32(&mut rest)
            .map_err(|e| WireError::BadMessageIndexes(format!("count: {e}")))?;
        if count == 0 {
            message_indexes.push(0);
        } else {
            if count < 0 {
                return Err(WireError::BadMessageIndexes(format!(
                    "negative count {count}"
                )));
            }
            // Each index takes at least one byte: a count larger than what is left is a lie,
            // and rejecting it here bounds the allocation below.
            let count = count as usize;
            if count > rest.len() {
                return Err(WireError::BadMessageIndexes(format!(
                    "count {count} but only {} bytes follow",
                    rest.len()
                )));
            }
            message_indexes.reserve_exact(count);
            for i in 0..count {
                let index = read_zigzag_i32(&mut rest)
                    .map_err(|e| WireError::BadMessageIndexes(format!("index {i}: {e}")))?;
                if index < 0 {
                    return Err(WireError::BadMessageIndexes(format!(
                        "index {i} is negative ({index})"
                    )));
                }
                message_indexes.push(index);
            }
        }
    }
    Ok(WireHeader {
        schema_id,
        message_indexes,
        payload: rest,
    })
}

/// Appends the header to `out`; `message_indexes` is `Some` for PROTOBUF (`Some(&[0])` is
/// written as the single byte 0, as Confluent's serializers do).
pub fn encode_header(schema_id: u32, message_indexes: Option<&[i32]>, out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    if let Some(indexes) = message_indexes {
        if indexes.is_empty() || indexes == [0] {
            out.push(0);
        } else {
            write_zigzag_i32(indexes.len() as i32, out);
            for index in indexes {
                write_zigzag_i32(*index, out);
            }
        }
    }
}

fn read_zigzag_i32(bytes: &mut &[u8]) -> Result<i32, &'static str> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let Some((&byte, rest)) = bytes.split_first() else {
            return Err("truncated varint");
        };
        *bytes = rest;
        if shift == 28 && byte > 0x0f {
            return Err("varint overflows 32 bits");
        }
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    Err("varint longer than 5 bytes")
}

fn write_zigzag_i32(value: i32, out: &mut Vec<u8>) {
    let mut v = ((value << 1) ^ (value >> 31)) as u32;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(id: u32, indexes: Option<&[i32]>, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(id, indexes, &mut out);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn avro_round_trip() {
        let bytes = framed(0x0102_0304, None, b"abc");
        assert_eq!(bytes[..5], [0, 1, 2, 3, 4]);
        let h = parse(&bytes, false).expect("parses");
        assert_eq!(h.schema_id, 0x0102_0304);
        assert!(h.message_indexes.is_empty());
        assert_eq!(h.payload, b"abc");
        assert_eq!(schema_id(&bytes), Ok(0x0102_0304));
    }

    #[test]
    fn first_message_is_the_single_zero_byte() {
        let bytes = framed(7, Some(&[0]), b"\x08\x01");
        assert_eq!(bytes, [0, 0, 0, 0, 7, 0, 8, 1]);
        let h = parse(&bytes, true).expect("parses");
        assert_eq!(h.message_indexes, [0]);
        assert_eq!(h.payload, b"\x08\x01");
    }

    #[test]
    fn nested_indexes_round_trip() {
        for indexes in [&[1, 0][..], &[3], &[0, 2, 1], &[70_000]] {
            let bytes = framed(9, Some(indexes), b"p");
            let h = parse(&bytes, true).expect("parses");
            assert_eq!(h.message_indexes, indexes);
            assert_eq!(h.payload, b"p");
        }
        // [1, 0]: count 2 -> 4, 1 -> 2, 0 -> 0
        assert_eq!(framed(9, Some(&[1, 0]), b"")[5..], [4, 2, 0]);
    }

    #[test]
    fn wrong_magic_byte() {
        assert_eq!(parse(&[1, 0, 0, 0, 1], false), Err(WireError::NoMagicByte));
        assert_eq!(schema_id(b"{\"a\":1}"), Err(WireError::NoMagicByte));
    }

    #[test]
    fn truncated() {
        assert_eq!(parse(&[], false), Err(WireError::Truncated));
        assert_eq!(parse(&[0, 0, 0], false), Err(WireError::Truncated));
        assert_eq!(schema_id(&[0, 0, 0, 1]), Err(WireError::Truncated));
        // Protobuf header without its indexes.
        assert!(matches!(
            parse(&[0, 0, 0, 0, 1], true),
            Err(WireError::BadMessageIndexes(_))
        ));
    }

    #[test]
    fn bad_varints_and_counts() {
        // A varint that never ends.
        assert!(matches!(
            parse(&[0, 0, 0, 0, 1, 0x80, 0x80], true),
            Err(WireError::BadMessageIndexes(_))
        ));
        // Six continuation bytes.
        assert!(matches!(
            parse(&[0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], true),
            Err(WireError::BadMessageIndexes(_))
        ));
        // Count of a million with two bytes left.
        let mut bytes = vec![0, 0, 0, 0, 1];
        write_zigzag_i32(1_000_000, &mut bytes);
        bytes.extend_from_slice(&[2, 2]);
        assert!(matches!(
            parse(&bytes, true),
            Err(WireError::BadMessageIndexes(_))
        ));
        // Negative count (zig-zag 1 = -1) and negative index.
        assert!(parse(&[0, 0, 0, 0, 1, 1], true).is_err());
        assert!(parse(&[0, 0, 0, 0, 1, 2, 1], true).is_err());
    }

    #[test]
    fn zigzag_round_trip() {
        for v in [0, 1, -1, 63, -64, 64, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            write_zigzag_i32(v, &mut out);
            let mut slice = &out[..];
            assert_eq!(read_zigzag_i32(&mut slice), Ok(v));
            assert!(slice.is_empty());
        }
    }
}
