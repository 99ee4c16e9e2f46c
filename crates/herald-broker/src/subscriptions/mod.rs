//! Subscriptions: queue semantics on the log (see `docs/queues.md`). [`SubscriptionService`] is what
//! any transport calls (HTTP today, a WebSocket later): settings here (replicated by the
//! metadata group), delivery in the partitions' groups.

use herald_domain::RaftGroupId;
pub mod ack_id;
mod facts;
pub mod lease_stream;
pub mod message_times;
pub(crate) mod on_leader;
pub mod pull;
pub mod redrive;
pub mod redrive_runner;
pub mod seek;
pub mod settle;
pub mod stats;
pub(crate) mod wait;

pub use herald_raft::DeliveryCounts;
pub use lease_stream::{LeaseStream, MAX_IN_FLIGHT};
pub use pull::{PulledMessage, MAX_PULL_MESSAGES};
pub use redrive::RedriveRequest;
pub use redrive_runner::spawn_redrive_supervisor;
pub use seek::{SeekTarget, Sought};
pub use settle::{Settle, Settled, MAX_ACK_IDS, MAX_NACK_DELAY_MS};
pub use stats::{SubscriptionGauge, SubscriptionStats};

use super::topics::now_ms;
use std::sync::Arc;

use super::{BrokerError, BrokerResult, ErrorCode, FetchService, ProduceService};
use crate::broker_core::Core;
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_domain::names::validate_name;
use herald_domain::subscriptions::{
    SubscriptionCommand, SubscriptionConfig, SubscriptionMeta, SubscriptionOutcome,
};
use herald_raft::DeliveryCommand;

/// Subscriptions: queue semantics on the log. Settings go through the metadata group, delivery
/// state through the partitions' groups; dead letters and redrives are produced through
/// [`ProduceService`]. Owns the node's lease streams (`lease_stream`). Cheap to clone.
#[derive(Clone)]
pub struct SubscriptionService {
    core: Arc<Core>,
    fetch: FetchService,
    produce: ProduceService,
    /// The queue streams on this node, by the leases they hold.
    lease_streams: Arc<lease_stream::LeaseStreams>,
}

/// Whether a `put` created the subscription (201) or found or changed it (200).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    Updated,
    Unchanged,
}

impl SubscriptionService {
    pub(crate) fn new(
        core: Arc<Core>,
        fetch: FetchService,
        produce: ProduceService,
    ) -> SubscriptionService {
        SubscriptionService {
            core,
            fetch,
            produce,
            lease_streams: Arc::default(),
        }
    }
}

pub(crate) fn subscription_not_found(name: &str) -> BrokerError {
    BrokerError::NotFound {
        code: ErrorCode::SubscriptionNotFound,
        message: format!("subscription '{name}' does not exist"),
    }
}

fn check_name(name: &str) -> BrokerResult<()> {
    validate_name("subscription name", name).map_err(BrokerError::InvalidRequest)
}

impl SubscriptionService {
    /// Creates a subscription, or changes its settings (the topic and start are fixed).
    pub async fn put(
        &self,
        name: &str,
        config: SubscriptionConfig,
    ) -> BrokerResult<(SubscriptionMeta, PutOutcome)> {
        check_name(name)?;
        config.validate().map_err(BrokerError::InvalidRequest)?;
        let command = SubscriptionCommand::Put {
            name: name.to_string(),
            config,
            now_ms: now_ms(),
        };
        match self.propose(command).await? {
            SubscriptionOutcome::Created(meta) => Ok((meta, PutOutcome::Created)),
            SubscriptionOutcome::Updated(meta) => Ok((meta, PutOutcome::Updated)),
            SubscriptionOutcome::Unchanged(meta) => Ok((meta, PutOutcome::Unchanged)),
            other => Err(refusal(name, other)),
        }
    }

    pub async fn delete(&self, name: &str) -> BrokerResult<()> {
        check_name(name)?;
        let known = self
            .core
            .cluster()
            .metadata()
            .current()
            .subscriptions
            .get(name)
            .cloned();
        let command = SubscriptionCommand::Delete {
            name: name.to_string(),
        };
        match self.propose(command).await? {
            SubscriptionOutcome::Deleted => {}
            other => return Err(refusal(name, other)),
        }
        // Its delivery state goes too. Best effort: the id is never reused, so state left by a
        // failure here is never read, only kept (a later delete of the topic removes it).
        if let Some(meta) = known {
            let metadata = self.core.cluster().metadata().current();
            let groups: Vec<RaftGroupId> = metadata
                .topics
                .get(&meta.config.topic)
                .map(|topic| topic.partitions.iter().map(|p| p.group_id).collect())
                .unwrap_or_default();
            drop(metadata);
            for group in groups {
                let command = DeliveryCommand::Forget {
                    subscription: meta.id,
                };
                if let Err(error) = self.apply_on_leader(group, command).await {
                    tracing::debug!(subscription = name, group = group.get(), %error, "forgetting delivery state");
                }
            }
        }
        Ok(())
    }

    /// The subscription as this node has applied the metadata.
    pub fn get(&self, name: &str) -> BrokerResult<SubscriptionMeta> {
        check_name(name)?;
        self.core
            .cluster()
            .metadata()
            .current()
            .subscriptions
            .get(name)
            .cloned()
            .ok_or_else(|| subscription_not_found(name))
    }

    /// The subscription's counts over its topic's partitions and the age of its oldest
    /// message not done, from their leaders.
    pub async fn stats(&self, meta: &SubscriptionMeta) -> BrokerResult<SubscriptionStats> {
        let metadata = self.core.cluster().metadata().current();
        let Some(topic) = metadata.topics.get(&meta.config.topic) else {
            return Ok(SubscriptionStats::default());
        };
        let groups: Vec<RaftGroupId> = topic.partitions.iter().map(|p| p.group_id).collect();
        drop(metadata);
        let answers = futures::future::join_all(
            groups
                .into_iter()
                .map(|group| self.stats_on_leader(group, meta.id)),
        )
        .await;
        let mut total = SubscriptionStats::default();
        for stats in answers {
            total.add(stats?);
        }
        Ok(total)
    }

    pub fn list(&self) -> Vec<SubscriptionMeta> {
        self.core
            .cluster()
            .metadata()
            .current()
            .subscriptions
            .by_name
            .values()
            .cloned()
            .collect()
    }

    async fn propose(&self, command: SubscriptionCommand) -> BrokerResult<SubscriptionOutcome> {
        match self
            .core
            .cluster()
            .metadata()
            .propose(MetadataCommand::Subscription(command))
            .await?
        {
            MetadataOutcome::Subscription(outcome) => Ok(outcome),
            other => Err(BrokerError::Internal(format!(
                "unexpected answer to a subscription command: {other:?}"
            ))),
        }
    }
}

fn refusal(name: &str, outcome: SubscriptionOutcome) -> BrokerError {
    match outcome {
        SubscriptionOutcome::NotFound => subscription_not_found(name),
        SubscriptionOutcome::TopicNotFound(topic) => BrokerError::TopicNotFound(topic),
        SubscriptionOutcome::Conflict(message) => BrokerError::Conflict {
            code: ErrorCode::SubscriptionConflict,
            message,
        },
        SubscriptionOutcome::Invalid(message) => BrokerError::InvalidRequest(message),
        other => BrokerError::Internal(format!(
            "unexpected subscription outcome for '{name}': {other:?}"
        )),
    }
}
