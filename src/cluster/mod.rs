//! The cluster layer: the node's internal RPC listener, the metadata group, the partition
//! replicas this node runs, and where every partition's leader is.
//!
//! Background loops keep the node in line with the replicated metadata: `reconcile` starts
//! and erases local partition groups, moves group memberships toward the placement and hands
//! leadership back to preferred replicas; `controller` does what only the metadata leader does
//! (metadata membership, finishing drains); `gossip` learns who leads what. The broker asks
//! here for routes to partition leaders and for metadata changes; raft details stay below.

mod controller;
mod detector;
mod error;
mod gossip;
mod nodes;
pub mod placement;
mod reconcile;
mod service;

pub use error::ClusterError;
pub use service::{BrokerService, GroupLeadership, BROKER_SERVICE};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use crate::raft::{
    Bootstrap, GroupContext, GroupRegistry, MetadataReplica, NodeAddr, PartitionReplica,
    RaftLayerError, RaftService, RaftTiming, Watermarks,
};
use crate::rpc::{RpcClient, RpcError, RpcLimits};
use crate::storage::Store;
use gossip::LeaderMap;
use service::{ClusterReply, ClusterRequest, Dispatcher, PingReport, ProposeFailure};

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
    pub leads: Vec<u64>,
}

pub struct Cluster {
    node_id: u64,
    http_addr: String,
    raft_addr: String,
    context: GroupContext,
    metadata: MetadataReplica,
    replicas: RwLock<HashMap<u64, Arc<PartitionReplica>>>,
    /// Bumped whenever `replicas` changes, so waiters can wake.
    replicas_version: watch::Sender<u64>,
    reconcile_lock: tokio::sync::Mutex<()>,
    rpc: RpcClient,
    leaders: LeaderMap,
    founders: BTreeMap<u64, String>,
    metadata_voters: usize,
    leader_wait: Duration,
    dispatcher: Arc<Dispatcher>,
    /// Set to true to stop the background loops and the RPC listener.
    stop: watch::Sender<bool>,
    /// When leadership of a group was last handed to its preferred replica.
    transfers: Mutex<HashMap<u64, Instant>>,
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
            raft: RaftService::new(registry.clone()),
            cluster: OnceLock::new(),
            broker: OnceLock::new(),
        });
        let listener = tokio::net::TcpListener::bind(&options.raft_addr)
            .await
            .map_err(|error| ClusterError::Listen {
                address: options.raft_addr.clone(),
                reason: error.to_string(),
            })?;
        let (stop, stopped) = watch::channel(false);
        let mut stop_listener = stopped.clone();
        tokio::spawn(crate::rpc::serve(
            listener,
            options.node_id,
            dispatcher.clone(),
            options.rpc_limits.clone(),
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
        let cluster = Arc::new(Cluster {
            node_id: options.node_id,
            http_addr: options.http_addr,
            raft_addr: options.raft_addr,
            context,
            metadata,
            replicas: RwLock::new(HashMap::new()),
            replicas_version: watch::Sender::new(0),
            reconcile_lock: tokio::sync::Mutex::new(()),
            rpc,
            leaders: LeaderMap::default(),
            founders,
            metadata_voters: options.metadata_voters,
            leader_wait: options.leader_wait,
            dispatcher,
            stop,
            transfers: Mutex::new(HashMap::new()),
        });
        let _ = cluster.dispatcher.cluster.set(Arc::downgrade(&cluster));
        cluster.reconcile().await;
        reconcile::spawn_loops(&cluster, stopped);
        Ok(cluster)
    }

    /// Lets the broker serve requests other nodes forward to it.
    pub fn set_broker_service(&self, service: Arc<dyn BrokerService>) {
        let _ = self.dispatcher.broker.set(service);
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The latest metadata applied on this node.
    pub fn metadata(&self) -> Arc<MetadataState> {
        self.metadata.state()
    }

    pub fn metadata_leader(&self) -> Option<u64> {
        self.metadata.leader()
    }

    /// Whether this node is listed in the metadata (founded or added, and registered).
    pub fn is_registered(&self) -> bool {
        self.metadata().nodes.contains_key(&self.node_id)
    }

    /// Whether `node` answered recently (this node always counts as up).
    pub fn is_up(&self, node: u64) -> bool {
        node == self.node_id
            || self
                .rpc
                .last_answer(node)
                .is_some_and(|answered| answered.elapsed() <= gossip::REPORT_TTL)
    }

    /// Proposes a metadata change through the metadata leader, wherever it is, waiting up to
    /// the leader wait for one to be elected. When it returns, this node has applied the
    /// change too, so what the caller reads next includes it.
    pub async fn propose(&self, command: MetadataCommand) -> Result<MetadataOutcome, ClusterError> {
        let deadline = Instant::now() + self.leader_wait;
        let (outcome, index) = self.propose_anywhere(command, deadline).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !self
            .metadata
            .wait_applied(index, remaining.max(Duration::from_secs(1)))
            .await
        {
            return Err(ClusterError::Timeout(
                "this node to apply the metadata change".into(),
            ));
        }
        Ok(outcome)
    }

    async fn propose_anywhere(
        &self,
        command: MetadataCommand,
        deadline: Instant,
    ) -> Result<(MetadataOutcome, u64), ClusterError> {
        let mut attempt = 0usize;
        loop {
            attempt += 1;
            if self.metadata.is_leader() {
                match self.metadata.propose(command.clone()).await {
                    Err(RaftLayerError::NotLeader { .. } | RaftLayerError::NoLeader { .. }) => {}
                    other => return Ok(other?),
                }
            } else if let Some(target) = self.metadata_target(attempt) {
                let request = ClusterRequest::Propose {
                    command: command.clone(),
                    hops: 0,
                };
                match self.ask(target, &request, deadline).await {
                    Ok(ClusterReply::Proposed(Ok(outcome))) => return Ok(outcome),
                    Ok(ClusterReply::Proposed(Err(ProposeFailure::NoLeader))) => {}
                    Ok(ClusterReply::Proposed(Err(ProposeFailure::Failed(reason)))) => {
                        return Err(ClusterError::Unavailable(reason))
                    }
                    Ok(ClusterReply::Pong(_)) => {}
                    Err(error) if !error.maybe_delivered() => {}
                    Err(error) => return Err(ClusterError::Rpc(error)),
                }
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::NoMetadataLeader);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where to send a metadata proposal: the known leader, or else some other node in turn
    /// (which passes it on if it knows the leader).
    fn metadata_target(&self, attempt: usize) -> Option<u64> {
        if let Some(leader) = self
            .metadata
            .leader()
            .filter(|leader| *leader != self.node_id)
        {
            return Some(leader);
        }
        let mut candidates: Vec<u64> = self
            .metadata()
            .nodes
            .keys()
            .chain(self.founders.keys())
            .copied()
            .filter(|node| *node != self.node_id)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[attempt % candidates.len()])
    }

    async fn ask(
        &self,
        node: u64,
        request: &ClusterRequest,
        deadline: Instant,
    ) -> Result<ClusterReply, RpcError> {
        let body = postcard::to_stdvec(request)
            .map_err(|error| RpcError::Remote(format!("encoding a cluster request: {error}")))?;
        let timeout = deadline.saturating_duration_since(Instant::now());
        let answer = self
            .rpc
            .call(node, service::CLUSTER_SERVICE, Bytes::from(body), timeout)
            .await?;
        postcard::from_bytes(&answer)
            .map_err(|error| RpcError::Remote(format!("decoding a cluster answer: {error}")))
    }

    /// Serves a cluster request from another node.
    async fn serve_request(&self, body: Bytes) -> Result<Bytes, String> {
        let request: ClusterRequest =
            postcard::from_bytes(&body).map_err(|error| format!("bad cluster request: {error}"))?;
        let reply = match request {
            ClusterRequest::Ping => ClusterReply::Pong(self.ping_report()),
            ClusterRequest::Propose { command, hops } => {
                ClusterReply::Proposed(self.propose_here(command, hops).await)
            }
        };
        postcard::to_stdvec(&reply)
            .map(Bytes::from)
            .map_err(|error| format!("encoding a cluster answer: {error}"))
    }

    async fn propose_here(
        &self,
        command: MetadataCommand,
        hops: u8,
    ) -> Result<(MetadataOutcome, u64), ProposeFailure> {
        if self.metadata.is_leader() {
            return match self.metadata.propose(command).await {
                Ok(outcome) => Ok(outcome),
                Err(RaftLayerError::NotLeader { .. } | RaftLayerError::NoLeader { .. }) => {
                    Err(ProposeFailure::NoLeader)
                }
                Err(error) => Err(ProposeFailure::Failed(error.to_string())),
            };
        }
        let leader = self
            .metadata
            .leader()
            .filter(|leader| *leader != self.node_id);
        match leader {
            Some(leader) if hops == 0 => {
                let request = ClusterRequest::Propose { command, hops: 1 };
                match self
                    .ask(leader, &request, Instant::now() + self.leader_wait)
                    .await
                {
                    Ok(ClusterReply::Proposed(result)) => result,
                    Ok(ClusterReply::Pong(_)) => Err(ProposeFailure::NoLeader),
                    Err(error) if !error.maybe_delivered() => Err(ProposeFailure::NoLeader),
                    Err(error) => Err(ProposeFailure::Failed(error.to_string())),
                }
            }
            _ => Err(ProposeFailure::NoLeader),
        }
    }

    /// What this node leads, for pings.
    fn ping_report(&self) -> PingReport {
        let mut leads = Vec::new();
        if let Some(report) = self.metadata.leader_report() {
            leads.push(leadership(
                crate::domain::metadata::METADATA_GROUP,
                report,
                Watermarks::default(),
            ));
        }
        for replica in self.local_replicas() {
            if let Some(report) = replica.leader_report() {
                leads.push(leadership(replica.group(), report, replica.watermarks()));
            }
        }
        PingReport {
            node_id: self.node_id,
            leads,
        }
    }

    /// Sends a request of `service` to another node.
    pub async fn call_node(
        &self,
        node: u64,
        service: crate::rpc::ServiceId,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, RpcError> {
        self.rpc.call(node, service, body, timeout).await
    }

    /// Where requests for `group` go now, waiting until `deadline` for a leader.
    pub async fn route(&self, group: u64, deadline: Instant) -> Result<Route, ClusterError> {
        loop {
            if let Some(route) = self.current_route(group) {
                return Ok(route);
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::NoLeader(group));
            }
            let pause = Duration::from_millis(25);
            match self.local_replica(group) {
                Some(replica) => {
                    let _ = tokio::time::timeout_at(
                        deadline.min(Instant::now() + pause * 8),
                        replica.wait_for_leader(),
                    )
                    .await;
                }
                None => tokio::time::sleep(pause.min(deadline - Instant::now())).await,
            }
        }
    }

    fn current_route(&self, group: u64) -> Option<Route> {
        if let Some(replica) = self.local_replica(group) {
            return match replica.leader() {
                Some(leader) if leader == self.node_id => Some(Route::Local(replica)),
                Some(leader) => Some(Route::Remote(leader)),
                None => None,
            };
        }
        match self.leaders.get(group) {
            Some((leader, _)) if leader != self.node_id => Some(Route::Remote(leader)),
            _ => None,
        }
    }

    /// A forwarded request found that `node` does not lead `group` (any more).
    pub fn forget_leader(&self, group: u64, node: u64) {
        self.leaders.forget(group, node);
    }

    /// The leader of `group`, its in-sync replicas and offsets, as known here: exact on the
    /// leader, otherwise from the leader's last ping (at most a second old) or a local replica.
    pub fn partition_state(&self, group: u64) -> PartitionState {
        let local = self.local_replica(group);
        if let Some(replica) = &local {
            if let Some(report) = replica.leader_report() {
                return PartitionState {
                    leader: Some(self.node_id),
                    in_sync: report.in_sync,
                    watermarks: replica.watermarks(),
                };
            }
        }
        if let Some((leader, leadership)) = self.leaders.get(group) {
            let gossiped = Watermarks {
                log_start_offset: leadership.log_start_offset,
                high_watermark: leadership.high_watermark,
            };
            let local_marks = local.as_ref().map(|replica| replica.watermarks());
            return PartitionState {
                leader: Some(leader),
                in_sync: leadership.in_sync,
                // A follower may have applied past the leader's last report.
                watermarks: match local_marks {
                    Some(marks) if marks.high_watermark > gossiped.high_watermark => marks,
                    _ => gossiped,
                },
            };
        }
        PartitionState {
            leader: local.as_ref().and_then(|replica| replica.leader()),
            in_sync: Vec::new(),
            watermarks: local
                .as_ref()
                .map(|replica| replica.watermarks())
                .unwrap_or_default(),
        }
    }

    /// The nodes with their status and what each leads.
    pub fn nodes_view(&self) -> Vec<NodeView> {
        let metadata = self.metadata();
        let mut leads: HashMap<u64, Vec<u64>> = HashMap::new();
        for (group, leader) in self.leaders.leaders() {
            if group != crate::domain::metadata::METADATA_GROUP {
                leads.entry(leader).or_default().push(group);
            }
        }
        for replica in self.local_replicas() {
            if replica.is_leader() {
                let groups = leads.entry(self.node_id).or_default();
                if !groups.contains(&replica.group()) {
                    groups.push(replica.group());
                }
            }
        }
        metadata
            .nodes
            .iter()
            .map(|(&id, record)| NodeView {
                id,
                http_addr: record.http_addr.clone(),
                raft_addr: record.raft_addr.clone(),
                status: if record.draining {
                    "draining"
                } else if self.is_up(id) {
                    "up"
                } else {
                    "down"
                },
                leads: {
                    let mut groups = leads.remove(&id).unwrap_or_default();
                    groups.sort_unstable();
                    groups
                },
            })
            .collect()
    }

    /// This node's replica of `group`, if it runs one now.
    pub fn local_replica(&self, group: u64) -> Option<Arc<PartitionReplica>> {
        self.replicas.read().get(&group).cloned()
    }

    /// Every running local replica.
    pub fn local_replicas(&self) -> Vec<Arc<PartitionReplica>> {
        self.replicas.read().values().cloned().collect()
    }

    /// Waits until no replica of the given groups runs here any more (after a delete).
    pub async fn wait_until_gone(
        &self,
        groups: &[u64],
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let mut version = self.replicas_version.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if groups
                .iter()
                .all(|group| self.local_replica(*group).is_none())
            {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, version.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(ClusterError::Timeout("deleted partitions to stop".into())),
            }
        }
    }

    /// Stops the background loops and every group; storage is flushed by the caller.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let _running = self.reconcile_lock.lock().await;
        let replicas: Vec<Arc<PartitionReplica>> = self
            .replicas
            .write()
            .drain()
            .map(|(_, replica)| replica)
            .collect();
        futures::future::join_all(replicas.iter().map(|replica| replica.shutdown())).await;
        self.metadata.shutdown().await;
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
    group: u64,
    report: crate::raft::LeaderReport,
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
