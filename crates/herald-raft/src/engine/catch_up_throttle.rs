//! The node-wide rate limit on catch-up replication: what a leader sends a follower that is far
//! behind (a replacement node rebuilding its replicas, a node back after a long absence).
//!
//! A replica being rebuilt would otherwise take the leader's disk and network as fast as they
//! go, and the clients of the partitions it leads would wait behind it. Entries that are not
//! yet committed, or committed only just, are never held: the quorum of the partition's writes
//! depends on them, so only the traffic of a follower behind the commit point by more than
//! [`CATCH_UP_LAG_ENTRIES`] entries is throttled (Kafka throttles the replicas of a
//! reassignment the same way: by rate, and only theirs).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A follower this many entries behind the leader's commit point is catching up.
pub const CATCH_UP_LAG_ENTRIES: u64 = 1024;

/// The default rate: 10 GiB in under three minutes, a fraction of a disk's bandwidth.
pub const DEFAULT_CATCH_UP_BYTES_PER_SEC: u64 = 64 << 20;

/// A token bucket in bytes, shared by every group and peer of the node.
#[derive(Debug)]
pub struct CatchUpThrottle {
    /// Bytes per second; 0: unlimited.
    rate: u64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes that may go now; negative: a debt the next sender waits out.
    tokens: f64,
    refilled: Instant,
}

impl CatchUpThrottle {
    /// A throttle of `bytes_per_sec` (0: none), with a burst of one second's worth.
    pub fn new(bytes_per_sec: u64) -> CatchUpThrottle {
        CatchUpThrottle {
            rate: bytes_per_sec,
            bucket: Mutex::new(Bucket {
                tokens: bytes_per_sec as f64,
                refilled: Instant::now(),
            }),
        }
    }

    /// No limit.
    pub fn unlimited() -> CatchUpThrottle {
        CatchUpThrottle::new(0)
    }

    /// The rate in bytes per second (0: unlimited).
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Takes `bytes` from the bucket and says how long the sender must wait first. A message
    /// larger than the burst goes after its debt is paid, never split.
    pub fn reserve(&self, bytes: usize) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let rate = self.rate as f64;
        let mut bucket = match self.bucket.lock() {
            Ok(bucket) => bucket,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = Instant::now();
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.refilled = now;
        bucket.tokens -= bytes as f64;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / rate)
        }
    }

    /// Waits until `bytes` may be sent.
    pub async fn acquire(&self, bytes: usize) {
        let wait = self.reserve(bytes);
        if !wait.is_zero() {
            metrics::counter!(CATCH_UP_THROTTLED_MS).increment(wait.as_millis() as u64);
            tokio::time::sleep(wait).await;
        }
    }
}

/// Milliseconds catch-up replication waited for the throttle (a counter).
pub const CATCH_UP_THROTTLED_MS: &str = "herald_raft_catch_up_throttled_ms_total";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_a_second_of_bytes_through_then_paces_the_rest() {
        let throttle = CatchUpThrottle::new(1_000_000);
        assert_eq!(throttle.reserve(600_000), Duration::ZERO);
        assert_eq!(throttle.reserve(400_000), Duration::ZERO);
        // The bucket is empty: the next half megabyte waits about half a second.
        let wait = throttle.reserve(500_000);
        assert!(
            wait > Duration::from_millis(450) && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        // And the one after waits behind it.
        let next = throttle.reserve(500_000);
        assert!(next > Duration::from_millis(950), "{next:?}");
    }

    #[test]
    fn an_unlimited_throttle_never_waits() {
        let throttle = CatchUpThrottle::unlimited();
        for _ in 0..1000 {
            assert_eq!(throttle.reserve(64 << 20), Duration::ZERO);
        }
    }
}
