//! Key codecs. Every key starts with the raft group id, big-endian, so one group's keys are
//! contiguous and RocksDB's byte order is numeric order (log order).

/// `(group, u64)`: raft log entries by index, offset index by base offset.
pub fn group_u64(group: impl Into<u64>, value: u64) -> [u8; 16] {
    let group: u64 = group.into();
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&group.to_be_bytes());
    key[8..].copy_from_slice(&value.to_be_bytes());
    key
}

/// Decodes a key made by [`group_u64`].
pub fn decode_group_u64(key: &[u8]) -> Option<(u64, u64)> {
    if key.len() != 16 {
        return None;
    }
    let group = u64::from_be_bytes(key[..8].try_into().ok()?);
    let value = u64::from_be_bytes(key[8..].try_into().ok()?);
    Some((group, value))
}

/// `(group, tag)`: one small raft-state record of a group.
pub fn group_tag(group: impl Into<u64>, tag: u8) -> [u8; 9] {
    let group: u64 = group.into();
    let mut key = [0u8; 9];
    key[..8].copy_from_slice(&group.to_be_bytes());
    key[8] = tag;
    key
}

/// `(group, tag, u64)`: one of a numbered series of records of a group (e.g. queued
/// compaction passes).
pub fn group_tag_u64(group: impl Into<u64>, tag: u8, value: u64) -> [u8; 17] {
    let group: u64 = group.into();
    let mut key = [0u8; 17];
    key[..8].copy_from_slice(&group.to_be_bytes());
    key[8] = tag;
    key[9..].copy_from_slice(&value.to_be_bytes());
    key
}

/// `(group, tag, bytes)`: one of a series of records of a group named by arbitrary bytes
/// (e.g. a partition's idempotency keys). Byte order sorts them within the tag.
pub fn group_tag_bytes(group: impl Into<u64>, tag: u8, suffix: &[u8]) -> Vec<u8> {
    let group: u64 = group.into();
    let mut key = Vec::with_capacity(9 + suffix.len());
    key.extend_from_slice(&group_tag(group, tag));
    key.extend_from_slice(suffix);
    key
}

/// The suffix of a key made by [`group_tag_bytes`] (or [`group_tag_u64`]) for `group` and
/// `tag`, if the key is one.
pub fn group_tag_suffix(group: impl Into<u64>, tag: u8, key: &[u8]) -> Option<&[u8]> {
    let group: u64 = group.into();
    if key.len() < 9 || key[..8] != group.to_be_bytes() || key[8] != tag {
        return None;
    }
    Some(&key[9..])
}

/// Maps an `i64` to a `u64` with the same order, so negative timestamps sort first.
pub fn ordered_i64(value: i64) -> u64 {
    (value as u64) ^ (1 << 63)
}

/// `(group, timestamp, base offset)`: the time index.
pub fn time_index(group: impl Into<u64>, max_timestamp: i64, base_offset: u64) -> [u8; 24] {
    let group: u64 = group.into();
    let mut key = [0u8; 24];
    key[..8].copy_from_slice(&group.to_be_bytes());
    key[8..16].copy_from_slice(&ordered_i64(max_timestamp).to_be_bytes());
    key[16..].copy_from_slice(&base_offset.to_be_bytes());
    key
}

/// The base offset of a time-index key of `group`, if the key is one.
pub fn decode_time_index(group: impl Into<u64>, key: &[u8]) -> Option<u64> {
    let group: u64 = group.into();
    if key.len() != 24 || key[..8] != group.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(key[16..].try_into().ok()?))
}

/// The timestamp of a time-index key of `group`, if the key is one.
pub fn decode_time_index_timestamp(group: impl Into<u64>, key: &[u8]) -> Option<i64> {
    let group: u64 = group.into();
    if key.len() != 24 || key[..8] != group.to_be_bytes() {
        return None;
    }
    let ordered = u64::from_be_bytes(key[8..16].try_into().ok()?);
    Some((ordered ^ (1 << 63)) as i64)
}

/// The first key past every key of `group`, for ranges and deletes.
pub fn group_end(group: impl Into<u64>) -> [u8; 8] {
    let group: u64 = group.into();
    group.saturating_add(1).to_be_bytes()
}

pub fn group_start(group: impl Into<u64>) -> [u8; 8] {
    let group: u64 = group.into();
    group.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_keys_sort_numerically() {
        let mut keys: Vec<[u8; 16]> = [(1u64, 300), (1, 2), (0, u64::MAX), (2, 0), (1, 256)]
            .iter()
            .map(|&(group, index)| group_u64(group, index))
            .collect();
        keys.sort();
        let decoded: Vec<(u64, u64)> = keys
            .iter()
            .map(|key| decode_group_u64(key).unwrap())
            .collect();
        assert_eq!(
            decoded,
            vec![(0, u64::MAX), (1, 2), (1, 256), (1, 300), (2, 0)]
        );
    }

    #[test]
    fn time_index_keys_decode_to_their_parts() {
        for timestamp in [i64::MIN, -5, 0, 1_795_000_000_000, i64::MAX] {
            let key = time_index(9u64, timestamp, 42);
            assert_eq!(decode_time_index_timestamp(9u64, &key), Some(timestamp));
            assert_eq!(decode_time_index(9u64, &key), Some(42));
            assert_eq!(decode_time_index_timestamp(8u64, &key), None);
        }
    }

    #[test]
    fn group_range_covers_exactly_the_group() {
        let inside = group_u64(7u64, u64::MAX);
        let after = group_u64(8u64, 0);
        assert!(inside.as_slice() >= group_start(7u64).as_slice());
        assert!(inside.as_slice() < group_end(7u64).as_slice());
        assert!(after.as_slice() >= group_end(7u64).as_slice());
    }

    #[test]
    fn time_keys_order_negative_before_positive() {
        let mut keys = [
            time_index(3u64, 5, 10),
            time_index(3u64, -5, 1),
            time_index(3u64, 0, 2),
            time_index(3u64, i64::MIN, 0),
            time_index(3u64, i64::MAX, 20),
        ];
        keys.sort();
        let offsets: Vec<u64> = keys
            .iter()
            .map(|key| decode_time_index(3u64, key).unwrap())
            .collect();
        assert_eq!(offsets, vec![0, 1, 2, 10, 20]);
        assert_eq!(decode_time_index(4u64, &keys[0]), None);
    }

    #[test]
    fn tagged_byte_keys_stay_within_their_tag() {
        let key = group_tag_bytes(5u64, 22, b"order-17");
        assert_eq!(group_tag_suffix(5u64, 22, &key), Some(&b"order-17"[..]));
        assert_eq!(group_tag_suffix(5u64, 23, &key), None);
        assert_eq!(group_tag_suffix(6u64, 22, &key), None);
        let long = group_tag_bytes(5u64, 22, &[0xff; 255]);
        assert!(long.as_slice() < group_tag(5u64, 23).as_slice());
        assert!(group_tag_bytes(5u64, 22, b"").as_slice() >= group_tag(5u64, 22).as_slice());
    }

    #[test]
    fn malformed_keys_do_not_decode() {
        assert_eq!(decode_group_u64(&[1, 2, 3]), None);
        assert_eq!(decode_time_index(1u64, &[0; 23]), None);
    }
}
