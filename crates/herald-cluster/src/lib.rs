//! The cluster layer: the node's internal RPC listener, the metadata group, the partition
//! replicas this node runs, and where every partition's leader is.
//!
//! [`Cluster`] composes one part per concern, each owning its state, and the broker reaches
//! them through its accessors: [`MetadataGroup`] (the applied metadata, who leads it,
//! proposals from any node), [`LocalReplicas`] (the partition replicas this node runs),
//! [`Routing`] (where a partition's leader is), [`GroupCoordinator`] (consumer groups'
//! commands and members' liveness) and [`Membership`] (who may connect, who is up, adding and
//! draining nodes).
//!
//! Background loops keep the node in line with the replicated metadata: `reconcile` starts
//! and erases local partition groups, moves group memberships toward the placement and hands
//! leadership back to preferred replicas; `controller` does what only the metadata leader does
//! (metadata membership, finishing drains, raising the cluster version: `cluster_version`);
//! `gossip` learns who leads what and `node_versions` which wire version each node speaks.
//! Raft details stay below.

mod cluster_version;
mod compaction;
mod controller;
mod detector;
mod error;
mod gauges;
mod gossip;
mod groups;
mod handback;
mod handoff;
mod metadata_group;
mod node_versions;
mod nodes;
mod operation;
#[cfg(test)]
mod operation_fixtures;
pub mod placement;
mod quiescence;
pub mod rebalance;
mod reconcile;
mod replicas;
mod retention;
mod routing;
mod service;

pub use compaction::CleanerOptions;
pub use error::ClusterError;
pub use gauges::{GroupRaftStatus, ReplicaOffsets};
pub use groups::{topic_partition_counts, GroupCoordinator, MemberView};
pub use handoff::HandoffReport;
pub use metadata_group::MetadataGroup;
pub use nodes::Membership;
pub use quiescence::QUIET_GROUPS;
pub use rebalance::{RebalanceOptions, RebalancePlan, RebalanceStep};
pub use replicas::LocalReplicas;
pub use routing::Routing;
pub use service::{BrokerService, GroupLeadership, BROKER_SERVICE};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use herald_domain::wire_version::{ClusterVersion, WireVersion};
use herald_domain::RaftGroupId;
use herald_raft::{
    Bootstrap, GroupContext, GroupRegistry, MetadataReplica, NodeAddr, PartitionReplica,
    RaftService, RaftTiming, Watermarks,
};
use herald_rpc::{PeerAdmission, PeerFilter, RpcClient, RpcLimits};
use herald_storage::Store;
use node_versions::NodeVersions;
use service::Dispatcher;

pub struct ClusterOptions {
    pub node_id: u64,
    pub http_addr: String,
    pub raft_addr: String,
    pub store: Store,
    pub timing: RaftTiming,
    /// The founding members (id to raft address); empty means this node alone.
    pub founders: BTreeMap<u64, String>,
    /// Found nothing; wait to be added by a running cluster.
    pub join: bool,
    /// How many nodes vote in the metadata group.
    pub metadata_voters: usize,
    pub rpc_limits: RpcLimits,
    /// How long a request waits for a leader (metadata or partition) before giving up.
    pub leader_wait: Duration,
    /// How often partition leaders check retention.
    pub retention_check_interval: Duration,
    /// Log compaction: I/O budget, memory, when to clean.
    pub cleaner: CleanerOptions,
    /// The wire version this node reports: [`herald_domain::WIRE_VERSION`], or lower for a test
    /// that plays a node of an older release (`HERALD_TEST_MAX_WIRE_VERSION`).
    pub wire_version: WireVersion,
    /// Replication to followers far behind (a rebuilt replica) is held to this many bytes per
    /// second, node-wide; 0: unlimited.
    pub catch_up_bytes_per_sec: u64,
    /// A partition group with no write for this long, all followers caught up, goes quiet
    /// (`quiescence`); zero: never.
    pub quiesce_after: Duration,
    /// This node's zone (`zone`), reported to the metadata: replicas and metadata voters
    /// spread over zones.
    pub zone: Option<String>,
    /// How the cluster rebalances (`[rebalance]`).
    pub rebalance: RebalanceOptions,
}

/// The wall clock in ms since the Unix epoch: what retention and compaction plans are decided
/// by (on the leader, once; replicas never read their own clocks for them).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// Where requests for a partition go.
pub enum Route {
    /// This node leads it.
    Local(Arc<PartitionReplica>),
    /// Another node leads it.
    Remote(u64),
}

/// What is known about one partition group.
#[derive(Debug, Clone, Default)]
pub struct PartitionState {
    pub leader: Option<u64>,
    pub in_sync: Vec<u64>,
    pub watermarks: Watermarks,
}

/// A node as `GET /v1/cluster` shows it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub id: u64,
    pub http_addr: String,
    pub raft_addr: String,
    /// `up`, `down` or `draining`.
    pub status: &'static str,
    /// The partition groups it leads.
    pub leads: Vec<RaftGroupId>,
    /// The wire version it last reported in a ping (this node's own, for itself); `None` when
    /// this node has not heard it yet. 0: a release before wire versions.
    pub wire_version: Option<WireVersion>,
    /// Its zone, as it reported it.
    pub zone: Option<String>,
}

/// The node's cluster layer: the parts the broker reaches through accessors, and what the
/// background loops keep to themselves.
pub struct Cluster {
    node_id: u64,
    http_addr: String,
    raft_addr: String,
    metadata: Arc<MetadataGroup>,
    replicas: Arc<LocalReplicas>,
    routing: Arc<Routing>,
    groups: GroupCoordinator,
    membership: Membership,
    context: GroupContext,
    reconcile_lock: tokio::sync::Mutex<()>,
    rpc: RpcClient,
    metadata_voters: usize,
    dispatcher: Arc<Dispatcher>,
    /// Set to true to stop the background loops and the RPC listener.
    stop: watch::Sender<bool>,
    /// When leadership of a group was last handed to its preferred replica.
    transfers: Mutex<HashMap<RaftGroupId, Instant>>,
    cleaner: compaction::Cleaner,
    /// Set once a graceful stop began handing leadership off (`handoff`).
    leaving: AtomicBool,
    /// Set once the replicas this node held when it started are running (the first
    /// reconcile): until then it reports no replica progress, so no peer hands it leadership
    /// while it is still starting thousands of groups (`handback`).
    started: AtomicBool,
    /// The wire version this node speaks and reports.
    wire_version: WireVersion,
    /// What the other nodes report of theirs.
    node_versions: Arc<NodeVersions>,
    /// This node's zone.
    zone: Option<String>,
    /// Rebalancing: its options, when the nodes last changed, a running operator's rebalance.
    rebalancer: rebalance::Rebalancer,
}

impl Cluster {
    /// Opens the internal RPC listener, starts the metadata group (founding the cluster when
    /// this data directory has none and this node is a founding voter), then keeps following
    /// the metadata in the background. Returns without waiting for peers: readiness says when
    /// the node can serve.
    pub async fn start(options: ClusterOptions) -> Result<Arc<Cluster>, ClusterError> {
        let rpc = RpcClient::new(options.node_id, options.rpc_limits.clone());
        let founders = if options.founders.is_empty() && !options.join {
            BTreeMap::from([(options.node_id, options.raft_addr.clone())])
        } else {
            options.founders.clone()
        };
        for (node, address) in &founders {
            if *node != options.node_id {
                rpc.set_address(*node, address);
            }
        }
        let registry = Arc::new(GroupRegistry::default());
        let dispatcher = Arc::new(Dispatcher {
            raft: RaftService::new(registry.clone(), options.timing),
            cluster: OnceLock::new(),
            broker: OnceLock::new(),
        });
        // Only members may connect: a node removed from the cluster is refused even with a
        // valid certificate or the cluster secret. Until this node knows its cluster (the
        // `Cluster` below exists), it refuses everyone for a moment.
        let mut server_limits = options.rpc_limits.clone();
        let members_of = dispatcher.clone();
        server_limits.peers = Some(PeerFilter::new(move |node| {
            members_of
                .cluster
                .get()
                .and_then(Weak::upgrade)
                .map_or(PeerAdmission::Unknown, |cluster| {
                    cluster.membership.peer_admission(node)
                })
        }));
        let listener = tokio::net::TcpListener::bind(&options.raft_addr)
            .await
            .map_err(|error| ClusterError::Listen {
                address: options.raft_addr.clone(),
                reason: error.to_string(),
            })?;
        let (stop, stopped) = watch::channel(false);
        let mut stop_listener = stopped.clone();
        tokio::spawn(herald_rpc::serve(
            listener,
            options.node_id,
            dispatcher.clone(),
            server_limits,
            async move {
                let _ = stop_listener.wait_for(|stopped| *stopped).await;
            },
        ));

        let context = GroupContext {
            node_id: options.node_id,
            store: options.store,
            timing: options.timing,
            rpc: rpc.clone(),
            registry,
            catch_up: Arc::new(herald_raft::CatchUpThrottle::new(
                options.catch_up_bytes_per_sec,
            )),
            heartbeats: herald_raft::HeartbeatCoalescer::new(rpc.clone()),
            dormant_restarts: !options.quiesce_after.is_zero(),
            leader_liveness: Arc::new(herald_raft::LeaderLiveness::default()),
        };
        let metadata = MetadataReplica::start(
            &context,
            metadata_bootstrap(
                options.node_id,
                &founders,
                options.join,
                options.metadata_voters,
            ),
        )
        .await?;
        let metadata = Arc::new(MetadataGroup::new(
            metadata,
            options.node_id,
            founders,
            options.leader_wait,
            rpc.clone(),
        ));
        let replicas = Arc::new(LocalReplicas::default());
        let routing = Arc::new(Routing::new(options.node_id, replicas.clone(), rpc.clone()));
        let node_versions = Arc::new(NodeVersions::default());
        let cluster = Arc::new(Cluster {
            node_id: options.node_id,
            http_addr: options.http_addr,
            raft_addr: options.raft_addr,
            groups: GroupCoordinator::new(metadata.clone(), options.leader_wait),
            membership: Membership::new(
                options.node_id,
                metadata.clone(),
                replicas.clone(),
                routing.clone(),
                rpc.clone(),
                (options.wire_version, node_versions.clone()),
            ),
            metadata,
            replicas,
            routing,
            context,
            reconcile_lock: tokio::sync::Mutex::new(()),
            rpc,
            metadata_voters: options.metadata_voters,
            dispatcher,
            stop,
            transfers: Mutex::new(HashMap::new()),
            cleaner: compaction::Cleaner::new(options.cleaner),
            leaving: AtomicBool::new(false),
            started: AtomicBool::new(false),
            wire_version: options.wire_version,
            node_versions,
            zone: options.zone.clone(),
            rebalancer: rebalance::Rebalancer::new(options.rebalance.clone()),
        });
        let _ = cluster.dispatcher.cluster.set(Arc::downgrade(&cluster));
        let liveness_of = Arc::downgrade(&cluster);
        cluster.context.leader_liveness.set(move |group, leader| {
            liveness_of
                .upgrade()
                .is_some_and(|cluster| cluster.leader_is_alive(group, leader))
        });
        reconcile::spawn_gossip(&cluster, stopped.clone());
        let starting = std::time::Instant::now();
        cluster.reconcile().await;
        cluster.started.store(true, Ordering::Relaxed);
        tracing::info!(
            replicas = cluster.replicas.all().len(),
            took_ms = starting.elapsed().as_millis() as u64,
            "started this node's partition replicas"
        );
        tokio::spawn(reconcile::every(
            Arc::downgrade(&cluster),
            options.retention_check_interval,
            stopped.clone(),
            |cluster| async move { cluster.apply_retention().await },
        ));
        tokio::spawn(quiescence::quiesce_idle_groups(
            Arc::downgrade(&cluster),
            options.quiesce_after,
            stopped.clone(),
        ));
        reconcile::spawn_loops(&cluster, stopped);
        Ok(cluster)
    }

    /// Lets the broker serve requests other nodes forward to it.
    pub fn set_broker_service(&self, service: Arc<dyn BrokerService>) {
        let _ = self.dispatcher.broker.set(service);
    }

    /// The node's store, which every raft group on it shares (for backups: a checkpoint of
    /// it is a consistent copy of the whole node).
    pub fn store(&self) -> &herald_storage::Store {
        &self.context.store
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The metadata group: the applied metadata, who leads it, proposals.
    pub fn metadata(&self) -> &MetadataGroup {
        &self.metadata
    }

    /// The partition replicas this node runs.
    pub fn replicas(&self) -> &LocalReplicas {
        &self.replicas
    }

    /// Where partitions' leaders are.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// Consumer groups: their state, commands and heartbeats.
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// The cluster's nodes: admission, liveness, adding and draining.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The wire version this node speaks and reports.
    pub fn wire_version(&self) -> WireVersion {
        self.wire_version
    }

    /// The cluster version as this node applied it: what every node is known to speak, the
    /// gate of whatever every node must understand (`ClusterVersion::allows`).
    pub fn cluster_version(&self) -> ClusterVersion {
        self.metadata.current().cluster_version
    }

    /// Becomes true when the node shuts down: background tasks above the cluster stop on it.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Stops the background loops and every group; storage is flushed by the caller.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let _running = self.reconcile_lock.lock().await;
        let replicas = self.replicas.drain();
        futures::future::join_all(replicas.iter().map(|replica| replica.shutdown())).await;
        self.metadata.replica().shutdown().await;
    }

    /// A node's address as raft memberships carry it. The HTTP address is left out: every
    /// founding replica must write the identical first membership entry, and HTTP addresses
    /// live in the metadata anyway.
    fn raft_node(raft_addr: &str) -> NodeAddr {
        NodeAddr {
            http_addr: String::new(),
            raft_addr: raft_addr.to_string(),
        }
    }
}

fn leadership(
    group: RaftGroupId,
    report: herald_raft::LeaderReport,
    watermarks: Watermarks,
) -> GroupLeadership {
    GroupLeadership {
        group,
        term: report.term,
        voters: report.voters,
        learners: report.learners,
        in_sync: report.in_sync,
        log_start_offset: watermarks.log_start_offset,
        high_watermark: watermarks.high_watermark,
    }
}

/// How this node's metadata group starts when it has no state: the founding voters (the
/// lowest ids of the founders, up to `metadata_voters`) initialize it, the lowest one
/// campaigns at once; other founders and joining nodes wait to be added as learners.
fn metadata_bootstrap(
    node_id: u64,
    founders: &BTreeMap<u64, String>,
    join: bool,
    metadata_voters: usize,
) -> Bootstrap {
    if join {
        return Bootstrap::Join;
    }
    let voters: BTreeMap<u64, NodeAddr> = founders
        .iter()
        .take(metadata_voters)
        .map(|(id, address)| (*id, Cluster::raft_node(address)))
        .collect();
    if !voters.contains_key(&node_id) {
        return Bootstrap::Join;
    }
    let campaign = voters.keys().next() == Some(&node_id);
    Bootstrap::Initialize { voters, campaign }
}

/// A fresh cluster id: unique enough across clusters (time, process, node), not a secret.
fn new_cluster_id(node_id: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(node_id);
    format!("herald-{:016x}", hasher.finish())
}
