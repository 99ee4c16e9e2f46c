//! A queue subscription read as a stream (a WebSocket subscription, a server-sent event
//! stream): leases through the same pull as `POST /v1/subscriptions/{sub}/pull`, with a window
//! of at most `max_in_flight` un-settled leases per stream (Pulsar's permits).
//!
//! A lease takes a place in the window when delivered and gives it back when it is acked,
//! nacked or dead-lettered through this node (over any transport: the settle call tells the
//! node's [`LeaseStreams`]), or when its ack deadline passes (a settle through another node
//! is seen that way). An extend through this node moves the deadline the window waits for.
//! Dropping a stream nacks its outstanding leases at once (delay 0), so their messages go to
//! other consumers without waiting for the deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::pull::{PulledMessage, MAX_PULL_MESSAGES};
use super::settle::{Settle, Settled, MAX_ACK_IDS};
use super::SubscriptionService;
use crate::{BrokerError, BrokerResult};

/// The most leases one stream may hold un-settled.
pub const MAX_IN_FLIGHT: u32 = 10_000;
/// How long one pull of a stream waits for a message before it looks at its window again.
const PULL_WAIT: Duration = Duration::from_secs(5);

/// The node's lease streams by the ack ids they hold.
#[derive(Default)]
pub struct LeaseStreams {
    holders: Mutex<HashMap<String, Arc<Window>>>,
}

/// One stream's window: free places, and the deadline of each lease it holds.
struct Window {
    room: Semaphore,
    deadlines: Mutex<HashMap<String, Instant>>,
    freed: Notify,
}

impl Window {
    /// Gives back the place of `ack_id`, if this window holds it.
    fn release(&self, ack_id: &str) {
        let held = self
            .deadlines
            .lock()
            .map(|mut deadlines| deadlines.remove(ack_id).is_some())
            .unwrap_or(false);
        if held {
            self.room.add_permits(1);
            self.freed.notify_one();
        }
    }
}

impl LeaseStreams {
    /// A settle through this node took effect (`done`) or found leases expired.
    pub(super) fn settled(&self, settle: Settle, settled: &Settled) {
        let Ok(mut holders) = self.holders.lock() else {
            return;
        };
        match settle {
            Settle::Extend { ack_deadline_ms } => {
                let deadline = Instant::now() + Duration::from_millis(ack_deadline_ms);
                for ack_id in &settled.done {
                    if let Some(window) = holders.get(ack_id) {
                        if let Ok(mut deadlines) = window.deadlines.lock() {
                            if let Some(held) = deadlines.get_mut(ack_id) {
                                *held = deadline;
                            }
                        }
                    }
                }
                for ack_id in &settled.expired {
                    if let Some(window) = holders.remove(ack_id) {
                        window.release(ack_id);
                    }
                }
            }
            Settle::Ack | Settle::Nack { .. } | Settle::DeadLetter { .. } => {
                for ack_id in settled.done.iter().chain(&settled.expired) {
                    if let Some(window) = holders.remove(ack_id) {
                        window.release(ack_id);
                    }
                }
            }
        }
    }

    fn hold(&self, ack_id: &str, window: &Arc<Window>) {
        if let Ok(mut holders) = self.holders.lock() {
            holders.insert(ack_id.to_string(), window.clone());
        }
    }

    fn forget(&self, ack_ids: &[String]) {
        if let Ok(mut holders) = self.holders.lock() {
            for ack_id in ack_ids {
                holders.remove(ack_id);
            }
        }
    }
}

/// A subscription's leases as a stream; nacks what it holds when dropped.
pub struct LeaseStream {
    service: SubscriptionService,
    name: String,
    ack_deadline: Duration,
    window: Arc<Window>,
}

impl SubscriptionService {
    /// Opens a lease stream on subscription `name` with room for `max_in_flight` leases.
    pub fn open_lease_stream(&self, name: &str, max_in_flight: u32) -> BrokerResult<LeaseStream> {
        if !(1..=MAX_IN_FLIGHT).contains(&max_in_flight) {
            return Err(BrokerError::InvalidRequest(format!(
                "the window of un-acked leases must be between 1 and {MAX_IN_FLIGHT}, got {max_in_flight}"
            )));
        }
        let meta = self.get(name)?;
        Ok(LeaseStream {
            service: self.clone(),
            name: name.to_string(),
            ack_deadline: Duration::from_millis(meta.config.ack_deadline_ms),
            window: Arc::new(Window {
                room: Semaphore::new(max_in_flight as usize),
                deadlines: Mutex::new(HashMap::new()),
                freed: Notify::new(),
            }),
        })
    }
}

impl LeaseStream {
    pub fn subscription(&self) -> &str {
        &self.name
    }

    /// Widens the window by `more` leases.
    pub fn widen(&self, more: u32) -> BrokerResult<()> {
        let room = self.window.room.available_permits() as u64 + self.held() as u64;
        if more == 0 || room + u64::from(more) > u64::from(MAX_IN_FLIGHT) {
            return Err(BrokerError::InvalidRequest(format!(
                "credit must be at least 1 and keep the window of un-acked leases at most {MAX_IN_FLIGHT} (it is {room})"
            )));
        }
        self.window.room.add_permits(more as usize);
        self.window.freed.notify_one();
        Ok(())
    }

    /// How many leases the stream holds un-settled.
    pub fn held(&self) -> usize {
        self.window
            .deadlines
            .lock()
            .map(|deadlines| deadlines.len())
            .unwrap_or(0)
    }

    /// The next leases: waits for room in the window, then pulls up to the room (waiting a
    /// few seconds for a message; empty when none came).
    pub async fn next(&self) -> BrokerResult<Vec<PulledMessage>> {
        loop {
            self.reclaim_expired();
            let room = self
                .window
                .room
                .available_permits()
                .min(MAX_PULL_MESSAGES as usize);
            if room == 0 {
                let next_deadline = self.next_deadline();
                tokio::select! {
                    () = self.window.freed.notified() => {}
                    () = tokio::time::sleep_until(next_deadline) => {}
                }
                continue;
            }
            let Ok(permits) = self.window.room.try_acquire_many(room as u32) else {
                continue;
            };
            permits.forget();
            let pulled = match self.service.pull(&self.name, room as u32, PULL_WAIT).await {
                Ok(pulled) => pulled,
                Err(error) => {
                    self.window.room.add_permits(room);
                    return Err(error);
                }
            };
            self.window.room.add_permits(room - pulled.len());
            let deadline = Instant::now() + self.ack_deadline;
            if let Ok(mut deadlines) = self.window.deadlines.lock() {
                for message in &pulled {
                    deadlines.insert(message.ack_id.clone(), deadline);
                }
            }
            for message in &pulled {
                self.service
                    .lease_streams
                    .hold(&message.ack_id, &self.window);
            }
            return Ok(pulled);
        }
    }

    /// Settles leases through the same broker call as the REST API (this stream's window is
    /// told through [`LeaseStreams`], as for a REST settle on this node).
    pub async fn settle(&self, ack_ids: Vec<String>, settle: Settle) -> BrokerResult<Settled> {
        self.service.settle(&self.name, ack_ids, settle).await
    }

    /// Gives back the places of leases whose deadline passed: the broker has taken them back.
    fn reclaim_expired(&self) {
        let now = Instant::now();
        let expired: Vec<String> = match self.window.deadlines.lock() {
            Ok(mut deadlines) => {
                let expired: Vec<String> = deadlines
                    .iter()
                    .filter(|(_, deadline)| **deadline <= now)
                    .map(|(ack_id, _)| ack_id.clone())
                    .collect();
                for ack_id in &expired {
                    deadlines.remove(ack_id);
                }
                expired
            }
            Err(_) => Vec::new(),
        };
        if !expired.is_empty() {
            self.service.lease_streams.forget(&expired);
            self.window.room.add_permits(expired.len());
        }
    }

    fn next_deadline(&self) -> Instant {
        let later = Instant::now() + PULL_WAIT;
        self.window
            .deadlines
            .lock()
            .ok()
            .and_then(|deadlines| deadlines.values().min().copied())
            .map_or(later, |deadline| deadline.min(later))
    }
}

impl Drop for LeaseStream {
    fn drop(&mut self) {
        let held: Vec<String> = match self.window.deadlines.lock() {
            Ok(mut deadlines) => deadlines.drain().map(|(ack_id, _)| ack_id).collect(),
            Err(_) => return,
        };
        if held.is_empty() {
            return;
        }
        self.service.lease_streams.forget(&held);
        let service = self.service.clone();
        let name = self.name.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for chunk in held.chunks(MAX_ACK_IDS) {
                    let nack = Settle::Nack { delay_ms: Some(0) };
                    if let Err(error) = service.settle(&name, chunk.to_vec(), nack).await {
                        tracing::debug!(subscription = name, %error, "nacking a closed stream's leases failed; they expire at their deadline");
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(room: usize) -> Arc<Window> {
        Arc::new(Window {
            room: Semaphore::new(room),
            deadlines: Mutex::new(HashMap::new()),
            freed: Notify::new(),
        })
    }

    fn lease(streams: &LeaseStreams, window: &Arc<Window>, ack_id: &str) {
        let permit = window.room.try_acquire().expect("room");
        permit.forget();
        window
            .deadlines
            .lock()
            .unwrap()
            .insert(ack_id.to_string(), Instant::now() + Duration::from_secs(60));
        streams.hold(ack_id, window);
    }

    #[test]
    fn settles_through_the_node_give_places_back_once() {
        let streams = LeaseStreams::default();
        let window = window(2);
        lease(&streams, &window, "a");
        lease(&streams, &window, "b");
        assert_eq!(window.room.available_permits(), 0);
        let acked = Settled {
            done: vec!["a".into()],
            expired: vec!["unknown".into()],
        };
        streams.settled(Settle::Ack, &acked);
        assert_eq!(window.room.available_permits(), 1);
        // The same ack again (a retry) frees nothing more.
        streams.settled(Settle::Ack, &acked);
        assert_eq!(window.room.available_permits(), 1);
        // An extend keeps the place; an expired lease gives it back.
        let extended = Settled {
            done: vec!["b".into()],
            expired: vec![],
        };
        streams.settled(
            Settle::Extend {
                ack_deadline_ms: 1000,
            },
            &extended,
        );
        assert_eq!(window.room.available_permits(), 1);
        let nacked = Settled {
            done: vec![],
            expired: vec!["b".into()],
        };
        streams.settled(Settle::Nack { delay_ms: None }, &nacked);
        assert_eq!(window.room.available_permits(), 2);
        assert!(streams.holders.lock().unwrap().is_empty());
    }
}
