//! The service layer every transport calls: topics, produce (idempotent or not), producer
//! ids, fetch, consumer groups, request/reply, cluster state.
//!
//! Handlers translate a request into exactly one call on [`Broker`] and map its answer to a
//! DTO; everything that orchestrates (placement, partition choice, waiting for replicas,
//! long polls) happens here or below.

pub mod audit;
pub mod auth;
mod cluster_info;
pub mod error;
pub mod error_code;
pub(crate) mod fetch;
mod groups;
mod leader;
mod memory;
pub mod node_gauges;
mod produce;
pub mod queue;
pub mod quota;
pub mod requests;
pub mod stream;
mod topics;
pub mod types;

pub use error::{BrokerError, BrokerResult};
pub use error_code::ErrorCode;
pub use fetch::BatchFetch;
pub use groups::lag_age::GroupLagAge;
pub use groups::member_stream::{MemberEvent, MemberHandle, MemberStream};
pub use groups::types::*;
pub use groups::MemberFacts;
pub use memory::{StreamKind, StreamMemory};
pub use produce::idempotence::{validate_idempotency_key, MAX_IDEMPOTENCY_KEY_LEN};
pub use produce::stored::BatchLanding;
pub use produce::{MAX_HEADERS_PER_MESSAGE, MAX_MESSAGES_PER_REQUEST};
// The produce path's appenders, under the name the rest of broker/ knows them by.
use produce::appender;
pub use types::*;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use herald_cluster::{Cluster, ClusterError};
use herald_domain::metadata::{MetadataState, PartitionAssignment, TopicMeta};
use herald_raft::RaftLayerError;

/// Limits and waits of the broker, from the node configuration.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// The most bytes of stored batches one fetch gathers.
    pub fetch_max_bytes: usize,
    /// How long a request waits for a partition's replica or leader before giving up.
    pub leader_wait: Duration,
    /// How long a produce waits for its batches to be acknowledged (a leader that lost its
    /// quorum cannot commit) before answering 504 with an unknown outcome.
    pub produce_timeout: Duration,
    /// How many `acks=none` produce requests may be in flight at once.
    pub max_unacknowledged_produces: usize,
    /// The most bytes of records (encoded) one partition's appender holds, waiting or being
    /// proposed; past it a produce to the partition answers 503 `overloaded`.
    pub max_queued_bytes_per_partition: usize,
    /// The most bytes of records (encoded) all produce requests on the node hold while they
    /// are written: the in-flight share of `storage.memory_budget_bytes`; past it a produce
    /// answers 503 `overloaded`.
    pub max_in_flight_produce_bytes: usize,
    /// The most raft entries one partition's appender has proposed and not yet answered.
    pub max_in_flight_appends_per_partition: usize,
    /// Consumer group limits.
    pub groups: GroupOptions,
    /// Request/reply limits.
    pub requests: requests::RequestOptions,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            fetch_max_bytes: 16 << 20,
            leader_wait: Duration::from_secs(10),
            produce_timeout: Duration::from_secs(30),
            max_unacknowledged_produces: 1024,
            max_queued_bytes_per_partition: 64 << 20,
            max_in_flight_produce_bytes: 320 << 20,
            max_in_flight_appends_per_partition: 4,
            groups: GroupOptions::default(),
            requests: requests::RequestOptions::default(),
        }
    }
}

/// A topic as of one metadata version; the version is immutable, so the topic stays there.
struct TopicRef {
    metadata: Arc<MetadataState>,
    name: String,
}

impl std::ops::Deref for TopicRef {
    type Target = TopicMeta;

    fn deref(&self) -> &TopicMeta {
        // Checked when the reference was made, and `metadata` never changes.
        &self.metadata.topics[&self.name]
    }
}

/// The broker service. Cheap to clone; all state is shared.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<BrokerInner>,
}

struct BrokerInner {
    cluster: Arc<Cluster>,
    options: BrokerOptions,
    /// Spreads unkeyed messages over partitions.
    round_robin: AtomicU64,
    /// Bounds the `acks=none` produces still being written in the background: past the bound a
    /// client waits, so a flood of fire-and-forget requests cannot pile up in memory.
    unacknowledged: Arc<Semaphore>,
    /// Merges concurrent produce requests per partition into shared raft entries.
    appenders: appender::Appenders,
    /// The records produce requests hold on this node, against the memory budget.
    produce_memory: Arc<memory::ProduceMemory>,
    /// The requests waiting here for a reply.
    requests: requests::RequestReply,
    /// The queue streams on this node, by the leases they hold.
    lease_streams: queue::lease_stream::LeaseStreams,
    /// The shared readers of live streams at the tail of a partition.
    tail_hub: stream::TailHub,
}

impl Broker {
    pub fn new(cluster: Arc<Cluster>, options: BrokerOptions) -> Broker {
        let unacknowledged = Arc::new(Semaphore::new(options.max_unacknowledged_produces));
        let produce_memory = memory::ProduceMemory::new(options.max_in_flight_produce_bytes);
        let appenders = appender::Appenders::new(
            options.max_queued_bytes_per_partition,
            options.max_in_flight_appends_per_partition,
        );
        let requests = requests::RequestReply::new(cluster.node_id(), &options.requests);
        Broker {
            inner: Arc::new(BrokerInner {
                requests,
                lease_streams: Default::default(),
                cluster,
                options,
                round_robin: AtomicU64::new(0),
                unacknowledged,
                appenders,
                produce_memory,
                tail_hub: stream::TailHub::default(),
            }),
        }
    }

    fn cluster(&self) -> &Cluster {
        &self.inner.cluster
    }

    /// A topic of the current metadata, without copying it: every produce and fetch looks
    /// one up, and a topic can hold 1024 partition assignments.
    fn topic(&self, name: &str) -> BrokerResult<TopicRef> {
        let metadata = self.cluster().metadata();
        if !metadata.topics.contains_key(name) {
            return Err(BrokerError::TopicNotFound(name.to_string()));
        }
        Ok(TopicRef {
            metadata,
            name: name.to_string(),
        })
    }

    fn assignment<'t>(
        &self,
        topic: &'t TopicMeta,
        partition: u32,
    ) -> BrokerResult<&'t PartitionAssignment> {
        topic
            .partitions
            .get(partition as usize)
            .ok_or_else(|| BrokerError::PartitionNotFound {
                topic: topic.name.clone(),
                partition,
            })
    }

    /// The service other nodes send operations to (`leader`: appends, reads and queue
    /// commands for partitions this node leads, replies for requests waiting here). It holds
    /// the broker weakly: the cluster (which keeps it) must not keep the broker alive past
    /// shutdown.
    pub fn forwarding_service(&self) -> Arc<dyn herald_cluster::BrokerService> {
        Arc::new(leader::ForwardedRequests(Arc::downgrade(&self.inner)))
    }
}

impl From<ClusterError> for BrokerError {
    fn from(error: ClusterError) -> Self {
        match error {
            ClusterError::Raft(raft) => raft.into(),
            ClusterError::NoLeader(group) => {
                BrokerError::NoLeader(format!("partition group {group}"))
            }
            ClusterError::NoMetadataLeader => BrokerError::NoLeader("the cluster metadata".into()),
            ClusterError::Timeout(what) => BrokerError::Timeout(what),
            // Certainly not delivered: nothing was done, a retry is safe.
            ClusterError::Rpc(error) if !error.maybe_delivered() => {
                BrokerError::Unavailable(format!("an internal request could not be sent: {error}"))
            }
            ClusterError::Rpc(error) => {
                BrokerError::Timeout(format!("an internal request's outcome is unknown: {error}"))
            }
            ClusterError::Internal(reason) => BrokerError::Internal(reason),
            ClusterError::Unavailable(reason) => BrokerError::Unavailable(reason),
            ClusterError::CannotDrain(reason) => BrokerError::Conflict {
                code: ErrorCode::CannotDrain,
                message: reason,
            },
            ClusterError::Listen { .. } => BrokerError::Internal(error.to_string()),
        }
    }
}

impl From<RaftLayerError> for BrokerError {
    fn from(error: RaftLayerError) -> Self {
        match error {
            RaftLayerError::NotLeader { group, .. } | RaftLayerError::NoLeader { group } => {
                BrokerError::NoLeader(format!("partition group {group}"))
            }
            RaftLayerError::OutcomeUnknown { .. } => BrokerError::Timeout(format!(
                "{error}; a retry may write it twice unless it carries an Idempotency-Key or a producer id"
            )),
            other => BrokerError::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_rpc::RpcError;

    fn code_of(error: ClusterError) -> ErrorCode {
        BrokerError::from(error).code()
    }

    #[test]
    fn an_rpc_failure_answers_the_outcome_it_really_has() {
        // Never sent: nothing was done, 503 and safe to retry.
        for unsent in [
            RpcError::NoAddress(2),
            RpcError::Unreachable {
                node: 2,
                reason: "connection refused".into(),
            },
            RpcError::TooLarge { size: 10, max: 5 },
        ] {
            assert_eq!(code_of(ClusterError::Rpc(unsent)), ErrorCode::Unavailable);
        }
        // Maybe delivered: the outcome is unknown, 504.
        for unknown in [
            RpcError::Timeout { node: 2 },
            RpcError::ConnectionLost {
                node: 2,
                reason: "reset".into(),
            },
            RpcError::Remote("failed".into()),
        ] {
            assert_eq!(code_of(ClusterError::Rpc(unknown)), ErrorCode::Timeout);
        }
    }

    #[test]
    fn an_entry_discarded_by_a_leader_change_is_an_unknown_outcome_not_an_internal_error() {
        let error = BrokerError::from(RaftLayerError::OutcomeUnknown { group: 7 });
        assert_eq!(error.code(), ErrorCode::Timeout, "{error}");
        assert!(
            error.to_string().contains("may still be committed"),
            "{error}"
        );
        let via_cluster = ClusterError::Raft(RaftLayerError::OutcomeUnknown { group: 0 });
        assert_eq!(code_of(via_cluster), ErrorCode::Timeout);
    }

    #[test]
    fn a_local_fault_of_the_cluster_layer_is_internal() {
        assert_eq!(
            code_of(ClusterError::Internal("encoding".into())),
            ErrorCode::InternalError
        );
    }
}
