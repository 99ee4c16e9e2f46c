//! Kafka's default partitioner for keyed messages.
//!
//! Using exactly Kafka's hash means a key lands on the same partition here as it would with a
//! Kafka producer, which keeps partition assignment predictable for users migrating data and
//! stable across nodes, restarts and versions.

/// Kafka's `Utils.murmur2`: MurmurHash2, 32-bit, seed `0x9747b28c`, with Java's wrapping `int`
/// arithmetic and signed right shifts replaced by Java's unsigned `>>>`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    let length = data.len();
    // Java computes `seed ^ length` on ints; the length wraps the same way here.
    let mut h: u32 = SEED ^ (length as u32);

    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }

    // The tail, as Java's switch with fall-through: bytes are masked with 0xff, so unsigned.
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }

    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit. Unlike `abs`, it is defined for `i32::MIN`.
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed message: `toPositive(murmur2(key)) % partitions`, as Kafka's
/// default partitioner. `partitions` of zero is treated as one, so the caller never divides by
/// zero; a topic always has at least one partition.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    let positive = to_positive(murmur2(key)) as u32;
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn kafka_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input),
                expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// Further published values of Kafka's hash, covering every tail length.
    #[test]
    fn more_vectors_every_tail_length() {
        let cases: [(&[u8], i32); 5] = [
            (b"1", -1993445489),
            (b"12", 126087238),
            (b"123", -267702483),
            (b"1234", -1614185708),
            (b"12345", -1188365604),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input),
                expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn high_bytes_are_unsigned() {
        // Java masks every byte with 0xff, so bytes >= 0x80 count as unsigned; make sure such
        // input is deterministic and distinct from a low-byte one.
        assert_eq!(murmur2(&[0xff, 0x80, 0x7f]), murmur2(&[0xff, 0x80, 0x7f]));
        assert_ne!(murmur2(&[0xff]), murmur2(&[0x7f]));
    }

    #[test]
    fn to_positive_clears_sign_bit() {
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(0), 0);
        assert_eq!(to_positive(42), 42);
        assert_eq!(to_positive(-973932308), -973932308 & 0x7fff_ffff);
    }

    #[test]
    fn partition_is_stable() {
        // toPositive(-973932308) = 1173551340; toPositive(479470107) = 479470107.
        assert_eq!(partition_for_key(b"21", 10), 1173551340 % 10);
        assert_eq!(partition_for_key(b"abc", 7), 479470107 % 7);
        assert_eq!(
            partition_for_key(b"foobar", 3),
            (-790332482i32 & 0x7fff_ffff) as u32 % 3
        );
        for partitions in 1..64 {
            let p = partition_for_key(b"user-42", partitions);
            assert!(p < partitions);
            assert_eq!(p, partition_for_key(b"user-42", partitions));
        }
    }

    #[test]
    fn zero_partitions_does_not_panic() {
        assert_eq!(partition_for_key(b"x", 0), 0);
        assert_eq!(partition_for_key(b"x", 1), 0);
    }

    #[test]
    fn keys_spread_over_partitions() {
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            counts[partition_for_key(format!("key-{i}").as_bytes(), 8) as usize] += 1;
        }
        for count in counts {
            assert!((700..1300).contains(&count), "{counts:?}");
        }
    }
}
