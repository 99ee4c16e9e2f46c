//! How long a client connection's writes have been blocked: the client reads nothing, so the
//! socket's send buffer stays full. An event stream (or any answer) to such a client is
//! backpressure, not a reason to drop it: the stream is not read further while it cannot be
//! written. Only a client that reads nothing at all for `client_stall_timeout_ms` is closed
//! (`connections`), counted in [`STALLED_CONNECTIONS_TOTAL`](crate::api::server::connections::STALLED_CONNECTIONS_TOTAL).

use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

/// A connection's write state, shared by its stream (which records it) and its timer.
#[derive(Debug)]
pub struct WriteStall {
    started: Instant,
    /// Since when (ms after `started`, plus one) a write waits for the socket; 0: none does.
    blocked_since: AtomicU64,
}

impl Default for WriteStall {
    fn default() -> Self {
        WriteStall {
            started: Instant::now(),
            blocked_since: AtomicU64::new(0),
        }
    }
}

impl WriteStall {
    /// Records what a write (or flush) of the socket answered.
    pub fn record<T>(&self, poll: &Poll<T>) {
        match poll {
            Poll::Pending => {
                let now = self.started.elapsed().as_millis() as u64 + 1;
                let _ = self.blocked_since.compare_exchange(
                    0,
                    now,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
            Poll::Ready(_) => self.blocked_since.store(0, Ordering::Release),
        }
    }

    /// How long a write has waited for the client, if one waits.
    pub fn blocked_for(&self, now: Instant) -> Option<Duration> {
        match self.blocked_since.load(Ordering::Acquire) {
            0 => None,
            since => {
                let since = self.started + Duration::from_millis(since - 1);
                Some(now.saturating_duration_since(since))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_write_counts_from_its_first_pending_until_one_goes_through() {
        let stall = WriteStall::default();
        assert_eq!(stall.blocked_for(Instant::now()), None);
        stall.record(&Poll::<()>::Pending);
        let first = stall.blocked_for(Instant::now()).expect("blocked");
        std::thread::sleep(Duration::from_millis(20));
        // A second pending does not restart the clock.
        stall.record(&Poll::<()>::Pending);
        let later = stall.blocked_for(Instant::now()).expect("blocked");
        assert!(
            later >= first + Duration::from_millis(15),
            "{first:?} {later:?}"
        );
        stall.record(&Poll::Ready(()));
        assert_eq!(stall.blocked_for(Instant::now()), None);
    }
}
