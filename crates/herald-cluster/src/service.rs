//! What nodes ask each other on the internal RPC, besides raft: metadata proposals forwarded
//! to the metadata leader, consumer group heartbeats, replica progress, and the ping that tells
//! every node who is alive and who leads which group; how this node serves them. Also the
//! dispatcher that routes each incoming RPC to its service.

use herald_domain::RaftGroupId;
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::groups::GroupHeartbeat;
use super::handback::ReplicaProgressQuery;
use super::metadata_group::Propose;
use super::operation::{serve, ClusterOperation, ClusterOperationKind};
use super::{leadership, Cluster};
use herald_domain::wire_version::WireVersion;
use herald_raft::{RaftService, Watermarks, RAFT_SERVICE};
use herald_rpc::operation_tag::{split_tag, unknown_operation};
use herald_rpc::{Lane, RpcHandler, ServiceId};

/// Cluster requests (this module).
pub const CLUSTER_SERVICE: ServiceId = 2;
/// Requests the broker sends to a partition's leader or to a node (`broker::leader`).
pub const BROKER_SERVICE: ServiceId = 3;

/// The RPC lane requests of `service` travel on: forwarded client requests on the client lane,
/// so that however many a node forwards (long polls hold their call for up to a minute), raft
/// and the cluster's own requests on the control lane never wait behind them.
pub fn lane_of(service: ServiceId) -> Lane {
    match service {
        BROKER_SERVICE => Lane::Client,
        _ => Lane::Control,
    }
}

/// Who is alive and which groups it leads: every node asks every other about once a second
/// (`reconcile::ping_peers`), and the failure detector asks before it calls a peer gone.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Ping;

impl ClusterOperation for Ping {
    const KIND: ClusterOperationKind = ClusterOperationKind::Ping;
    type Reply = PingReport;

    async fn serve(self, cluster: &Cluster) -> PingReport {
        cluster.ping_report()
    }
}

/// A ping whose answer also says which wire version the node speaks (`node_versions`). A
/// node of the release before wire versions does not know it: the sender falls back to
/// [`Ping`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct VersionedPing;

impl ClusterOperation for VersionedPing {
    const KIND: ClusterOperationKind = ClusterOperationKind::VersionedPing;
    type Reply = VersionedPingReport;

    async fn serve(self, cluster: &Cluster) -> VersionedPingReport {
        VersionedPingReport {
            report: cluster.ping_report(),
            wire_version: cluster.wire_version,
        }
    }
}

/// A node's answer to a versioned ping: what a ping answers, and its wire version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VersionedPingReport {
    pub(crate) report: PingReport,
    pub(crate) wire_version: WireVersion,
}

/// One replica's extent and applied point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaProgress {
    pub log_start_offset: u64,
    pub high_watermark: u64,
    pub applied_index: u64,
}

/// Why a forwarded proposal was not applied. Only `NoLeader` is safe to retry blindly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ProposeFailure {
    /// Nothing was proposed: no leader known (yet).
    NoLeader,
    /// Proposed, but the outcome is unknown or it failed.
    Failed(String),
    /// Proposed, and not committed within the leader wait (the leader may have lost its
    /// quorum): it may still be applied later.
    TimedOut,
    /// Proposed, or maybe sent on to the leader, and then the outcome was lost (a leader
    /// change discarded the entry, or the forwarded call failed after it was sent).
    OutcomeUnknown(String),
}

/// One group this node leads, as it sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupLeadership {
    pub group: RaftGroupId,
    pub term: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub in_sync: Vec<u64>,
    /// The partition's offsets on the leader (zero for the metadata group).
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

/// A node's answer to a ping.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PingReport {
    pub node_id: u64,
    /// The groups it leads (metadata group included).
    pub leads: Vec<GroupLeadership>,
}

/// Serves requests of the broker service; set by the composition root once the broker exists
/// (the broker sits above the cluster, so it registers itself instead of being called by name).
pub trait BrokerService: Send + Sync + 'static {
    fn handle(&self, from: u64, body: Bytes) -> BoxFuture<'static, Result<Bytes, String>>;
}

/// Routes incoming internal RPCs: raft messages to groups, cluster requests to the cluster,
/// broker requests to the broker.
pub(super) struct Dispatcher {
    pub(super) raft: RaftService,
    pub(super) cluster: OnceLock<Weak<Cluster>>,
    pub(super) broker: OnceLock<Arc<dyn BrokerService>>,
}

impl RpcHandler for Dispatcher {
    fn handle(
        &self,
        from: u64,
        service: ServiceId,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>> {
        match service {
            RAFT_SERVICE => {
                let raft = self.raft.clone();
                Box::pin(async move { raft.handle(from, body).await })
            }
            CLUSTER_SERVICE => {
                let cluster = self.cluster.get().and_then(Weak::upgrade);
                Box::pin(async move {
                    match cluster {
                        Some(cluster) => cluster.serve_request(body).await,
                        None => Err("this node is still starting".to_string()),
                    }
                })
            }
            BROKER_SERVICE => match self.broker.get() {
                Some(broker) => broker.handle(from, body),
                None => Box::pin(async { Err("this node is still starting".to_string()) }),
            },
            other => Box::pin(async move { Err(format!("unknown service {other}")) }),
        }
    }
}

impl Cluster {
    /// Serves a cluster request from another node: the tag picks its operation. A tag this
    /// node does not know (a newer node's) is answered as an unknown operation, which the
    /// sender tells from a failure; nothing a peer sends panics.
    pub(super) async fn serve_request(&self, body: Bytes) -> Result<Bytes, String> {
        let Some((tag, body)) = split_tag(&body) else {
            return Err("a cluster request without an operation kind".to_string());
        };
        let Some(kind) = ClusterOperationKind::from_tag(tag) else {
            // Expected while a newer node asks what this one knows (its pings): not a warning.
            tracing::debug!(
                tag,
                "a node sent a cluster operation kind this node does not know"
            );
            return Err(unknown_operation(tag));
        };
        match kind {
            ClusterOperationKind::Ping => serve::<Ping>(self, body).await,
            ClusterOperationKind::VersionedPing => serve::<VersionedPing>(self, body).await,
            ClusterOperationKind::Propose => serve::<Propose>(self, body).await,
            ClusterOperationKind::GroupHeartbeat => serve::<GroupHeartbeat>(self, body).await,
            ClusterOperationKind::QuiesceGroups => {
                serve::<super::quiescence::QuiesceGroups>(self, body).await
            }
            ClusterOperationKind::ReplicaProgress => {
                serve::<ReplicaProgressQuery>(self, body).await
            }
        }
    }

    /// What this node leads, for pings.
    pub(super) fn ping_report(&self) -> PingReport {
        let mut leads = Vec::new();
        if let Some(report) = self.metadata.replica().leader_report() {
            leads.push(leadership(
                herald_domain::metadata::METADATA_GROUP,
                report,
                Watermarks::default(),
            ));
        }
        // A leader handing its group over does not claim it: it neither heartbeats nor
        // proposes until somebody is elected, and followers must not wait for it.
        for replica in self.replicas.all() {
            if let Some(report) = replica.leader_report() {
                if !replica.is_handing_over() {
                    leads.push(leadership(replica.group(), report, replica.watermarks()));
                }
            }
        }
        PingReport {
            node_id: self.node_id,
            leads,
        }
    }
}
