//! Noticing at once that a peer's process is gone, so the groups it led elect a new leader
//! without waiting out raft's lease and election timeouts.
//!
//! Every node keeps a connection to every peer (the gossip pings keep them open). When one
//! drops, a single ping tells a dead process (connection refused: nothing listens) from a slow
//! or unreachable one (timeout: left to raft's own timers, as a pause or a partition must be).
//!
//! When the connection to a peer comes back, the groups this node leads stop backing off
//! their replication to it (`herald_raft`'s `engine::replication_backoff`), so a returning
//! node is caught up at once: not when a heartbeat's answer shows it behind (a second later in
//! `cluster_failover`'s test) nor, in a quiet group, which heartbeats nobody, after the longest
//! wait.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::operation::{ask, AskError};
use super::service::Ping;
use super::Cluster;
use herald_rpc::RpcError;

/// How often connection states are looked at (a map lookup per peer).
const CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// How long the confirming ping may take.
const CONFIRM_TIMEOUT: Duration = Duration::from_millis(500);
/// How many elections this node starts at a time when it takes over a dead peer's groups...
const TAKEOVER_WAVE: usize = 100;
/// ...and the pause between two waves: 2,000 a second. Each costs a vote written on every
/// replica and a blank entry; thousands started at once overloaded the survivors until their
/// ballots timed out and the elections repeated.
const TAKEOVER_PAUSE: Duration = Duration::from_millis(50);

pub(super) async fn watch_peers(cluster: Weak<Cluster>, mut stopped: watch::Receiver<bool>) {
    let mut connected: HashMap<u64, bool> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = stopped.wait_for(|stopped| *stopped) => return,
        }
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        let peers: Vec<u64> = cluster
            .metadata
            .current()
            .nodes
            .keys()
            .copied()
            .filter(|node| *node != cluster.node_id)
            .collect();
        for peer in peers {
            let now = cluster.rpc.is_connected(peer);
            match connected.insert(peer, now) {
                Some(true) if !now => {
                    let cluster = cluster.clone();
                    tokio::spawn(async move { cluster.confirm_gone(peer).await });
                }
                Some(false) if now => {
                    let cluster = cluster.clone();
                    tokio::spawn(async move { cluster.replicate_again_to(peer).await });
                }
                _ => {}
            }
        }
    }
}

impl Cluster {
    async fn confirm_gone(&self, peer: u64) {
        let answer = ask(&self.rpc, peer, &Ping, Instant::now() + CONFIRM_TIMEOUT).await;
        if let Err(AskError::Rpc(RpcError::Unreachable { reason, .. })) = answer {
            tracing::warn!(peer, %reason, "peer is gone; taking over the groups it led");
            metrics::counter!("herald_cluster_dead_peer_takeovers_total").increment(1);
            self.take_over_from(peer).await;
            // Groups it followed in that this node leads: awake, they report it out of sync.
            self.wake_groups_of(peer);
        }
    }

    /// Ends the replication backoff to `peer` of every group this node leads: its connection
    /// is back.
    async fn replicate_again_to(&self, peer: u64) {
        self.metadata
            .replica()
            .reset_replication_backoff(peer)
            .await;
        for replica in self.replicas.all() {
            replica.reset_replication_backoff(peer).await;
        }
    }

    /// For every local group `dead` led: the lowest-id live voter campaigns at once.
    async fn take_over_from(&self, dead: u64) {
        // A node stopping gracefully does not take over: it is handing its groups off.
        let alive = |node: &u64| {
            *node != dead
                && self.membership.is_up(*node)
                && !(*node == self.node_id && self.is_leaving())
        };
        if self.metadata.leader() == Some(dead) {
            if let Some(candidate) = self
                .metadata
                .replica()
                .members()
                .voters
                .iter()
                .copied()
                .find(alive)
            {
                self.metadata
                    .replica()
                    .take_over_from(dead, candidate)
                    .await;
            }
        }
        // Where another survivor campaigns, only the lease goes (at once, so the candidate's
        // vote is granted); where this node does, the elections start in waves.
        let mut campaigns = Vec::new();
        for replica in self.replicas.all() {
            if replica.leader() != Some(dead) {
                continue;
            }
            let Some(candidate) = replica.members().voters.iter().copied().find(alive) else {
                continue;
            };
            if candidate == self.node_id {
                campaigns.push(replica);
            } else {
                replica.take_over_from(dead, candidate).await;
            }
        }
        for (index, replica) in campaigns.iter().enumerate() {
            if index > 0 && index % TAKEOVER_WAVE == 0 {
                tokio::time::sleep(TAKEOVER_PAUSE).await;
            }
            replica.take_over_from(dead, self.node_id).await;
        }
    }
}
