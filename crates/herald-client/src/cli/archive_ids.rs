//! The identities an export and its imports go by: the export's id (in the file's header) and
//! the idempotent producer an import of that file into a topic writes as.
//!
//! **Why a named producer.** `POST /v1/producers` with a name answers the same producer id
//! every time that name registers again, with the next epoch (docs/producing.md); a new epoch
//! keeps the numbering of the sequences and fences the older ones. An import registers the name
//! `herald-import.<export id>.<hash of the target topic>`: a run again of the same file into the
//! same topic, from any machine and without any state kept beside the file, writes as the same
//! producer, numbers its batches' sequences as the first run did (from the file's own content),
//! and so has every batch the first run wrote answered as a duplicate. Another export (a new
//! id) or another target topic is another producer. The epoch fences an older run that is still
//! going (two imports of one file into one topic at once): its next batch is refused.

use std::hash::{BuildHasher, Hasher};

/// A new export id: 16 hex digits, from the process's random hash keys, the time and the
/// process id (unique enough for telling exports apart; nothing secret rests on it).
pub fn new_export_id() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

/// The producer name an import of the export `export_id` into `topic` registers. Producer
/// names follow the topic name rules (1-249 of `[A-Za-z0-9._-]`); an export id that is not 1
/// to 32 hex digits (a file not written by `herald topics export`) is hashed.
pub fn import_producer_name(export_id: &str, topic: &str) -> String {
    let hex = |text: &str| {
        !text.is_empty() && text.len() <= 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
    };
    let export = if hex(export_id) {
        export_id.to_ascii_lowercase()
    } else {
        format!("{:016x}", fnv1a(export_id.as_bytes()))
    };
    format!("herald-import.{export}.{:016x}", fnv1a(topic.as_bytes()))
}

/// FNV-1a, 64 bits: a stable hash (the same in every release and on every machine, which
/// `std`'s hashers do not promise).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_ids_are_sixteen_hex_digits_and_differ() {
        let (a, b) = (new_export_id(), new_export_id());
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn a_file_and_a_topic_always_name_the_same_producer() {
        let name = import_producer_name("00112233aabbccdd", "orders");
        assert_eq!(name, import_producer_name("00112233AABBCCDD", "orders"));
        assert_eq!(name, "herald-import.00112233aabbccdd.00125d9250be8b4c");
        assert_ne!(
            name,
            import_producer_name("00112233aabbccdd", "orders-copy")
        );
        assert_ne!(name, import_producer_name("00112233aabbccde", "orders"));
        // A foreign id is hashed into the name rules; a long topic name does not lengthen it.
        let odd = import_producer_name("not/an id", &"t".repeat(249));
        assert!(odd.len() <= 249);
        assert!(odd
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    }
}
