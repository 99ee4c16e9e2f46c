//! One message as the broker stores it, independent of how it travelled over HTTP.
//!
//! Keys and values remember whether the client sent text/JSON or raw bytes, so a consumer gets
//! back exactly the form the producer used (`value` vs `value_b64`, `key` vs `key_b64`).

use bytes::Bytes;

/// A message key: text when the client sent `key`, bytes when it sent `key_b64`.
///
/// Partitioning hashes [`RecordKey::as_bytes`], so the text `"a"` and the bytes `b"a"` land on
/// the same partition, as they would in Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Text(String),
    Bytes(Bytes),
}

impl RecordKey {
    /// The raw bytes of the key (UTF-8 for text), what partitioning and compaction key on.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            RecordKey::Text(text) => text.as_bytes(),
            RecordKey::Bytes(bytes) => bytes,
        }
    }
}

/// A message value: the exact JSON text the client sent (`value`), or raw bytes (`value_b64`).
///
/// JSON is kept as text rather than a parsed tree so it is stored and served back byte for byte,
/// without paying for a parse on the consume path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    Json(Bytes),
    Bytes(Bytes),
}

impl RecordValue {
    /// The stored bytes of the value: the JSON text or the raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            RecordValue::Json(bytes) | RecordValue::Bytes(bytes) => bytes,
        }
    }
}

/// One message within a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset relative to the batch's base offset. Gaps are allowed so compaction can drop
    /// records from a batch without renumbering the survivors.
    pub offset_delta: u32,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    pub key: Option<RecordKey>,
    pub value: RecordValue,
    pub headers: Vec<(String, String)>,
}

impl Record {
    /// The bytes this record takes in a stored batch's (uncompressed) records section as the
    /// first record of its batch: key, value, every header's name and value, and the framing
    /// around them (the attributes byte, the offset and time deltas, every length prefix and the
    /// header count). What a topic's `max_message_bytes` and the produce path's byte bounds
    /// count, so a million empty headers or a million empty messages cost what they really
    /// take. The same record later in a batch takes at most [`MAX_DELTA_GROWTH`] bytes more, as
    /// its deltas grow.
    pub fn encoded_len(&self) -> usize {
        crate::batch::encoded_record_len(self, 0, 0)
    }

    /// Whether the record is a tombstone: its value is the JSON `null` (the API's
    /// `"value": null`), ASCII whitespace around it aside. On a compacted topic a tombstone
    /// deletes its key: compaction drops the key's earlier records, and in time the tombstone
    /// itself. A bytes value (`value_b64`) is never a tombstone, whatever its bytes.
    pub fn is_tombstone(&self) -> bool {
        match &self.value {
            RecordValue::Json(text) => is_json_null(text),
            RecordValue::Bytes(_) => false,
        }
    }
}

/// How many bytes more than [`Record::encoded_len`] a record can take further into its batch:
/// its offset delta (a u32 varint, 5 bytes at most) and its time delta (a zigzag i64 varint, 10
/// bytes at most) each take one byte as the first record.
pub const MAX_DELTA_GROWTH: usize = 4 + 9;

/// Whether JSON value text is `null`, ASCII whitespace around it aside: the tombstone rule, shared
/// by [`Record::is_tombstone`] and the batch's borrowed record view.
pub(crate) fn is_json_null(text: &[u8]) -> bool {
    text.trim_ascii() == b"null"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bytes_are_the_same_for_text_and_bytes() {
        let text = RecordKey::Text("user-42".into());
        let bytes = RecordKey::Bytes(Bytes::from_static(b"user-42"));
        assert_eq!(text.as_bytes(), b"user-42");
        assert_eq!(text.as_bytes(), bytes.as_bytes());
        assert_ne!(text, bytes, "the form the client used is remembered");
    }

    #[test]
    fn value_bytes() {
        assert_eq!(
            RecordValue::Json(Bytes::from_static(b"{\"a\":1}")).as_bytes(),
            b"{\"a\":1}"
        );
        assert_eq!(
            RecordValue::Bytes(Bytes::from_static(&[0, 255])).as_bytes(),
            &[0, 255]
        );
    }

    #[test]
    fn encoded_len_counts_key_value_headers_and_their_framing() {
        let record = Record {
            offset_delta: 0,
            timestamp: 1,
            key: Some(RecordKey::Text("abc".into())),
            value: RecordValue::Json(Bytes::from_static(b"12345")),
            headers: vec![("tr".into(), "xyz".into()), ("h".into(), String::new())],
        };
        // attributes, offset delta, time delta; key and value with their lengths; the header
        // count; each header's name and value with their lengths.
        assert_eq!(
            record.encoded_len(),
            3 + (1 + 3) + (1 + 5) + 1 + (1 + 2 + 1 + 3) + (1 + 1 + 1)
        );
    }

    #[test]
    fn an_empty_record_still_takes_its_framing() {
        let record = Record {
            offset_delta: 7,
            timestamp: 0,
            key: None,
            value: RecordValue::Bytes(Bytes::new()),
            headers: Vec::new(),
        };
        assert_eq!(record.encoded_len(), 5);
    }

    #[test]
    fn empty_headers_are_not_free() {
        let mut record = Record {
            offset_delta: 0,
            timestamp: 0,
            key: None,
            value: RecordValue::Bytes(Bytes::new()),
            headers: vec![(String::new(), String::new()); 1000],
        };
        // Two length prefixes per header, and a header count of two varint bytes.
        assert_eq!(record.encoded_len(), 4 + 2 + 2000);
        record.headers.clear();
        assert_eq!(record.encoded_len(), 5);
    }

    fn with_value(value: RecordValue) -> Record {
        Record {
            offset_delta: 0,
            timestamp: 0,
            key: Some(RecordKey::Text("k".into())),
            value,
            headers: Vec::new(),
        }
    }

    #[test]
    fn json_null_is_a_tombstone() {
        for text in [&b"null"[..], b" null", b"null\n", b"\t\r\n null \n"] {
            let record = with_value(RecordValue::Json(Bytes::copy_from_slice(text)));
            assert!(record.is_tombstone(), "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn other_values_are_not_tombstones() {
        for text in [
            &b""[..],
            b"  ",
            b"Null",
            b"NULL",
            b"nul",
            b"nulll",
            b"\"null\"",
            b"[null]",
            b"{\"value\":null}",
            b"null null",
            b"0",
            b"false",
        ] {
            let record = with_value(RecordValue::Json(Bytes::copy_from_slice(text)));
            assert!(
                !record.is_tombstone(),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        // Bytes are never a tombstone, not even the bytes of the text `null` or no bytes at all.
        for bytes in [&b"null"[..], b""] {
            let record = with_value(RecordValue::Bytes(Bytes::copy_from_slice(bytes)));
            assert!(!record.is_tombstone());
        }
        // Without a key it is still a null value; what that means is the caller's business.
        let mut keyless = with_value(RecordValue::Json(Bytes::from_static(b"null")));
        keyless.key = None;
        assert!(keyless.is_tombstone());
    }

    #[test]
    fn long_fields_take_longer_length_prefixes() {
        let record = Record {
            offset_delta: 0,
            timestamp: 0,
            key: None,
            value: RecordValue::Bytes(Bytes::from(vec![0u8; 200])),
            headers: Vec::new(),
        };
        assert_eq!(record.encoded_len(), 3 + (2 + 200) + 1);
    }

    #[test]
    fn multibyte_text_counts_bytes_not_chars() {
        let record = Record {
            offset_delta: 0,
            timestamp: 0,
            key: Some(RecordKey::Text("é".into())),
            value: RecordValue::Json(Bytes::from_static(b"1")),
            headers: Vec::new(),
        };
        assert_eq!(record.encoded_len(), 3 + (1 + 2) + (1 + 1) + 1);
    }
}
