//! Waiting for a partition to have something to lease, on its leader. A pull through a node
//! without a replica of the partition cannot watch it; it asks the leader (a forwarded
//! `QueueWait`) to wait there, up to the pull's remaining time, and asks for a lease again
//! when that answers: when a lease could get something (a new message, an applied queue command
//! that freed one, a retry or lease deadline coming due), when the leader stops leading, or at
//! the deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::fetch::MAX_WAIT;
use crate::topics::now_ms;
use herald_domain::subscriptions::RetryPolicy;
use herald_raft::PartitionReplica;

/// Nothing tells a waiting leader that it stopped leading; it checks this often, so a waiter
/// moves on to the new leader instead of sitting out the pull's whole wait.
const LEADERSHIP_RECHECK: Duration = Duration::from_secs(1);

/// Waits, on `replica` (the leader), until a lease of `subscription` could get something, or
/// `max_wait` passes, or the replica no longer leads. A subscription without state here yet
/// answers at once (its first lease sets where it starts).
pub(crate) async fn wait_here(
    replica: &PartitionReplica,
    subscription: u64,
    retry: &RetryPolicy,
    max_wait: Duration,
) {
    let deadline = Instant::now() + max_wait.min(MAX_WAIT);
    // Taken before looking, so a change between the look and the wait still wakes it.
    let mut marks = replica.subscribe();
    let mut queues = replica.delivery_view().changes();
    loop {
        marks.borrow_and_update();
        queues.borrow_and_update();
        if !replica.is_leader() {
            return;
        }
        let now = now_ms();
        let high_watermark = replica.watermarks().high_watermark;
        let due = replica
            .delivery_view()
            .read(|states| match states.get(&subscription) {
                None => Some(now),
                Some(state) => state.next_deliverable(now, high_watermark, retry),
            });
        let mut wake = deadline.min(Instant::now() + LEADERSHIP_RECHECK);
        match due {
            Some(at) if at <= now => return,
            Some(at) => {
                wake = wake.min(Instant::now() + Duration::from_millis((at - now) as u64));
            }
            None => {}
        }
        if Instant::now() >= deadline {
            return;
        }
        tokio::select! {
            changed = marks.changed() => if changed.is_err() { return },
            changed = queues.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}
