//! The service layer every transport calls: topics, produce (idempotent or not), producer
//! ids, fetch, consumer groups, request/reply, cluster state.
//!
//! [`Broker`] is the composition root: one service per capability (topics, produce, fetch,
//! streams, consumer groups, subscriptions (queues), requests, nodes, audit; auth is made with its own
//! settings), each owning its state. Handlers translate a request into exactly one call on one
//! service and map its answer to a DTO; everything that orchestrates (placement, partition
//! choice, waiting for replicas, long polls) happens here or below.

pub mod audit;
pub mod auth;
pub mod backups;
mod broker_core;
mod cluster_info;
pub mod error;
pub mod error_code;
pub(crate) mod fetch;
mod groups;
mod leader;
mod memory;
pub mod node_gauges;
mod produce;
pub mod quota;
pub mod requests;
pub mod schemas;
pub mod stream;
pub mod subscriptions;
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
pub use types::*;

pub use audit::AuditService;
pub use backups::BackupService;
pub use cluster_info::NodeService;
pub use fetch::FetchService;
pub use groups::GroupService;
pub use produce::ProduceService;
pub use requests::RequestService;
pub use schemas::SchemaService;
pub use stream::StreamService;
pub use subscriptions::SubscriptionService;
pub use topics::TopicService;

use broker_core::Core;

use std::sync::Arc;
use std::time::Duration;

use herald_cluster::{Cluster, ClusterError};
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
    /// The replicas of each partition of a topic created without naming a replication factor,
    /// capped at the nodes that take replicas then (so one node alone still creates topics).
    pub default_replication_factor: u16,
    /// Consumer group limits.
    pub groups: GroupOptions,
    /// Request/reply limits.
    pub requests: requests::RequestOptions,
    /// Where this node's backups go.
    pub backups: backups::BackupOptions,
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
            default_replication_factor: 3,
            groups: GroupOptions::default(),
            requests: requests::RequestOptions::default(),
            backups: backups::BackupOptions::default(),
        }
    }
}

/// The broker: the composition root of its capability services, one per capability, each
/// owning its state. Cheap to clone; the services are shared.
///
/// A transport calls one service per request (`broker.produce().produce(...)`); a service
/// that needs another holds a clone of it, made here, so the dependencies between
/// capabilities are the constructor's arguments and nothing else.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Services>,
}

pub(crate) struct Services {
    core: Arc<Core>,
    topics: TopicService,
    produce: ProduceService,
    fetch: FetchService,
    streams: StreamService,
    groups: GroupService,
    subscriptions: SubscriptionService,
    requests: RequestService,
    nodes: NodeService,
    audit: AuditService,
    backups: BackupService,
    schemas: SchemaService,
}

impl Broker {
    pub fn new(cluster: Arc<Cluster>, options: BrokerOptions) -> Broker {
        let core = Core::new(cluster, options);
        let fetch = FetchService::new(core.clone());
        let schemas = SchemaService::new(core.clone());
        let produce = ProduceService::new(core.clone(), schemas.clone());
        let streams = StreamService::new(core.clone(), fetch.clone());
        Broker {
            inner: Arc::new(Services {
                topics: TopicService::new(core.clone(), produce.clone(), schemas.clone()),
                groups: GroupService::new(core.clone(), fetch.clone()),
                subscriptions: SubscriptionService::new(
                    core.clone(),
                    fetch.clone(),
                    produce.clone(),
                ),
                requests: RequestService::new(core.clone(), produce.clone()),
                nodes: NodeService::new(core.clone()),
                audit: AuditService::new(core.clone(), fetch.clone()),
                backups: BackupService::new(core.clone()),
                schemas,
                core,
                produce,
                fetch,
                streams,
            }),
        }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
    }

    /// Topic administration: create, describe, grow, reconfigure, delete.
    pub fn topics(&self) -> &TopicService {
        &self.inner.topics
    }

    /// Producing: messages, stored batches, producer ids.
    pub fn produce(&self) -> &ProduceService {
        &self.inner.produce
    }

    /// Reading by offset or time.
    pub fn fetch(&self) -> &FetchService {
        &self.inner.fetch
    }

    /// Live streams at a partition's tail, and the memory push subscriptions hold.
    pub fn streams(&self) -> &StreamService {
        &self.inner.streams
    }

    /// Consumer groups: membership, assignment, polls, committed offsets, lag.
    pub fn groups(&self) -> &GroupService {
        &self.inner.groups
    }

    /// Subscriptions: queue semantics on the log.
    pub fn subscriptions(&self) -> &SubscriptionService {
        &self.inner.subscriptions
    }

    /// Request/reply.
    pub fn requests(&self) -> &RequestService {
        &self.inner.requests
    }

    /// The cluster's nodes: their state, joining, draining, readiness and gauges.
    pub fn nodes(&self) -> &NodeService {
        &self.inner.nodes
    }

    /// The schema registry: subjects, versions, ids, compatibility, compiled schemas.
    pub fn schemas(&self) -> &SchemaService {
        &self.inner.schemas
    }

    /// This node's backups.
    pub fn backups(&self) -> &BackupService {
        &self.inner.backups
    }

    /// Reading the audit log.
    pub fn audit(&self) -> &AuditService {
        &self.inner.audit
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
            ClusterError::CannotRebalance(reason) => BrokerError::Conflict {
                code: ErrorCode::CannotRebalance,
                message: reason,
            },
            ClusterError::Listen { .. } => BrokerError::Internal(error.to_string()),
            ClusterError::FeatureNotEnabled { .. } => BrokerError::Unavailable(error.to_string()),
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
    use herald_domain::RaftGroupId;
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
            RpcError::UnknownOperation { node: 2, tag: 9 },
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
        let error = BrokerError::from(RaftLayerError::OutcomeUnknown {
            group: RaftGroupId::new(7),
        });
        assert_eq!(error.code(), ErrorCode::Timeout, "{error}");
        assert!(
            error.to_string().contains("may still be committed"),
            "{error}"
        );
        let via_cluster = ClusterError::Raft(RaftLayerError::OutcomeUnknown {
            group: RaftGroupId::new(0),
        });
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
