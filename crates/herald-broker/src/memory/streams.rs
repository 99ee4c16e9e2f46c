//! What push subscriptions (WebSocket subscriptions; each holds a task, a reader with a bounded
//! read-ahead, a window or a member) cost against the memory budget: each one takes a fixed
//! estimate of its footprint from the same share of `storage.memory_budget_bytes` as produced
//! records in flight, while it lives. A node at its budget refuses a new subscription with
//! `overloaded` instead of growing past it: one socket opening 25,000 subscriptions took a node
//! from 67 MB to 1.25 GB with a 1 GiB budget before this bound.
//!
//! The estimates start from a measurement (RSS of a node before and after 1,000 idle
//! subscriptions on one socket, `tests/it/streams/ws_limits.rs`: 9.3 KB a topic subscription,
//! 7.2 KB a queue one) and add room for what a delivering subscription holds besides (its
//! read-ahead, a frame being written).

use std::sync::Arc;

use super::{ProduceMemory, Reservation};
use crate::{BrokerError, BrokerResult};

/// The kinds of push subscriptions, each with its estimated footprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// A topic subscription: a tail per partition read, its task and channel.
    Topic,
    /// A consumer group member.
    Group,
    /// A queue subscription's lease window.
    Queue,
}

impl StreamKind {
    /// The bytes one subscription of this kind is counted for while it lives.
    pub fn estimated_bytes(self) -> usize {
        match self {
            StreamKind::Topic => 48 << 10,
            StreamKind::Group => 32 << 10,
            StreamKind::Queue => 32 << 10,
        }
    }
}

/// Memory a live push subscription holds against the budget; given back when dropped.
#[derive(Debug)]
pub struct StreamMemory {
    _reservation: Reservation,
}

impl ProduceMemory {
    /// Takes `bytes` for a push subscription, or refuses with `overloaded` past the budget.
    pub(crate) fn reserve_stream(self: &Arc<Self>, bytes: usize) -> BrokerResult<StreamMemory> {
        match self.try_reserve(bytes) {
            Some(reservation) => Ok(StreamMemory {
                _reservation: reservation,
            }),
            None => {
                metrics::counter!(STREAMS_REFUSED_TOTAL).increment(1);
                Err(BrokerError::Overloaded(format!(
                    "this node's share of its memory budget ({} bytes, from storage.memory_budget_bytes) is taken by produced records in flight and open subscriptions; a new subscription would take {bytes} more: retry later or on another node",
                    self.limit()
                )))
            }
        }
    }
}

/// Subscriptions refused because the node's memory budget was taken.
pub const STREAMS_REFUSED_TOTAL: &str = "herald_stream_memory_refused_total";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_take_from_the_same_budget_as_produced_records() {
        let memory = ProduceMemory::new(100 << 10);
        let first = memory.reserve_stream(48 << 10).expect("fits");
        let second = memory.reserve_stream(48 << 10).expect("fits");
        assert!(matches!(
            memory.reserve_stream(48 << 10),
            Err(BrokerError::Overloaded(_))
        ));
        // A produce is refused as well while subscriptions hold the share.
        assert!(memory.reserve(8 << 10).is_err());
        drop(first);
        assert!(memory.reserve(8 << 10).is_ok());
        drop(second);
        assert_eq!(memory.held(), 0);
    }
}
