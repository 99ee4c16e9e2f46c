//! Acks, nacks and extensions: each names leases by ack id; a lease that expired or was
//! leased again is answered `expired` and nothing changes for it (fenced by the attempt and
//! the lease token, checked in the partition's apply).

use std::collections::BTreeMap;

use futures::future::join_all;

use super::ack_id::AckId;
use super::QueueService;
use crate::broker::topics::now_ms;
use crate::broker::{BrokerError, BrokerResult};
use crate::domain::subscriptions::{
    SubscriptionMeta, MAX_ACK_DEADLINE_MS, MAX_BACKOFF_MS, MIN_ACK_DEADLINE_MS,
};
use crate::raft::{LeaseRef, QueueCommand, QueueOutcome};

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
    Nack { delay_ms: Option<u64> },
    Extend { ack_deadline_ms: u64 },
}

impl QueueService {
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
            _ => {}
        }
        let meta = self.get(name)?;
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
                let outcome = self.broker.queue_on_leader(group, command).await;
                (leases, outcome)
            }
        });
        let mut live = vec![false; ack_ids.len()];
        let mut failure = None;
        for (leases, outcome) in join_all(calls).await {
            match outcome {
                Ok(QueueOutcome::Settled { live: flags }) if flags.len() == leases.len() => {
                    for ((position, _), flag) in leases.iter().zip(flags) {
                        live[*position] = flag;
                    }
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
        if let Settle::Ack = settle {
            metrics::counter!("herald_subscription_acks_total", "subscription" => name.to_string())
                .increment(settled.done.len() as u64);
        }
        Ok(settled)
    }

    fn partition_groups(&self, meta: &SubscriptionMeta) -> BrokerResult<Vec<u64>> {
        let metadata = self.broker.cluster().metadata();
        let topic = metadata
            .topics
            .get(&meta.config.topic)
            .ok_or_else(|| BrokerError::TopicNotFound(meta.config.topic.clone()))?;
        Ok(topic.partitions.iter().map(|p| p.group_id).collect())
    }
}

fn command(meta: &SubscriptionMeta, settle: Settle, leases: Vec<LeaseRef>) -> QueueCommand {
    let subscription = meta.id;
    let now_ms = now_ms();
    match settle {
        Settle::Ack => QueueCommand::Ack {
            subscription,
            now_ms,
            leases,
        },
        Settle::Nack { delay_ms } => QueueCommand::Nack {
            subscription,
            now_ms,
            leases,
            delay_ms,
            retry: meta.config.retry_policy,
        },
        Settle::Extend { ack_deadline_ms } => QueueCommand::Extend {
            subscription,
            now_ms,
            leases,
            ack_deadline_ms,
        },
    }
}
