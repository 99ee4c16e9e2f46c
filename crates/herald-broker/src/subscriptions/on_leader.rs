//! The queue operations that run on a partition's leader, here or sent there: a change of a
//! subscription's delivery state (lease, ack, nack, seek...), its counts, and a wait until a
//! lease could get something. The leader's clock decides deadlines, whichever node the puller
//! asked.
//!
//! A queue command is not retried once sent: a lease or an ack whose answer was lost is as if
//! the lease expired (at-least-once).

use crate::SubscriptionService;
use herald_domain::RaftGroupId;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::stats::{stats_here, SubscriptionStats};
use super::wait::wait_here;
use crate::leader::{LeaderOperation, OperationKind};
use crate::topics::now_ms;
use crate::{Broker, BrokerResult};
use herald_domain::subscriptions::RetryPolicy;
use herald_raft::{DeliveryCommand, DeliveryOutcome, PartitionReplica, StoredBatch};

/// A queue command applied by a partition's leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ApplyDeliveryCommand {
    pub(crate) group: RaftGroupId,
    pub(crate) command: DeliveryCommand,
}

/// What a leader answers a queue command.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DeliveryApplied {
    pub outcome: DeliveryOutcome,
    /// The batches a lease's facts were read from, when this node leads: a puller here hands
    /// out the leased messages from them instead of reading them again. Not sent back from
    /// another node's leader (empty then).
    #[serde(skip)]
    pub batches: Vec<StoredBatch>,
}

impl LeaderOperation for ApplyDeliveryCommand {
    const KIND: OperationKind = OperationKind::ApplyDeliveryCommand;
    type Reply = DeliveryApplied;
    type Service = SubscriptionService;

    fn service(broker: &Broker) -> &SubscriptionService {
        broker.subscriptions()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    async fn run_here(
        &mut self,
        queues: &SubscriptionService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<DeliveryApplied> {
        let mut command = self.command.clone();
        command.set_now(now_ms());
        let batches = queues.fill_lease_facts(&replica, &mut command).await?;
        let outcome = replica.queue(command).await?;
        Ok(DeliveryApplied { outcome, batches })
    }
}

/// A subscription's counts and oldest unacked age on a partition, as its leader applied them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReadSubscriptionStats {
    pub(crate) group: RaftGroupId,
    pub(crate) subscription: u64,
}

impl LeaderOperation for ReadSubscriptionStats {
    const KIND: OperationKind = OperationKind::ReadSubscriptionStats;
    type Reply = SubscriptionStats;
    type Service = SubscriptionService;

    fn service(broker: &Broker) -> &SubscriptionService {
        broker.subscriptions()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    async fn run_here(
        &mut self,
        _queues: &SubscriptionService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<SubscriptionStats> {
        stats_here(&replica, self.subscription).await
    }
}

/// A wait on a partition's leader, up to `max_wait`, until a lease of the subscription could
/// get something there (see [`super::wait`]); answered then, at the deadline, or when the node
/// stops leading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WaitForLease {
    pub(crate) group: RaftGroupId,
    pub(crate) subscription: u64,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_wait: Duration,
}

impl LeaderOperation for WaitForLease {
    const KIND: OperationKind = OperationKind::WaitForLease;
    type Reply = ();
    type Service = SubscriptionService;

    fn service(broker: &Broker) -> &SubscriptionService {
        broker.subscriptions()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    fn wait(&self) -> Duration {
        self.max_wait
    }

    async fn run_here(
        &mut self,
        _queues: &SubscriptionService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<()> {
        // `wait_here` holds it to the longest long poll, whoever asks.
        wait_here(&replica, self.subscription, &self.retry, self.max_wait).await;
        Ok(())
    }
}

impl SubscriptionService {
    /// Applies a queue command on the leader of `group`.
    pub(crate) async fn apply_on_leader(
        &self,
        group: RaftGroupId,
        command: DeliveryCommand,
    ) -> BrokerResult<DeliveryOutcome> {
        let applied = self
            .core
            .run_on_leader(self, ApplyDeliveryCommand { group, command })
            .await?;
        Ok(applied.outcome)
    }

    /// Like [`Self::apply_on_leader`], and when this node leads, also the batches the lease's
    /// facts were read from (empty from another node's leader: they are not sent back).
    pub(crate) async fn lease_on_leader(
        &self,
        group: RaftGroupId,
        command: DeliveryCommand,
    ) -> BrokerResult<(DeliveryOutcome, Vec<StoredBatch>)> {
        let applied = self
            .core
            .run_on_leader(self, ApplyDeliveryCommand { group, command })
            .await?;
        Ok((applied.outcome, applied.batches))
    }

    /// A subscription's counts and oldest unacked age on the partition of `group`, from its
    /// leader.
    pub(crate) async fn stats_on_leader(
        &self,
        group: RaftGroupId,
        subscription: u64,
    ) -> BrokerResult<SubscriptionStats> {
        self.core
            .run_on_leader(
                self,
                ReadSubscriptionStats {
                    group,
                    subscription,
                },
            )
            .await
    }

    /// Waits on the leader of `group` (up to `max_wait`) until a lease of `subscription` could
    /// get something there (see [`super::wait`]).
    pub(crate) async fn wait_on_leader(
        &self,
        group: RaftGroupId,
        subscription: u64,
        retry: RetryPolicy,
        max_wait: Duration,
    ) -> BrokerResult<()> {
        self.core
            .run_on_leader(
                self,
                WaitForLease {
                    group,
                    subscription,
                    retry,
                    max_wait,
                },
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::round_trip;
    use herald_raft::DeliveryCounts;

    #[test]
    fn queue_operations_travel_whole() {
        let command = ApplyDeliveryCommand {
            group: RaftGroupId::new(2),
            command: DeliveryCommand::Forget { subscription: 9 },
        };
        assert_eq!(
            round_trip(OperationKind::ApplyDeliveryCommand, &command),
            command
        );
        let stats = ReadSubscriptionStats {
            group: RaftGroupId::new(2),
            subscription: 9,
        };
        assert_eq!(
            round_trip(OperationKind::ReadSubscriptionStats, &stats),
            stats
        );
        let wait = WaitForLease {
            group: RaftGroupId::new(2),
            subscription: 9,
            retry: RetryPolicy {
                min_backoff_ms: 10,
                max_backoff_ms: 20,
            },
            max_wait: Duration::from_millis(1500),
        };
        let arrived = round_trip(OperationKind::WaitForLease, &wait);
        assert_eq!(arrived, wait);
        assert_eq!(arrived.wait(), Duration::from_millis(1500));
    }

    #[test]
    fn stats_travel_whole() {
        let stats = SubscriptionStats {
            counts: DeliveryCounts {
                backlog: 1,
                in_flight: 2,
                delayed: 3,
                dead_lettered: 4,
            },
            oldest_unacked_age_ms: Some(5),
        };
        let body = postcard::to_stdvec(&stats).unwrap();
        assert_eq!(
            postcard::from_bytes::<SubscriptionStats>(&body).unwrap(),
            stats
        );
    }

    #[test]
    fn a_leases_batches_stay_on_the_leaders_node() {
        let applied = DeliveryApplied {
            outcome: DeliveryOutcome::Sought { offset: 3 },
            batches: vec![StoredBatch {
                base_offset: 0,
                bytes: bytes::Bytes::from_static(b"batch"),
            }],
        };
        let body = postcard::to_stdvec(&applied).unwrap();
        let arrived: DeliveryApplied = postcard::from_bytes(&body).unwrap();
        assert_eq!(arrived.outcome, applied.outcome);
        assert!(arrived.batches.is_empty());
    }
}
