//! The number of messages a run still has to move, shared by its workers.
//!
//! Workers take work in chunks (a batch) from one atomic counter, so the run does exactly
//! `--messages` messages however many workers there are, without a coordinator task.

use std::sync::atomic::{AtomicU64, Ordering};

/// Messages left to produce or consume.
#[derive(Debug)]
pub struct Budget {
    remaining: AtomicU64,
}

impl Budget {
    pub fn new(total: u64) -> Self {
        Budget {
            remaining: AtomicU64::new(total),
        }
    }

    /// Takes up to `max` messages; 0 means the budget is spent.
    pub fn take(&self, max: u64) -> u64 {
        let taken = self
            .remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                (left > 0).then(|| left - left.min(max))
            });
        match taken {
            Ok(before) => before.min(max),
            Err(_) => 0,
        }
    }

    /// Returns messages taken but not used (a read that found fewer than it asked for).
    pub fn give_back(&self, unused: u64) {
        if unused > 0 {
            self.remaining.fetch_add(unused, Ordering::Relaxed);
        }
    }

    /// Stops every worker at its next `take`.
    pub fn exhaust(&self) {
        self.remaining.store(0, Ordering::Relaxed);
    }

    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_full_chunks_then_the_remainder() {
        let budget = Budget::new(2500);
        assert_eq!(budget.take(1000), 1000);
        assert_eq!(budget.take(1000), 1000);
        assert_eq!(budget.take(1000), 500);
        assert_eq!(budget.take(1000), 0);
        budget.give_back(7);
        assert_eq!(budget.take(1000), 7);
        assert_eq!(budget.remaining(), 0);
    }

    #[test]
    fn exhaust_stops_takers() {
        let budget = Budget::new(10);
        budget.exhaust();
        assert_eq!(budget.take(1), 0);
    }
}
