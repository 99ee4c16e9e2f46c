//! `--rate`: a request-rate cap shared by all workers.
//!
//! The pacer hands out send times on a fixed schedule (one slot every `1/rate` seconds), and a
//! worker waits for its slot before sending. Latency is then measured from the slot, not from the
//! moment the request actually left: if the server stalls and requests queue up behind it, that
//! queueing is part of what a client at this rate would see. Measuring from the send instead would
//! hide it ("coordinated omission"), which matters most for the p99-at-a-tenth-of-peak figure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A shared schedule of request start times.
#[derive(Debug)]
pub struct Pacer {
    start: Instant,
    interval_ns: u64,
    /// Nanoseconds after `start` of the next unclaimed slot.
    next_ns: AtomicU64,
}

impl Pacer {
    /// A pacer for `rate` requests per second starting now; `None` when the rate is not a
    /// positive finite number.
    pub fn new(rate: f64) -> Option<Self> {
        Self::starting_at(rate, Instant::now())
    }

    /// Like [`new`](Self::new) with an explicit start (for tests).
    pub fn starting_at(rate: f64, start: Instant) -> Option<Self> {
        if !(rate.is_finite() && rate > 0.0) {
            return None;
        }
        let interval_ns = (1e9 / rate).round().max(1.0) as u64;
        Some(Pacer {
            start,
            interval_ns,
            next_ns: AtomicU64::new(0),
        })
    }

    /// Claims the next slot: the instant the caller should send at.
    pub fn claim(&self) -> Instant {
        let offset = self.next_ns.fetch_add(self.interval_ns, Ordering::Relaxed);
        self.start + Duration::from_nanos(offset)
    }

    /// Claims a slot and sleeps until it; returns the slot, to measure latency from.
    pub async fn wait(&self) -> Instant {
        let slot = self.claim();
        tokio::time::sleep_until(slot.into()).await;
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_evenly_spaced() {
        let start = Instant::now();
        let pacer = Pacer::starting_at(1000.0, start).unwrap();
        assert_eq!(pacer.claim(), start);
        assert_eq!(pacer.claim(), start + Duration::from_millis(1));
        assert_eq!(pacer.claim(), start + Duration::from_millis(2));
    }

    #[test]
    fn invalid_rates_disable_pacing() {
        assert!(Pacer::new(0.0).is_none());
        assert!(Pacer::new(-5.0).is_none());
        assert!(Pacer::new(f64::NAN).is_none());
        assert!(Pacer::new(f64::INFINITY).is_none());
    }
}
