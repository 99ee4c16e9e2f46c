//! Acks, nacks and extensions: each names leases by ack id; a lease that expired or was
//! leased again is answered `expired` and nothing changes for it (fenced by the attempt and
//! the lease token, checked in the partition's apply).

use herald_domain::RaftGroupId;
use std::collections::BTreeMap;

use futures::future::join_all;

use super::ack_id::AckId;
use super::pull::Part;
use super::SubscriptionService;
use crate::topics::now_ms;
use crate::{BrokerError, BrokerResult};
use herald_domain::subscriptions::{
    SubscriptionMeta, MAX_ACK_DEADLINE_MS, MAX_BACKOFF_MS, MIN_ACK_DEADLINE_MS,
};
use herald_raft::{DeadLetter, DeadLetterReason, DeliveryCommand, DeliveryOutcome, LeaseRef};

/// The most ack ids one request names.
pub const MAX_ACK_IDS: usize = 1_000;
/// The longest nack delay: the longest backoff.
pub const MAX_NACK_DELAY_MS: u64 = MAX_BACKOFF_MS;

/// Which of a request's ack ids took effect, and which had expired; in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    pub done: Vec<String>,
    pub expired: Vec<String>,
}

/// What to do with live leases.
#[derive(Debug, Clone, Copy)]
pub enum Settle {
    Ack,
    Nack {
        delay_ms: Option<u64>,
    },
    /// Nack to the dead-letter topic (`with_delay`: the request also named a delay, which
    /// does not go with it).
    DeadLetter {
        with_delay: bool,
    },
    Extend {
        ack_deadline_ms: u64,
    },
}

impl SubscriptionService {
    pub async fn settle(
        &self,
        name: &str,
        ack_ids: Vec<String>,
        settle: Settle,
    ) -> BrokerResult<Settled> {
        if ack_ids.is_empty() || ack_ids.len() > MAX_ACK_IDS {
            return Err(BrokerError::InvalidRequest(format!(
                "ack_ids must name between 1 and {MAX_ACK_IDS} ack ids"
            )));
        }
        match settle {
            Settle::Nack {
                delay_ms: Some(delay),
            } if delay > MAX_NACK_DELAY_MS => {
                return Err(BrokerError::InvalidRequest(format!(
                    "delay_ms must be between 0 and {MAX_NACK_DELAY_MS}"
                )))
            }
            Settle::Extend { ack_deadline_ms }
                if !(MIN_ACK_DEADLINE_MS..=MAX_ACK_DEADLINE_MS).contains(&ack_deadline_ms) =>
            {
                return Err(BrokerError::InvalidRequest(format!(
                    "ack_deadline_ms must be between {MIN_ACK_DEADLINE_MS} and {MAX_ACK_DEADLINE_MS}"
                )))
            }
            Settle::DeadLetter { with_delay: true } => {
                return Err(BrokerError::InvalidRequest(
                    "delay_ms does not go with dead_letter: true (a dead-lettered message is not delivered again)".into(),
                ))
            }
            _ => {}
        }
        let meta = self.get(name)?;
        if matches!(settle, Settle::DeadLetter { .. }) && meta.config.dead_letter_policy.is_none() {
            return Err(BrokerError::InvalidRequest(format!(
                "subscription '{name}' has no dead_letter_policy: there is no dead-letter topic to nack to"
            )));
        }
        let groups = self.partition_groups(&meta)?;
        // Everything is checked before anything is proposed: a bad id changes nothing.
        let mut by_partition: BTreeMap<u32, Vec<(usize, LeaseRef)>> = BTreeMap::new();
        for (position, text) in ack_ids.iter().enumerate() {
            let id = AckId::parse(text)?;
            if id.subscription != meta.id {
                return Err(BrokerError::InvalidRequest(format!(
                    "ack_id '{text}' was not issued by subscription '{name}' (another subscription's, or one deleted since)"
                )));
            }
            if id.partition as usize >= groups.len() {
                return Err(BrokerError::InvalidRequest(format!(
                    "ack_id '{text}' names partition {} of topic '{}', which has {}",
                    id.partition,
                    meta.config.topic,
                    groups.len()
                )));
            }
            by_partition
                .entry(id.partition)
                .or_default()
                .push((position, id.lease));
        }
        let calls = by_partition.into_iter().map(|(partition, leases)| {
            let group = groups[partition as usize];
            let command = command(
                &meta,
                settle,
                leases.iter().map(|(_, lease)| *lease).collect(),
            );
            async move {
                let outcome = self.apply_on_leader(group, command).await;
                (partition, leases, outcome)
            }
        });
        let mut live = vec![false; ack_ids.len()];
        let mut failure = None;
        let mut to_dead_letter = Vec::new();
        for (partition, leases, outcome) in join_all(calls).await {
            match outcome {
                Ok(DeliveryOutcome::Settled { live: flags }) if flags.len() == leases.len() => {
                    for ((position, _), flag) in leases.iter().zip(flags) {
                        live[*position] = flag;
                    }
                }
                Ok(DeliveryOutcome::NackedToDeadLetter { live: flags, token })
                    if flags.len() == leases.len() =>
                {
                    let mut held = Vec::new();
                    for ((position, lease), flag) in leases.iter().zip(flags) {
                        live[*position] = flag;
                        if flag {
                            held.push(DeadLetter {
                                offset: lease.offset,
                                attempt: lease.attempt,
                                reason: DeadLetterReason::Nacked,
                            });
                        }
                    }
                    to_dead_letter.push((partition, held, token));
                }
                Ok(other) => {
                    failure = Some(BrokerError::Internal(format!(
                        "a settle was answered {other:?}"
                    )))
                }
                Err(error) => failure = Some(error),
            }
        }
        // A partition that failed leaves its leases as they were; with others done, the
        // caller cannot tell which took effect, so the error is answered (a retry is safe:
        // what took effect answers `expired`, and nothing is lost).
        // Published now, so a reject lands in the dead-letter topic without waiting for a pull;
        // if this fails, the messages stay marked and the next lease publishes them.
        for (partition, held, token) in to_dead_letter {
            let part = Part {
                partition,
                group: groups[partition as usize],
            };
            if let Err(error) = self.dead_letter(&meta, part, &held, token).await {
                tracing::warn!(subscription = name, partition, %error, "dead-lettering nacked messages failed; the next pull retries");
            }
        }
        if let Some(error) = failure {
            return Err(error);
        }
        let mut settled = Settled::default();
        for (text, live) in ack_ids.into_iter().zip(live) {
            match live {
                true => settled.done.push(text),
                false => settled.expired.push(text),
            }
        }
        self.lease_streams.settled(settle, &settled);
        if let Settle::Ack = settle {
            metrics::counter!("herald_subscription_acks_total", "subscription" => name.to_string())
                .increment(settled.done.len() as u64);
        }
        Ok(settled)
    }

    pub(super) fn partition_groups(
        &self,
        meta: &SubscriptionMeta,
    ) -> BrokerResult<Vec<RaftGroupId>> {
        let metadata = self.core.cluster().metadata().current();
        let topic = metadata
            .topics
            .get(&meta.config.topic)
            .ok_or_else(|| BrokerError::TopicNotFound(meta.config.topic.clone()))?;
        Ok(topic.partitions.iter().map(|p| p.group_id).collect())
    }
}

fn command(meta: &SubscriptionMeta, settle: Settle, leases: Vec<LeaseRef>) -> DeliveryCommand {
    let subscription = meta.id;
    let now_ms = now_ms();
    match settle {
        Settle::Ack => DeliveryCommand::Ack {
            subscription,
            now_ms,
            leases,
        },
        Settle::Nack { delay_ms } => DeliveryCommand::Nack {
            subscription,
            now_ms,
            leases,
            delay_ms,
            retry: meta.config.retry_policy,
            dead_letter: false,
        },
        Settle::DeadLetter { .. } => DeliveryCommand::Nack {
            subscription,
            now_ms,
            leases,
            delay_ms: None,
            retry: meta.config.retry_policy,
            dead_letter: true,
        },
        Settle::Extend { ack_deadline_ms } => DeliveryCommand::Extend {
            subscription,
            now_ms,
            leases,
            ack_deadline_ms,
        },
    }
}
