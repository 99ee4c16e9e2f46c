//! One token bucket: a level that refills at a steady rate up to a burst, taken from by
//! requests and bytes. The arithmetic takes the time as an argument, so tests drive it with
//! their own clock.
//!
//! Byte buckets may go into debt: a body's size is known only as it is read or written, and a
//! body bigger than the burst must still pass once; the debt then holds the client back until
//! the bucket has refilled it.

use std::time::{Duration, Instant};

/// A bucket's rate and burst. A rate of 0 means unlimited (no bucket is kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketLimit {
    /// Tokens (requests or bytes) added per second.
    pub rate: u64,
    /// The most tokens the bucket holds: what a client may spend at once after being idle.
    pub burst: u64,
}

impl BucketLimit {
    /// `rate` per second with a burst of `burst`, or one second of `rate` when `burst` is
    /// `None` or 0.
    pub fn new(rate: u64, burst: Option<u64>) -> BucketLimit {
        BucketLimit {
            rate,
            burst: burst.filter(|burst| *burst > 0).unwrap_or(rate),
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.rate == 0
    }
}

#[derive(Debug, Clone)]
pub struct TokenBucket {
    limit: BucketLimit,
    /// Tokens available now; negative while in debt.
    level: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket: a client never seen before (or evicted while full) may spend its burst.
    pub fn full(limit: BucketLimit, now: Instant) -> TokenBucket {
        TokenBucket {
            limit,
            level: limit.burst as f64,
            updated: now,
        }
    }

    pub fn limit(&self) -> BucketLimit {
        self.limit
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.limit.rate as f64).min(self.limit.burst as f64);
        self.updated = self.updated.max(now);
    }

    /// Takes `amount` if the bucket holds it (or, for an amount over the burst, if the bucket is
    /// full: such a request passes and leaves the bucket in debt). Otherwise takes nothing and
    /// answers how long until it would pass.
    pub fn try_take(&mut self, amount: u64, now: Instant) -> Result<(), Duration> {
        self.check(amount, now)?;
        self.level -= amount as f64;
        Ok(())
    }

    /// What [`try_take`](Self::try_take) would answer, taking nothing.
    pub fn check(&mut self, amount: u64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        let needed = amount.min(self.limit.burst) as f64;
        if self.level >= needed {
            Ok(())
        } else {
            Err(self.time_to_reach(needed))
        }
    }

    /// Takes `amount` whatever the level: the bucket may go into debt.
    pub fn charge(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level -= amount as f64;
    }

    /// How long until the bucket is out of debt; `None` when it is not in debt.
    pub fn debt_wait(&mut self, now: Instant) -> Option<Duration> {
        self.refill(now);
        (self.level < 0.0).then(|| self.time_to_reach(0.0))
    }

    /// Whether the bucket is full at `now` (forgetting it changes nothing).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.level >= self.limit.burst as f64
    }

    fn time_to_reach(&self, level: f64) -> Duration {
        let missing = (level - self.level).max(0.0);
        if self.limit.rate == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(missing / self.limit.rate as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn burst_defaults_to_one_second_of_rate() {
        assert_eq!(BucketLimit::new(10, None).burst, 10);
        assert_eq!(BucketLimit::new(10, Some(0)).burst, 10);
        assert_eq!(BucketLimit::new(10, Some(3)).burst, 3);
        assert!(BucketLimit::new(0, None).is_unlimited());
    }

    #[test]
    fn a_full_bucket_spends_its_burst_then_refills_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(BucketLimit::new(10, None), start);
        for _ in 0..10 {
            bucket.try_take(1, start).unwrap();
        }
        let wait = bucket.try_take(1, start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // 250 ms later: 2.5 tokens, two requests pass, the third waits 50 ms.
        let later = at(start, 250);
        bucket.try_take(1, later).unwrap();
        bucket.try_take(1, later).unwrap();
        let wait = bucket.try_take(1, later).unwrap_err();
        assert!(
            (wait.as_secs_f64() - 0.05).abs() < 1e-6,
            "waits {wait:?}, not 50 ms"
        );
    }

    #[test]
    fn refill_stops_at_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(BucketLimit::new(10, Some(5)), start);
        bucket.try_take(5, start).unwrap();
        let much_later = at(start, 60_000);
        assert!(bucket.is_full(much_later));
        bucket.try_take(5, much_later).unwrap();
        assert!(bucket.try_take(1, much_later).is_err());
    }

    #[test]
    fn an_amount_over_the_burst_passes_a_full_bucket_and_leaves_debt() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(BucketLimit::new(1000, None), start);
        bucket.try_take(3000, start).unwrap();
        // 2000 bytes of debt: 2 s to be out of it, 3 s until a full burst passes again.
        assert_eq!(bucket.debt_wait(start), Some(Duration::from_secs(2)));
        assert_eq!(bucket.try_take(3000, start), Err(Duration::from_secs(3)));
        assert_eq!(bucket.debt_wait(at(start, 2000)), None);
        bucket.try_take(3000, at(start, 3000)).unwrap();
    }

    #[test]
    fn charges_go_into_debt_and_the_debt_is_paid_by_time() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(BucketLimit::new(100, None), start);
        assert_eq!(bucket.debt_wait(start), None);
        bucket.charge(250, start);
        assert_eq!(bucket.debt_wait(start), Some(Duration::from_millis(1500)));
        assert_eq!(
            bucket.debt_wait(at(start, 1000)),
            Some(Duration::from_millis(500))
        );
        assert_eq!(bucket.debt_wait(at(start, 1500)), None);
        assert!(!bucket.is_full(at(start, 1500)));
        assert!(bucket.is_full(at(start, 2500)));
    }

    #[test]
    fn a_clock_that_goes_back_changes_nothing() {
        let start = Instant::now();
        let later = at(start, 500);
        let mut bucket = TokenBucket::full(BucketLimit::new(10, None), start);
        bucket.charge(10, later);
        bucket.try_take(1, start).unwrap_err();
        assert_eq!(bucket.debt_wait(start), None);
    }
}
