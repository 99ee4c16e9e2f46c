//! Keeping this node in line with the metadata: which partition groups run here, each led
//! group's voters, leadership back to preferred replicas, and this node's own registration.

use herald_domain::RaftGroupId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::operation::{ask, AskError};
use super::service::{Ping, PingReport, VersionedPing};
use super::{gossip, new_cluster_id, Cluster};
use herald_domain::metadata::{MetadataCommand, MetadataState, PartitionAssignment};
use herald_domain::wire_version::Feature;
use herald_raft::{Bootstrap, NodeAddr, PartitionReplica};
use herald_rpc::RpcError;

/// How many partition groups the reconciler starts at once.
const START_CONCURRENCY: usize = 16;
/// How often membership, leadership and registration are checked besides metadata changes.
const TICK: Duration = Duration::from_millis(1000);
/// The longest one membership step may take before the tick moves on.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn spawn_loops(cluster: &Arc<Cluster>, stopped: watch::Receiver<bool>) {
    tokio::spawn(follow_metadata(
        Arc::downgrade(cluster),
        cluster.metadata.changes(),
        stopped.clone(),
    ));
    tokio::spawn(every(Arc::downgrade(cluster), TICK, stopped.clone(), tick));
    // Its own loop: snapshots and purges after a large trim must not hold up the tick.
    tokio::spawn(every(
        Arc::downgrade(cluster),
        TICK,
        stopped.clone(),
        |cluster| async move { cluster.purge_trimmed().await },
    ));
    // The cleaner too: a pass runs as long as the I/O budget makes it.
    tokio::spawn(every(
        Arc::downgrade(cluster),
        TICK,
        stopped.clone(),
        |cluster| async move { cluster.clean_queued().await },
    ));
    tokio::spawn(every(
        Arc::downgrade(cluster),
        super::groups::COORDINATION_INTERVAL,
        stopped.clone(),
        |cluster| async move { cluster.groups.coordinate().await },
    ));
    tokio::spawn(every(
        Arc::downgrade(cluster),
        super::rebalance::STEP_INTERVAL,
        stopped.clone(),
        |cluster| async move { cluster.auto_rebalance().await },
    ));
    tokio::spawn(super::detector::watch_peers(
        Arc::downgrade(cluster),
        stopped.clone(),
    ));
}

/// The pings to every peer, started before this node's partition replicas: a replica that
/// starts asks, before it campaigns, whether its leader is alive (`Cluster::leader_is_alive`),
/// which only the peers' answers tell. Started after the replicas, the first pings came when
/// a node holding 10,000 of them had long been woken by their leaders, and had campaigned.
pub(super) fn spawn_gossip(cluster: &Arc<Cluster>, stopped: watch::Receiver<bool>) {
    tokio::spawn(every(
        Arc::downgrade(cluster),
        gossip::PING_INTERVAL,
        stopped,
        |cluster| async move { cluster.ping_peers().await },
    ));
}

async fn follow_metadata(
    cluster: Weak<Cluster>,
    mut changes: watch::Receiver<Arc<MetadataState>>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = stopped.wait_for(|stopped| *stopped) => return,
        }
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        cluster.reconcile().await;
    }
}

/// Runs `step` every `interval` (the first time at once) until the cluster stops or is gone.
pub(super) async fn every<F, Fut>(
    cluster: Weak<Cluster>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
    step: F,
) where
    F: Fn(Arc<Cluster>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopped.wait_for(|stopped| *stopped) => return,
        }
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        step(cluster).await;
    }
}

/// Everything kept in line once a second besides metadata changes.
async fn tick(cluster: Arc<Cluster>) {
    cluster.register_self().await;
    cluster.reconcile().await;
    cluster.converge_led_groups().await;
    cluster.hand_back_leadership().await;
    cluster.control_metadata().await;
    cluster.raise_cluster_version().await;
    cluster.publish_metrics();
}

impl Cluster {
    /// Learns from every peer what it leads (and, through the RPC client, that it is up).
    async fn ping_peers(&self) {
        self.routing.leader_map().absorb(self.ping_report());
        let state = self.metadata.current();
        // Founders until the metadata lists nodes; then exactly the listed ones, so a removed
        // node is not pinged for ever.
        let known = if state.nodes.is_empty() {
            &self
                .metadata
                .founders()
                .keys()
                .copied()
                .collect::<BTreeSet<u64>>()
        } else {
            &state.nodes.keys().copied().collect::<BTreeSet<u64>>()
        };
        let peers: BTreeSet<u64> = known
            .iter()
            .copied()
            .filter(|node| *node != self.node_id)
            .collect();
        let deadline = Instant::now() + gossip::PING_INTERVAL;
        let answers =
            futures::future::join_all(peers.iter().map(|peer| self.ping(*peer, deadline))).await;
        // A peer that did not answer reports nothing; its claims age out.
        for report in answers.into_iter().flatten() {
            self.routing.leader_map().absorb(report);
        }
    }

    /// Pings `peer`: with the versioned ping, which also tells its wire version, unless it
    /// lately said it does not know it (a node of the release before wire versions), which
    /// gets the ping it knows.
    async fn ping(&self, peer: u64, deadline: Instant) -> Option<PingReport> {
        if self.node_versions.should_ask(peer) {
            match ask(&self.rpc, peer, &VersionedPing, deadline).await {
                Ok(answer) => {
                    self.node_versions.reported(peer, answer.wire_version);
                    return Some(answer.report);
                }
                Err(AskError::Rpc(RpcError::UnknownOperation { .. })) => {
                    tracing::debug!(
                        node = peer,
                        "a node of a release before wire versions; pinging it the old way"
                    );
                    self.node_versions.unversioned(peer);
                }
                Err(_) => return None,
            }
        }
        ask(&self.rpc, peer, &Ping, deadline).await.ok()
    }

    /// Founds the cluster id and keeps this node's addresses in the metadata.
    ///
    /// A founder beyond the first `metadata_voters` starts without metadata state, like a
    /// joining node, but nobody adds it: it registers itself through the founding voters, and
    /// the metadata leader then adds it as a learner.
    async fn register_self(&self) {
        if !self.metadata.replica().is_initialized().await
            && !self.metadata.founders().contains_key(&self.node_id)
        {
            return; // A joining node: the cluster registers it when it adds it.
        }
        let metadata = self.metadata.current();
        if metadata.removed_nodes.contains(&self.node_id) {
            return; // Drained and removed: this node is no longer part of the cluster.
        }
        if metadata.cluster_id.is_none() && self.metadata.is_leader() {
            let command = MetadataCommand::InitCluster {
                cluster_id: new_cluster_id(self.node_id),
            };
            if let Err(error) = self.metadata.propose(command).await {
                tracing::debug!(%error, "could not set the cluster id yet");
            }
        }
        let registered = metadata.nodes.get(&self.node_id);
        let current = registered.is_some_and(|record| {
            record.http_addr == self.http_addr && record.raft_addr == self.raft_addr
        });
        if !current {
            let command = MetadataCommand::RegisterNode {
                node_id: self.node_id,
                http_addr: self.http_addr.clone(),
                raft_addr: self.raft_addr.clone(),
            };
            match self.metadata.propose(command).await {
                Ok(_) => tracing::info!(node = self.node_id, "registered in the cluster metadata"),
                Err(error) => tracing::debug!(%error, "could not register yet"),
            }
            return;
        }
        // The zone, once registered and once every node knows zones (the cluster version).
        let zone_known = metadata.zones.of(self.node_id) == self.zone.as_deref();
        if !zone_known && metadata.cluster_version.allows(Feature::Zones) {
            let command = MetadataCommand::SetNodeZone {
                node_id: self.node_id,
                zone: self.zone.clone(),
            };
            match self.metadata.propose(command).await {
                Ok(_) => {
                    tracing::info!(node = self.node_id, zone = ?self.zone, "zone set in the cluster metadata")
                }
                Err(error) => tracing::debug!(%error, "could not set the zone yet"),
            }
        }
    }

    /// Brings the running replicas in line with the metadata.
    pub(super) async fn reconcile(&self) {
        let _running = self.reconcile_lock.lock().await;
        if *self.stop.borrow() {
            return;
        }
        let state = self.metadata.current();
        for (node, record) in &state.nodes {
            if *node != self.node_id
                && self.rpc.address(*node).as_deref() != Some(&record.raft_addr)
            {
                self.rpc.set_address(*node, &record.raft_addr);
            }
        }
        let assignments: BTreeMap<RaftGroupId, &PartitionAssignment> = state
            .topics
            .values()
            .flat_map(|topic| topic.partitions.iter())
            .map(|assignment| (assignment.group_id, assignment))
            .collect();
        let wanted: Vec<&PartitionAssignment> = assignments
            .values()
            .filter(|assignment| assignment.replicas.contains(&self.node_id))
            .copied()
            .collect();
        let (missing, unwanted): (Vec<&PartitionAssignment>, Vec<Arc<PartitionReplica>>) =
            self.replicas.read(|replicas| {
                let missing = wanted
                    .iter()
                    .filter(|assignment| !replicas.contains_key(&assignment.group_id))
                    .copied()
                    .collect();
                let unwanted = replicas
                    .iter()
                    .filter(|(group, _)| {
                        !assignments
                            .get(group)
                            .is_some_and(|assignment| assignment.replicas.contains(&self.node_id))
                    })
                    .map(|(_, replica)| replica.clone())
                    .collect();
                (missing, unwanted)
            });
        // Out of the map first (a deleted topic's partitions then count as gone for whoever
        // waits on it), then stopped and erased concurrently: a topic can have 1024 of them.
        let removed: Vec<(Arc<PartitionReplica>, bool)> = unwanted
            .into_iter()
            .filter_map(|replica| {
                let group = replica.group();
                // A deleted partition goes at once; a moved one stays until its leader has
                // removed this node from the group, so its data is copied before it is erased.
                let moved_away = assignments.contains_key(&group);
                if moved_away && !self.removed_from_group(&replica) {
                    return None;
                }
                self.replicas.remove(group);
                Some((replica, moved_away))
            })
            .collect();
        let mut changed = !removed.is_empty();
        if changed {
            self.replicas.changed();
        }
        let erasures = removed.into_iter().map(|(replica, moved_away)| async move {
            let group = replica.group();
            match replica.destroy().await {
                Ok(()) => tracing::info!(group = group.get(), moved_away, "erased a partition replica"),
                Err(error) => tracing::error!(group = group.get(), %error, "could not erase a partition replica"),
            }
        });
        futures::stream::iter(erasures)
            .buffer_unordered(START_CONCURRENCY)
            .collect::<Vec<()>>()
            .await;
        changed = false;
        let plans: Vec<(RaftGroupId, Bootstrap)> = missing
            .into_iter()
            .map(|assignment| {
                (
                    assignment.group_id,
                    self.partition_bootstrap(&state, assignment),
                )
            })
            .collect();
        let context = self.context.clone();
        let metadata = self.metadata.changes();
        let starts = plans.into_iter().map(move |(group, bootstrap)| {
            let context = context.clone();
            let metadata = metadata.clone();
            let planned = state.clone();
            async move {
                // A start not begun when the metadata changed is left to the next pass, which
                // the change triggers: starting a thousand partitions of a topic deleted
                // meanwhile would hold up that pass (and the delete's answer) for nothing.
                if !Arc::ptr_eq(&metadata.borrow(), &planned) {
                    return (group, None);
                }
                let outcome = PartitionReplica::start(&context, group, bootstrap).await;
                (group, Some(outcome))
            }
        });
        let mut started = futures::stream::iter(starts).buffer_unordered(START_CONCURRENCY);
        while let Some((group, outcome)) = started.next().await {
            let Some(outcome) = outcome else {
                continue;
            };
            match outcome {
                Ok(replica) => {
                    self.replicas.insert(group, Arc::new(replica));
                    changed = true;
                }
                Err(error) => {
                    tracing::error!(group = group.get(), %error, "could not start a partition replica")
                }
            }
        }
        if changed {
            self.replicas.changed();
        }
    }

    /// Founding replicas initialize a new group (identically); a replica added later joins.
    fn partition_bootstrap(
        &self,
        state: &MetadataState,
        assignment: &PartitionAssignment,
    ) -> Bootstrap {
        let founding = assignment.founders.contains(&self.node_id)
            && assignment.replicas == assignment.founders;
        if !founding {
            return Bootstrap::Join;
        }
        let voters: Option<BTreeMap<u64, NodeAddr>> = assignment
            .founders
            .iter()
            .map(|node| {
                state
                    .nodes
                    .get(node)
                    .map(|record| (*node, Cluster::raft_node(&record.raft_addr)))
            })
            .collect();
        match voters {
            Some(voters) => Bootstrap::Initialize {
                voters,
                campaign: assignment.founders.first() == Some(&self.node_id),
            },
            None => Bootstrap::Join,
        }
    }

    /// Whether the group's current leader (another node) no longer counts this node in.
    fn removed_from_group(&self, replica: &PartitionReplica) -> bool {
        if replica.is_leader() {
            return false;
        }
        match self.routing.leader_map().get(replica.group()) {
            Some((leader, leadership)) if leader != self.node_id => {
                !leadership.voters.contains(&self.node_id)
                    && !leadership.learners.contains(&self.node_id)
            }
            _ => false,
        }
    }

    /// On every group this node leads: move its voters toward the placement.
    async fn converge_led_groups(&self) {
        let state = self.metadata.current();
        let addresses: BTreeMap<u64, NodeAddr> = state
            .nodes
            .iter()
            .map(|(id, record)| (*id, Cluster::raft_node(&record.raft_addr)))
            .collect();
        let replicas_of: BTreeMap<RaftGroupId, BTreeSet<u64>> = state
            .topics
            .values()
            .flat_map(|topic| topic.partitions.iter())
            .map(|assignment| {
                (
                    assignment.group_id,
                    assignment.replicas.iter().copied().collect(),
                )
            })
            .collect();
        for replica in self.replicas.all() {
            if !replica.is_leader() {
                continue;
            }
            let Some(wanted) = replicas_of.get(&replica.group()) else {
                continue;
            };
            let step =
                tokio::time::timeout(STEP_TIMEOUT, replica.converge_replicas(wanted, &addresses))
                    .await;
            match step {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(group = replica.group().get(), %error, "membership change failed")
                }
                Err(_) => {
                    tracing::warn!(group = replica.group().get(), "membership change is slow")
                }
            }
        }
    }

    /// Gauges of what this node holds and leads, refreshed every tick.
    fn publish_metrics(&self) {
        let replicas = self.replicas.all();
        let mut led = 0usize;
        let mut under_replicated = 0usize;
        for replica in &replicas {
            if let Some(report) = replica.leader_report() {
                led += 1;
                if report.in_sync.len() < report.voters.len() {
                    under_replicated += 1;
                }
            }
        }
        // (Each replica's `herald_replica_*` gauges are read when metrics are scraped: see
        // `gauges`.)
        metrics::gauge!("herald_raft_recent_entries_bytes")
            .set(herald_raft::recent_entries_bytes() as f64);
        metrics::gauge!("herald_cluster_partition_replicas").set(replicas.len() as f64);
        metrics::gauge!("herald_cluster_partitions_led").set(led as f64);
        metrics::gauge!("herald_cluster_under_replicated_partitions").set(under_replicated as f64);
        metrics::gauge!("herald_cluster_metadata_leader").set(if self.metadata.is_leader() {
            1.0
        } else {
            0.0
        });
        let statuses = self.membership.node_statuses();
        for status in ["up", "down", "draining"] {
            let count = statuses.iter().filter(|node| **node == status).count();
            metrics::gauge!("herald_cluster_nodes", "status" => status).set(count as f64);
        }
    }
}
