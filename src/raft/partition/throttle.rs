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
        let elapsed = self.since.elapsed();
        if elapsed > self.due() + MAX_BURST {
            // Idle time does not turn into an unbounded burst.
            self.since = Instant::now() - MAX_BURST;
            self.spent = 0;
        }
        self.spent += bytes;
        let due = self.due();
        let elapsed = self.since.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spending_past_the_rate_takes_time() {
        let mut throttle = Throttle::new(10 << 20);
        let started = Instant::now();
        // 4 MiB at 10 MiB/s: about 0.4 s, less the 0.2 s burst allowance.
        for _ in 0..4 {
            throttle.spend(1 << 20);
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(150), "took {took:?}");
        assert!(took < Duration::from_secs(3), "took {took:?}");
    }

    #[test]
    fn spending_within_the_rate_does_not_wait() {
        let mut throttle = Throttle::new(1 << 30);
        let started = Instant::now();
        throttle.spend(1 << 10);
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}
