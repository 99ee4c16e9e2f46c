//! A partition's share of each subscription's delivery state (see `docs/queues.md`): what is
//! done, what is leased to whom until when, what waits for a retry. Replicated by the
//! partition's own raft group, so it scales and fails over with the partition.
//!
//! Every command carries the proposer's clock (`now_ms`) and the leader decides nothing
//! outside apply: which offsets a lease takes is chosen here, from the replicated state and the
//! command, so every replica leases the same offsets and two pulls can never both get one.
//! The lease token is the raft index of the lease entry: unique, and the same on every replica.
//! What apply needs to know of new messages (key, `deliver_at`, `expires_at`) it cannot read
//! from the log (entries of its own batch may not be stored yet): the leader reads them before
//! proposing and the lease carries them as [`LeaseFacts`]; apply leases no new offset past them.
//!
//! Memory is bounded: per subscription, only offsets in `[acked_through, read_position)` that
//! are not done have an entry, and there are at most [`MAX_WINDOW`] of them (no new offset is
//! read into the state while it is full). A message waiting for its `deliver_at` costs its one
//! entry, not the offsets read after it: one message due in an hour does not stop its
//! partition once 10,000 later ones were read. The backlog beyond `read_position` is the log
//! itself.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::subscriptions_lease::{key_hash, LeaseFacts, MessageFacts};
use herald_domain::subscriptions::RetryPolicy;

/// How many offsets read and not done (leased, waiting for a retry or their `deliver_at`) a
/// subscription may have on one partition. Bounds each subscription's state per partition
/// (memory, row size).
pub const MAX_WINDOW: u64 = 10_000;

/// Why a message left a subscription for the dead-letter topic (`herald-dlq-reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeadLetterReason {
    /// Delivered `max_delivery_attempts` times without an ack.
    MaxAttempts,
    /// Its `expires_at` passed before it could be delivered.
    Expired,
    /// Nacked with `dead_letter: true`.
    Nacked,
}

impl DeadLetterReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::MaxAttempts => "max_attempts",
            DeadLetterReason::Expired => "expired",
            DeadLetterReason::Nacked => "nacked",
        }
    }
}

/// A message leased to the proposer to publish to the dead-letter topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub offset: u64,
    /// How many times it was delivered (0: never, e.g. expired before its first delivery).
    pub attempt: u32,
    pub reason: DeadLetterReason,
}

/// How long a message nacked to the dead-letter topic is held for its publisher before the
/// next lease publishes it instead.
pub const DEAD_LETTER_LEASE_MS: u64 = 30_000;

/// A lease named by an ack id: which delivery of which offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRef {
    pub offset: u64,
    pub attempt: u32,
    pub token: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryCommand {
    /// Leases up to `max_messages` deliverable offsets: redeliveries first (expired leases and
    /// due retries, oldest offset first), then new offsets from the read position.
    Lease {
        subscription: u64,
        now_ms: i64,
        max_messages: u32,
        ack_deadline_ms: u64,
        /// Where the subscription starts on this partition if it never read it.
        start_offset: u64,
        retry: RetryPolicy,
        /// A redelivery past this many attempts is leased for dead-lettering instead. `Some`
        /// exactly when the subscription has a dead-letter topic.
        max_attempts: Option<u32>,
        /// `ordering: key`: a key's next message waits while an earlier one is pending.
        key_ordering: bool,
        /// Filled in by the leader: new offsets are leased only as far as these reach.
        facts: LeaseFacts,
    },
    Ack {
        subscription: u64,
        now_ms: i64,
        leases: Vec<LeaseRef>,
    },
    /// Live leases come back after `delay_ms`, or the retry policy's backoff without one.
    Nack {
        subscription: u64,
        now_ms: i64,
        leases: Vec<LeaseRef>,
        delay_ms: Option<u64>,
        retry: RetryPolicy,
        /// Send them to the dead-letter topic instead (reason `nacked`): they are leased to
        /// the proposer to publish, and to the next lease if it does not confirm.
        dead_letter: bool,
    },
    Extend {
        subscription: u64,
        now_ms: i64,
        leases: Vec<LeaseRef>,
        ack_deadline_ms: u64,
    },
    /// Dead-letter leases whose message is in the dead-letter topic now: they are done.
    DeadLettered {
        subscription: u64,
        now_ms: i64,
        leases: Vec<LeaseRef>,
    },
    /// The subscription restarts at `offset` (clamped to the log): everything before is done,
    /// every lease and individual ack is dropped, messages from it are delivered again.
    Seek {
        subscription: u64,
        now_ms: i64,
        offset: u64,
    },
    /// The subscription was deleted: its state here goes.
    Forget { subscription: u64 },
}

impl DeliveryCommand {
    pub fn subscription(&self) -> u64 {
        match self {
            DeliveryCommand::Lease { subscription, .. }
            | DeliveryCommand::Ack { subscription, .. }
            | DeliveryCommand::Nack { subscription, .. }
            | DeliveryCommand::Extend { subscription, .. }
            | DeliveryCommand::DeadLettered { subscription, .. }
            | DeliveryCommand::Seek { subscription, .. }
            | DeliveryCommand::Forget { subscription } => *subscription,
        }
    }

    /// Sets the clock: the leader stamps its own when it proposes.
    pub fn set_now(&mut self, now: i64) {
        match self {
            DeliveryCommand::Lease { now_ms, .. }
            | DeliveryCommand::Ack { now_ms, .. }
            | DeliveryCommand::Nack { now_ms, .. }
            | DeliveryCommand::Extend { now_ms, .. }
            | DeliveryCommand::DeadLettered { now_ms, .. }
            | DeliveryCommand::Seek { now_ms, .. } => *now_ms = now,
            DeliveryCommand::Forget { .. } => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryOutcome {
    Leased {
        /// Deliveries to hand out: (offset, attempt).
        deliveries: Vec<(u64, u32)>,
        /// Messages leased to the proposer to publish to the dead-letter topic.
        dead_letters: Vec<DeadLetter>,
        token: u64,
        deadline_ms: i64,
    },
    /// Per lease of the command, in order: whether it was live (and so acked, nacked,
    /// extended or dead-lettered) or had expired (nothing changed).
    Settled {
        live: Vec<bool>,
    },
    /// A nack to the dead-letter topic: like `Settled`, and the live ones are leased under
    /// `token` to the proposer, to publish.
    NackedToDeadLetter {
        live: Vec<bool>,
        token: u64,
    },
    /// Where the subscription restarts on this partition.
    Sought {
        offset: u64,
    },
    Forgotten,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub token: u64,
    pub deadline_ms: i64,
}

/// An offset read and not done: delivered, or waiting for its first delivery (attempt 0: its
/// key is blocked, or its `deliver_at` is ahead).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// How many times it was delivered.
    pub attempt: u32,
    /// Held by a puller (until the deadline), or `None` when nacked or never delivered.
    pub lease: Option<Lease>,
    /// Without a lease: not delivered before this (a nack's delay, or `deliver_at`).
    pub not_before_ms: i64,
    pub key_hash: Option<u64>,
    pub expires_at_ms: Option<i64>,
    /// Nacked to the dead-letter topic: published, not delivered, when next leased.
    pub dead_letter: Option<DeadLetterReason>,
}

impl Delivery {
    pub fn is_leased_at(&self, now_ms: i64) -> bool {
        self.lease.is_some_and(|lease| now_ms < lease.deadline_ms)
    }

    /// When it may be delivered again: after its deadline plus the backoff, or when a nack
    /// said.
    pub fn deliverable_at(&self, offset: u64, retry: &RetryPolicy) -> i64 {
        match self.lease {
            Some(lease) => lease
                .deadline_ms
                .saturating_add(backoff_ms(retry, offset, self.attempt) as i64),
            None => self.not_before_ms,
        }
    }
}

/// The backoff after `attempt` failed deliveries: `min_backoff_ms` doubled per attempt, capped
/// at `max_backoff_ms`, less up to a fifth of jitter (never below `min_backoff_ms`). The
/// jitter is a hash of offset and attempt, so every replica computes the same.
pub fn backoff_ms(retry: &RetryPolicy, offset: u64, attempt: u32) -> u64 {
    let doublings = attempt.saturating_sub(1).min(40);
    let base = retry
        .min_backoff_ms
        .saturating_mul(1u64 << doublings)
        .min(retry.max_backoff_ms)
        .max(retry.min_backoff_ms);
    let low = (base - base / 5).max(retry.min_backoff_ms);
    let spread = base - low;
    if spread == 0 {
        return base;
    }
    let mut hash = offset
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(attempt).wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
    hash ^= hash >> 31;
    low + hash % (spread + 1)
}

/// One subscription's state on one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionPartition {
    /// Every offset below is done (acked or dead-lettered).
    pub acked_through: u64,
    /// The next offset never delivered.
    pub read_position: u64,
    /// Offsets in `[acked_through, read_position)` not done; the others in that range were
    /// acked individually.
    pub pending: BTreeMap<u64, Delivery>,
    pub dead_lettered: u64,
    /// The ordering the last lease asked for (so a waiting pull knows what blocks).
    pub key_ordering: bool,
}

/// Counts for `GET /v1/subscriptions/{sub}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryCounts {
    /// Messages not done: never delivered, or delivered and not acked.
    pub backlog: u64,
    pub in_flight: u64,
    /// Delivered, not held, waiting for their retry.
    pub delayed: u64,
    pub dead_lettered: u64,
}

impl SubscriptionPartition {
    pub(super) fn start(start_offset: u64) -> Self {
        SubscriptionPartition {
            acked_through: start_offset,
            read_position: start_offset,
            ..Default::default()
        }
    }

    /// Retention removed offsets below `log_start`: they are gone, done or not.
    fn follow_log_start(&mut self, log_start: u64) {
        if self.acked_through < log_start {
            self.pending = self.pending.split_off(&log_start);
            self.acked_through = log_start;
            self.read_position = self.read_position.max(log_start);
        }
    }

    /// Whether a new offset may be read into the state: fewer than [`MAX_WINDOW`] entries.
    pub(super) fn has_room(&self) -> bool {
        (self.pending.len() as u64) < MAX_WINDOW
    }

    pub(super) fn advance(&mut self) {
        self.acked_through = self
            .pending
            .keys()
            .next()
            .copied()
            .unwrap_or(self.read_position);
    }

    /// Applies `change` to each lease that is live (same delivery, same token, before its
    /// deadline); answers which were.
    fn settle(
        &mut self,
        now_ms: i64,
        leases: &[LeaseRef],
        mut change: impl FnMut(&mut Self, u64),
    ) -> Vec<bool> {
        let live: Vec<bool> = leases
            .iter()
            .map(|lease| {
                let live = self.pending.get(&lease.offset).is_some_and(|delivery| {
                    delivery.attempt == lease.attempt
                        && delivery.lease.is_some_and(|held| {
                            held.token == lease.token && now_ms < held.deadline_ms
                        })
                });
                if live {
                    change(self, lease.offset);
                }
                live
            })
            .collect();
        self.advance();
        live
    }

    pub fn counts(&self, now_ms: i64, high_watermark: u64) -> DeliveryCounts {
        let in_flight = self
            .pending
            .values()
            .filter(|delivery| delivery.is_leased_at(now_ms))
            .count() as u64;
        // Delayed: waiting for a time (a retry's backoff, a nack's delay, a `deliver_at`). A
        // message only waiting for its key's turn is backlog, not delayed.
        let delayed = self
            .pending
            .values()
            .filter(|delivery| {
                !delivery.is_leased_at(now_ms)
                    && (delivery.lease.is_some() || delivery.not_before_ms > now_ms)
            })
            .count() as u64;
        DeliveryCounts {
            backlog: high_watermark.saturating_sub(self.read_position) + self.pending.len() as u64,
            in_flight,
            delayed,
            dead_lettered: self.dead_lettered,
        }
    }

    /// Whether a lease now could get anything, and otherwise the earliest time it could
    /// (`None`: only a new message can make it).
    pub fn next_deliverable(
        &self,
        now_ms: i64,
        high_watermark: u64,
        retry: &RetryPolicy,
    ) -> Option<i64> {
        if self.read_position < high_watermark && self.has_room() {
            return Some(now_ms);
        }
        let mut keys = std::collections::BTreeSet::new();
        self.pending
            .iter()
            // A key's later messages wait for an ack or a nack of its first, which wakes.
            .filter(|(_, delivery)| self.first_of_key(&mut keys, delivery))
            .map(|(offset, delivery)| match delivery.lease {
                Some(lease) if now_ms < lease.deadline_ms => lease
                    .deadline_ms
                    .max(delivery.deliverable_at(*offset, retry)),
                _ => delivery.deliverable_at(*offset, retry),
            })
            .min()
    }

    /// Whether `delivery` is the first pending one of its key (in offset order, given the keys
    /// seen so far), so it may be leased; always with key ordering off or without a key.
    pub(super) fn first_of_key(
        &self,
        seen: &mut std::collections::BTreeSet<u64>,
        delivery: &Delivery,
    ) -> bool {
        match delivery.key_hash {
            Some(key) if self.key_ordering => seen.insert(key),
            _ => true,
        }
    }
}

/// Every subscription's state on one partition, by subscription id.
pub type DeliveryStates = BTreeMap<u64, SubscriptionPartition>;

/// Applies a queue command at raft `index`, against the partition's log bounds. Answers the
/// outcome and the subscription whose state changed (to persist), if any.
pub fn apply(
    states: &mut DeliveryStates,
    index: u64,
    command: &DeliveryCommand,
    log_start: u64,
    high_watermark: u64,
) -> DeliveryOutcome {
    let subscription = command.subscription();
    if let DeliveryCommand::Forget { .. } = command {
        states.remove(&subscription);
        return DeliveryOutcome::Forgotten;
    }
    if let DeliveryCommand::Seek { offset, .. } = command {
        let offset = (*offset).clamp(log_start, high_watermark);
        let state = states.entry(subscription).or_default();
        *state = SubscriptionPartition {
            dead_lettered: state.dead_lettered,
            key_ordering: state.key_ordering,
            ..SubscriptionPartition::start(offset)
        };
        return DeliveryOutcome::Sought { offset };
    }
    if let DeliveryCommand::Lease { start_offset, .. } = command {
        states.entry(subscription).or_insert_with(|| {
            SubscriptionPartition::start((*start_offset).clamp(log_start, high_watermark))
        });
    }
    let Some(state) = states.get_mut(&subscription) else {
        // Nothing was ever leased here: no lease can be live.
        let leases = match command {
            DeliveryCommand::Ack { leases, .. }
            | DeliveryCommand::Nack { leases, .. }
            | DeliveryCommand::Extend { leases, .. }
            | DeliveryCommand::DeadLettered { leases, .. } => leases.len(),
            _ => 0,
        };
        return DeliveryOutcome::Settled {
            live: vec![false; leases],
        };
    };
    state.follow_log_start(log_start);
    match command {
        DeliveryCommand::Lease { .. } => state.lease(index, command, high_watermark),
        DeliveryCommand::Nack {
            now_ms,
            leases,
            dead_letter: true,
            ..
        } => {
            let deadline_ms = now_ms.saturating_add(DEAD_LETTER_LEASE_MS as i64);
            let live = state.settle(*now_ms, leases, |state, offset| {
                if let Some(delivery) = state.pending.get_mut(&offset) {
                    delivery.dead_letter = Some(DeadLetterReason::Nacked);
                    delivery.lease = Some(Lease {
                        token: index,
                        deadline_ms,
                    });
                }
            });
            DeliveryOutcome::NackedToDeadLetter { live, token: index }
        }
        DeliveryCommand::Ack { now_ms, leases, .. } => DeliveryOutcome::Settled {
            live: state.settle(*now_ms, leases, |state, offset| {
                state.pending.remove(&offset);
            }),
        },
        DeliveryCommand::Nack {
            now_ms,
            leases,
            delay_ms,
            retry,
            ..
        } => DeliveryOutcome::Settled {
            live: state.settle(*now_ms, leases, |state, offset| {
                if let Some(delivery) = state.pending.get_mut(&offset) {
                    let delay =
                        delay_ms.unwrap_or_else(|| backoff_ms(retry, offset, delivery.attempt));
                    delivery.lease = None;
                    delivery.not_before_ms = now_ms.saturating_add(delay as i64);
                }
            }),
        },
        DeliveryCommand::Extend {
            now_ms,
            leases,
            ack_deadline_ms,
            ..
        } => DeliveryOutcome::Settled {
            live: state.settle(*now_ms, leases, |state, offset| {
                if let Some(lease) = state
                    .pending
                    .get_mut(&offset)
                    .and_then(|delivery| delivery.lease.as_mut())
                {
                    lease.deadline_ms = now_ms.saturating_add(*ack_deadline_ms as i64);
                }
            }),
        },
        DeliveryCommand::DeadLettered { now_ms, leases, .. } => DeliveryOutcome::Settled {
            live: state.settle(*now_ms, leases, |state, offset| {
                state.pending.remove(&offset);
                state.dead_lettered += 1;
            }),
        },
        DeliveryCommand::Seek { .. } | DeliveryCommand::Forget { .. } => DeliveryOutcome::Forgotten,
    }
}
