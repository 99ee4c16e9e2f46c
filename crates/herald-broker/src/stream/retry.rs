//! The one retry policy of every push stream (topic tails, queue lease streams, group member
//! streams; over WebSocket and server-sent events): which errors a stream rides out, and how
//! long it waits before asking again.
//!
//! A stream outlives leadership changes: while a partition or a group coordinator has no
//! leader (`no_leader`), while the node that led it is gone (`unavailable`), and while a dying
//! or newly elected leader cannot answer in time (`timeout`, `overloaded`), the stream keeps
//! its state (its resume position, its leases, its membership) and asks again with a backoff
//! doubling from [`RETRY_MIN`] to [`RETRY_MAX`]. It never gives up on these while its client
//! is connected: a failover that takes a minute costs a minute of delivery, not the stream.
//! Any other error lasts (a deleted topic, a removed subscription) and ends the stream.

use std::time::Duration;

use crate::BrokerError;

/// The first and longest pause after a transient error.
pub const RETRY_MIN: Duration = Duration::from_millis(100);
pub const RETRY_MAX: Duration = Duration::from_secs(2);

/// Streams' retries after a transient error, by the kind of stream (`topic`, `queue`,
/// `group`) and the error's code.
pub const STREAM_RETRIES_TOTAL: &str = "herald_stream_retries_total";

/// Worth retrying: the partition or group will have a leader, or answer, again.
pub fn is_transient(error: &BrokerError) -> bool {
    matches!(
        error,
        BrokerError::NoLeader(_)
            | BrokerError::Unavailable(_)
            | BrokerError::Timeout(_)
            | BrokerError::Overloaded(_)
    )
}

/// One stream's backoff: doubles after each transient error, back to the start after a
/// success.
#[derive(Debug, Clone)]
pub struct Retry {
    kind: &'static str,
    pause: Duration,
}

impl Retry {
    /// A policy for a stream of `kind` (a metric label: `topic`, `queue`, `group`).
    pub fn new(kind: &'static str) -> Retry {
        Retry {
            kind,
            pause: RETRY_MIN,
        }
    }

    /// The stream got an answer: the next error waits [`RETRY_MIN`] again.
    pub fn succeeded(&mut self) {
        self.pause = RETRY_MIN;
    }

    /// After an error: waits and answers `true` when it is transient (ask again, state
    /// unchanged); answers `false` at once when it lasts (the stream ends with it).
    pub async fn after(&mut self, error: &BrokerError) -> bool {
        if !is_transient(error) {
            return false;
        }
        self.pause(error).await;
        true
    }

    /// Counts a retry after `error` and waits before it (for a caller that decided itself
    /// that `error` is worth asking again, e.g. a read past a new leader's end).
    pub async fn pause(&mut self, error: &BrokerError) {
        metrics::counter!(
            STREAM_RETRIES_TOTAL,
            "kind" => self.kind,
            "code" => error.code().as_str()
        )
        .increment(1);
        tracing::debug!(kind = self.kind, %error, pause_ms = self.pause.as_millis() as u64, "stream retries");
        tokio::time::sleep(self.next_pause()).await;
    }

    /// The pause before the next attempt; doubles the one after it, up to [`RETRY_MAX`].
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.pause;
        self.pause = (self.pause * 2).min(RETRY_MAX);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_are_the_failover_ones() {
        for error in [
            BrokerError::NoLeader("p".into()),
            BrokerError::Unavailable("n".into()),
            BrokerError::Timeout("t".into()),
            BrokerError::Overloaded("o".into()),
        ] {
            assert!(is_transient(&error), "{error}");
        }
        for error in [
            BrokerError::TopicNotFound("t".into()),
            BrokerError::InvalidRequest("x".into()),
            BrokerError::Internal("i".into()),
        ] {
            assert!(!is_transient(&error), "{error}");
        }
    }

    #[test]
    fn backoff_doubles_to_its_bound_and_resets() {
        let mut retry = Retry::new("queue");
        let pauses: Vec<Duration> = (0..8).map(|_| retry.next_pause()).collect();
        assert_eq!(pauses[0], RETRY_MIN);
        assert_eq!(pauses[1], RETRY_MIN * 2);
        assert!(pauses.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(*pauses.last().expect("pauses"), RETRY_MAX);
        retry.succeeded();
        assert_eq!(retry.next_pause(), RETRY_MIN);
    }

    #[tokio::test]
    async fn a_lasting_error_is_not_retried() {
        let mut retry = Retry::new("topic");
        assert!(!retry.after(&BrokerError::TopicNotFound("t".into())).await);
        assert!(retry.after(&BrokerError::Timeout("t".into())).await);
        // The lasting error did not consume a step of the backoff; the timeout did.
        assert_eq!(retry.next_pause(), RETRY_MIN * 2);
    }
}
