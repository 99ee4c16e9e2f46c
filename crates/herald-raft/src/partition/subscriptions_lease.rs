//! Which offsets a lease takes (see `subscriptions.rs`): first what was read before and is due
//! (redeliveries, messages whose `deliver_at` came, whose key's turn came, and messages to
//! dead-letter), oldest offset first; then new offsets from the read position, as far as the
//! leader's facts reach. With key ordering only the first pending message of each key may be
//! leased; a new offset that cannot be leased yet (key blocked, `deliver_at` ahead) is still
//! read into `pending` (attempt 0, no lease), so the read position moves past it and the next
//! leases find it there.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::subscriptions::{
    DeadLetter, DeadLetterReason, Delivery, DeliveryCommand, DeliveryOutcome, Lease,
    SubscriptionPartition,
};

/// What a leader knows of a new message when it proposes a lease: enough for apply to decide
/// (per-key ordering, delay, expiry) without reading the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageFacts {
    /// [`key_hash`] of the message's key; `None` for an unkeyed message (never ordered).
    pub key_hash: Option<u64>,
    pub deliver_at_ms: Option<i64>,
    pub expires_at_ms: Option<i64>,
}

/// Facts of consecutive offsets from `first_offset`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFacts {
    pub first_offset: u64,
    pub messages: Vec<MessageFacts>,
}

impl LeaseFacts {
    pub fn get(&self, offset: u64) -> Option<MessageFacts> {
        let index = usize::try_from(offset.checked_sub(self.first_offset)?).ok()?;
        self.messages.get(index).copied()
    }
}

/// A fixed hash of a key's bytes (64-bit FNV-1a): the same on every node and every build, as
/// apply compares the hashes replicas stored.
pub fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl SubscriptionPartition {
    pub(super) fn lease(
        &mut self,
        token: u64,
        command: &DeliveryCommand,
        high_watermark: u64,
    ) -> DeliveryOutcome {
        let DeliveryCommand::Lease {
            now_ms,
            max_messages,
            ack_deadline_ms,
            retry,
            max_attempts,
            key_ordering,
            ref facts,
            ..
        } = *command
        else {
            return DeliveryOutcome::Settled { live: Vec::new() };
        };
        self.key_ordering = key_ordering;
        let has_dead_letter_topic = max_attempts.is_some();
        let max = max_messages as usize;
        let deadline_ms = now_ms.saturating_add(ack_deadline_ms as i64);
        let lease = Some(Lease { token, deadline_ms });
        let mut deliveries = Vec::new();
        let mut dead_letters = Vec::new();
        // Expired or nacked to a dead-letter topic that is no longer there: done.
        let mut dropped = Vec::new();
        let mut keys = BTreeSet::new();

        // Why a due message goes to the dead-letter topic instead of a puller, if it does.
        let dead_letter_reason = |delivery: &Delivery| {
            if let Some(reason) = delivery.dead_letter {
                Some(reason)
            } else if delivery.expires_at_ms.is_some_and(|at| at <= now_ms) {
                Some(DeadLetterReason::Expired)
            } else if max_attempts.is_some_and(|max| delivery.attempt >= max) {
                Some(DeadLetterReason::MaxAttempts)
            } else {
                None
            }
        };

        let offsets: Vec<u64> = self.pending.keys().copied().collect();
        for offset in offsets {
            let delivery = self.pending[&offset];
            // Every pending message counts for its key, taken now or not: the scan goes on
            // when the lease is full so the new offsets below see every blocked key.
            if !self.first_of_key(&mut keys, &delivery)
                || deliveries.len() + dead_letters.len() >= max
                || delivery.is_leased_at(now_ms)
                || delivery.deliverable_at(offset, &retry) > now_ms
            {
                continue;
            }
            let Some(delivery) = self.pending.get_mut(&offset) else {
                continue;
            };
            match dead_letter_reason(delivery) {
                Some(reason) if has_dead_letter_topic => {
                    delivery.lease = lease;
                    dead_letters.push(DeadLetter {
                        offset,
                        attempt: delivery.attempt,
                        reason,
                    });
                }
                Some(_) => dropped.push(offset),
                None => {
                    delivery.lease = lease;
                    delivery.attempt += 1;
                    deliveries.push((offset, delivery.attempt));
                }
            }
        }

        while deliveries.len() + dead_letters.len() < max
            && self.read_position < high_watermark
            && self.has_room()
        {
            let offset = self.read_position;
            let Some(fact) = facts.get(offset) else {
                break;
            };
            self.read_position += 1;
            let mut delivery = Delivery {
                not_before_ms: fact.deliver_at_ms.unwrap_or(0),
                key_hash: fact.key_hash,
                expires_at_ms: fact.expires_at_ms,
                ..Delivery::default()
            };
            if self.first_of_key(&mut keys, &delivery) && delivery.not_before_ms <= now_ms {
                match dead_letter_reason(&delivery) {
                    Some(reason) if has_dead_letter_topic => {
                        delivery.lease = lease;
                        dead_letters.push(DeadLetter {
                            offset,
                            attempt: 0,
                            reason,
                        });
                    }
                    // Expired, nowhere to send it: done without being stored.
                    Some(_) => continue,
                    None => {
                        delivery.lease = lease;
                        delivery.attempt = 1;
                        deliveries.push((offset, 1));
                    }
                }
            }
            self.pending.insert(offset, delivery);
        }
        for offset in dropped {
            self.pending.remove(&offset);
        }
        self.advance();
        DeliveryOutcome::Leased {
            deliveries,
            dead_letters,
            token,
            deadline_ms,
        }
    }
}
