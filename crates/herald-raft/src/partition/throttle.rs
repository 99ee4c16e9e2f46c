//! A byte-rate limit for background I/O (the cleaner): callers report what they read and wrote
//! and are put to sleep for as long as it takes to stay under the rate. Blocking: used on the
//! cleaner's own blocking thread, never on the async runtime.

use std::time::{Duration, Instant};

/// How much unused budget may pile up while idle: a burst after a quiet spell is at most this
/// long at the full rate.
const MAX_BURST: Duration = Duration::from_millis(200);

pub struct Throttle {
    bytes_per_sec: u64,
    since: Instant,
    spent: u64,
}

impl Throttle {
    pub fn new(bytes_per_sec: u64) -> Self {
        Throttle {
            bytes_per_sec: bytes_per_sec.max(1),
            since: Instant::now(),
            spent: 0,
        }
    }

    /// How long `spent` bytes take at the rate.
    fn due(&self) -> Duration {
        Duration::from_secs_f64(self.spent as f64 / self.bytes_per_sec as f64)
    }

    /// Records `bytes` of I/O; sleeps until they fit in the rate.
    pub fn spend(&mut self, bytes: u64) {
        let wait = self.record(bytes);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// Records `bytes` of I/O; answers how long the caller must wait for them to fit in the
    /// rate (apart from sleeping, so tests check the rate, not the scheduler).
    fn record(&mut self, bytes: u64) -> Duration {
        let elapsed = self.since.elapsed();
        if elapsed > self.due() + MAX_BURST {
            // Idle time does not turn into an unbounded burst.
            self.since = Instant::now() - MAX_BURST;
            self.spent = 0;
        }
        self.spent += bytes;
        self.due().saturating_sub(self.since.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spending_past_the_rate_takes_time() {
        let mut throttle = Throttle::new(10 << 20);
        let started = Instant::now();
        // 4 MiB at 10 MiB/s: about 0.4 s, less the 0.2 s burst allowance. The upper bound only
        // catches a runaway wait: a loaded machine may add any delay to the sleeps.
        for _ in 0..4 {
            throttle.spend(1 << 20);
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(150), "took {took:?}");
        assert!(took < Duration::from_secs(30), "took {took:?}");
    }

    #[test]
    fn spending_within_the_rate_does_not_wait() {
        // 1 KiB at 1 GiB/s is due within a microsecond, however late the thread runs.
        let mut throttle = Throttle::new(1 << 30);
        assert!(throttle.record(1 << 10) <= Duration::from_micros(1));
        // A quiet spell leaves room for a burst: 100 MiB (0.1 s at the rate) at once.
        let mut throttle = Throttle::new(1 << 30);
        throttle.since = Instant::now() - Duration::from_secs(1);
        assert_eq!(throttle.record(100 << 20), Duration::ZERO);
    }

    #[test]
    fn spending_past_the_rate_waits_for_the_excess() {
        // 20 MiB at 10 MiB/s right after a start: 2 s due, at most 2 s waited, most of it.
        let mut throttle = Throttle::new(10 << 20);
        let wait = throttle.record(20 << 20);
        assert!(wait <= Duration::from_secs(2), "{wait:?}");
        assert!(wait >= Duration::from_secs(1), "{wait:?}");
    }
}
