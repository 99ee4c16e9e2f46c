//! The node's memory budget as the broker sees it: the bytes of records that produce requests
//! hold while their batches are queued, replicated and written, and the estimated footprint of
//! open push subscriptions (`streams`). The share comes from
//! `[storage] memory_budget_bytes` (see `config::StorageConfig`); the block cache and the
//! memtables, the other parts, are bounded in `storage`.
//!
//! A request that does not fit is refused at once with 503 `overloaded` and `Retry-After`,
//! before anything is queued: under a disk slower than the producers, the memtables make
//! writes wait, the queues fill, and new requests are turned away instead of the heap growing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod streams;
pub use streams::{StreamKind, StreamMemory};

use super::BrokerError;
use herald_telemetry::handles::OnceHandle;

/// The bytes of records held by produce requests on this node, against a bound.
#[derive(Debug)]
pub(crate) struct ProduceMemory {
    limit: usize,
    held: AtomicUsize,
}

/// Bytes taken from [`ProduceMemory`]; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    memory: Arc<ProduceMemory>,
    bytes: usize,
}

impl ProduceMemory {
    pub(crate) fn new(limit: usize) -> Arc<ProduceMemory> {
        Arc::new(ProduceMemory {
            limit,
            held: AtomicUsize::new(0),
        })
    }

    /// Takes `bytes`, or refuses with `overloaded` when they would take the held bytes past the
    /// limit. A request alone on the node always fits (its size is bounded by
    /// `max_body_bytes`, which the budget's validation makes room for).
    pub(crate) fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reservation, BrokerError> {
        match self.try_reserve(bytes) {
            Some(reservation) => Ok(reservation),
            None => {
                metrics::counter!("herald_produce_overloaded_total").increment(1);
                Err(BrokerError::Overloaded(format!(
                    "produce requests and open subscriptions on this node hold {} bytes, and these {bytes} would take them past the node's share of its memory budget ({} bytes, from storage.memory_budget_bytes); nothing was written, retry later",
                    self.held.load(Ordering::Relaxed),
                    self.limit
                )))
            }
        }
    }

    fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `bytes` if they fit (or nothing else is held).
    fn try_reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            if held > 0 && held.saturating_add(bytes) > self.limit {
                return None;
            }
            match self.held.compare_exchange_weak(
                held,
                held + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        in_flight_gauge().increment(bytes as f64);
        Some(Reservation {
            memory: self.clone(),
            bytes,
        })
    }

    /// The bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.memory.held.fetch_sub(self.bytes, Ordering::AcqRel);
        in_flight_gauge().decrement(self.bytes as f64);
    }
}

/// The bytes every produce of the node holds reserved (its handle kept: it moves twice per
/// request).
fn in_flight_gauge() -> metrics::Gauge {
    static GAUGE: OnceHandle<metrics::Gauge> = OnceHandle::new();
    GAUGE.get(|| metrics::gauge!("herald_produce_in_flight_bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_past_the_limit_are_refused_until_bytes_are_given_back() {
        let memory = ProduceMemory::new(1000);
        let first = memory.reserve(600).unwrap();
        let second = memory.reserve(400).unwrap();
        assert_eq!(memory.held(), 1000);
        let refused = memory.reserve(1).unwrap_err();
        assert!(matches!(refused, BrokerError::Overloaded(_)), "{refused:?}");
        assert_eq!(memory.held(), 1000, "a refusal takes nothing");
        drop(first);
        let third = memory.reserve(600).unwrap();
        assert_eq!(memory.held(), 1000);
        drop((second, third));
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn a_request_alone_fits_even_when_larger_than_the_limit() {
        let memory = ProduceMemory::new(10);
        let alone = memory.reserve(50).unwrap();
        assert!(memory.reserve(1).is_err());
        drop(alone);
        assert_eq!(memory.held(), 0);
    }
}
