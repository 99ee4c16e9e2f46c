//! Refusals of unauthenticated requests (401: no token, a bad one, a wrong client secret) are
//! recorded per client address and window, not one event each: anyone can make them, and
//! every event is written to the replicated `__audit` on several nodes (2,000 bad tokens grew a
//! data directory by 130 MB). The first refusal from an address in a window is recorded at
//! once, in full; the others are counted, and when the window ends one event stands for them
//! all (`count`, `since_ms`, the last one's details). So an address costs at most two events per
//! window, whatever it sends.
//!
//! At most [`MAX_ADDRESSES`] addresses have a window of their own at a time; refusals from
//! others (many addresses at once) share one, whose event names no address. A node that stops
//! loses the counts of its open windows.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::AuditEvent;

/// The most addresses with a window of their own.
pub const MAX_ADDRESSES: usize = 10_000;

/// The window of refusals from addresses beyond [`MAX_ADDRESSES`].
const OVERFLOW: &str = "";

/// The open windows, by client address.
#[derive(Debug)]
pub(super) struct RefusalWindows {
    length: Duration,
    windows: Mutex<HashMap<String, Window>>,
}

#[derive(Debug)]
struct Window {
    opened: Instant,
    /// Refusals after the first: counted, not recorded yet.
    repeats: u64,
    /// When the first of those was answered.
    first_repeat_ms: i64,
    /// The last of them, recorded for all when the window ends.
    last: Option<AuditEvent>,
}

impl RefusalWindows {
    pub(super) fn new(length: Duration) -> RefusalWindows {
        RefusalWindows {
            length,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// How often [`RefusalWindows::ended`] should be asked.
    pub(super) fn check_period(&self) -> Duration {
        (self.length / 4).clamp(Duration::from_millis(25), Duration::from_secs(1))
    }

    /// The event to record now (the first refusal of its address's window), or `None` when it
    /// is counted in its window instead.
    pub(super) fn admit(&self, event: AuditEvent, now: Instant) -> Option<AuditEvent> {
        let mut windows = self.windows.lock();
        let mut address = event.remote_addr.clone().unwrap_or_default();
        if !windows.contains_key(&address) && windows.len() >= MAX_ADDRESSES {
            address = OVERFLOW.to_string();
        }
        match windows.get_mut(&address) {
            Some(window) => {
                if window.repeats == 0 {
                    window.first_repeat_ms = event.at_ms;
                }
                window.repeats += 1;
                window.last = Some(event);
                None
            }
            None => {
                windows.insert(
                    address,
                    Window {
                        opened: now,
                        repeats: 0,
                        first_repeat_ms: 0,
                        last: None,
                    },
                );
                Some(event)
            }
        }
    }

    /// Closes the windows open for their whole length by `now`: one event for each that
    /// counted refusals, stamped `at_ms`.
    pub(super) fn ended(&self, now: Instant, at_ms: i64) -> Vec<AuditEvent> {
        let mut ended = Vec::new();
        self.windows.lock().retain(|address, window| {
            if now.duration_since(window.opened) < self.length {
                return true;
            }
            if let Some(mut last) = window.last.take() {
                last.count = Some(window.repeats);
                last.since_ms = Some(window.first_repeat_ms);
                last.at_ms = at_ms.max(last.at_ms);
                if address == OVERFLOW {
                    last.remote_addr = None;
                }
                ended.push(last);
            }
            false
        });
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::ANONYMOUS;

    fn refusal(address: &str, at_ms: i64) -> AuditEvent {
        AuditEvent {
            at_ms,
            principal: ANONYMOUS.into(),
            roles: None,
            action: "GET /v1/topics".into(),
            method: "GET".into(),
            path: "/v1/topics".into(),
            resource: "topics".into(),
            allowed: false,
            status: 401,
            remote_addr: Some(address.into()),
            request_id: format!("r{at_ms}"),
            reason: Some("no token".into()),
            node_id: 1,
            count: None,
            since_ms: None,
        }
    }

    #[test]
    fn the_first_refusal_is_recorded_and_the_rest_counted_in_one_event() {
        let windows = RefusalWindows::new(Duration::from_secs(60));
        let start = Instant::now();
        assert!(windows.admit(refusal("10.0.0.1", 1), start).is_some());
        for at in 2..=100 {
            assert!(windows.admit(refusal("10.0.0.1", at), start).is_none());
        }
        // Another address has its own window.
        assert!(windows.admit(refusal("10.0.0.2", 5), start).is_some());
        assert!(windows
            .ended(start + Duration::from_secs(59), 200)
            .is_empty());

        let ended = windows.ended(start + Duration::from_secs(60), 300);
        assert_eq!(ended.len(), 1, "10.0.0.2 refused once: nothing more to say");
        let summary = &ended[0];
        assert_eq!(summary.count, Some(99));
        assert_eq!(summary.since_ms, Some(2));
        assert_eq!(summary.at_ms, 300);
        assert_eq!(summary.request_id, "r100");
        assert_eq!(summary.remote_addr.as_deref(), Some("10.0.0.1"));

        // A new window opens with a recorded refusal again.
        assert!(windows
            .admit(refusal("10.0.0.1", 400), start + Duration::from_secs(61))
            .is_some());
    }

    #[test]
    fn addresses_beyond_the_bound_share_one_window() {
        let windows = RefusalWindows::new(Duration::from_secs(1));
        let start = Instant::now();
        for index in 0..MAX_ADDRESSES {
            let address = format!("10.{}.{}.{}", index >> 16, (index >> 8) & 255, index & 255);
            assert!(windows.admit(refusal(&address, 1), start).is_some());
        }
        // The first stranger opens the shared window; the next ones are counted in it.
        assert!(windows.admit(refusal("192.168.0.1", 2), start).is_some());
        assert!(windows.admit(refusal("192.168.0.2", 3), start).is_none());
        assert!(windows.admit(refusal("192.168.0.3", 4), start).is_none());
        let ended = windows.ended(start + Duration::from_secs(1), 10);
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].count, Some(2));
        assert_eq!(ended[0].remote_addr, None);
        assert!(windows.windows.lock().is_empty());
    }
}
