//! Putting idle partition groups to sleep, and waking them when a peer stops answering
//! (the mechanism is `herald_raft`'s `engine::quiescence`).
//!
//! Once a second this node's leaders that were idle for `raft.quiesce_after_ms` make their
//! offers, one [`QuiesceGroups`] request per follower node carrying every group that node
//! follows: thousands of idle groups cost a handful of messages, once. A group goes quiet when
//! all its followers agreed.
//!
//! Quiet groups exchange nothing, so their liveness is this node's pings to each peer (one per
//! second, `gossip`): when a peer has not answered for the election timeout, the quiet groups
//! it leads wake here (their followers' election timers then elect a new leader at once) and so
//! do those this node leads with it as a follower. A peer whose process is gone is noticed
//! sooner (`detector`), and its groups woken and taken over there.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::operation::{ask, ClusterOperation, ClusterOperationKind};
use super::Cluster;
use herald_domain::wire_version::Feature;
use herald_domain::RaftGroupId;

/// How often leaders look for idle groups, and how often peers' answers are checked.
const CHECK_INTERVAL: Duration = Duration::from_millis(1000);
/// How long a follower node gets to answer an offer.
const OFFER_TIMEOUT: Duration = Duration::from_millis(1000);

/// Gauge of this node's partition replicas that are quiet.
pub const QUIET_GROUPS: &str = "herald_raft_quiet_groups";

/// One group a leader offers to quiesce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuietGroup {
    pub(crate) group: RaftGroupId,
    pub(crate) term: u64,
    /// The leader's last log index: the follower must hold it, committed and applied.
    pub(crate) last_index: u64,
}

/// Sent by `leader` to one follower node: the groups it may quiesce. The answer lists those it
/// did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuiesceGroups {
    pub(crate) leader: u64,
    pub(crate) groups: Vec<QuietGroup>,
}

impl ClusterOperation for QuiesceGroups {
    const KIND: ClusterOperationKind = ClusterOperationKind::QuiesceGroups;
    type Reply = Vec<RaftGroupId>;

    async fn serve(self, cluster: &Cluster) -> Self::Reply {
        self.groups
            .into_iter()
            .filter(|offer| {
                cluster.replicas.get(offer.group).is_some_and(|replica| {
                    replica.accept_quiesce(self.leader, offer.term, offer.last_index)
                })
            })
            .map(|offer| offer.group)
            .collect()
    }
}

/// The loop: offers, then checks peers, every [`CHECK_INTERVAL`].
pub(super) async fn quiesce_idle_groups(
    cluster: Weak<Cluster>,
    idle_after: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut silent: HashSet<u64> = HashSet::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = stopped.wait_for(|stopped| *stopped) => return,
        }
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        cluster.wake_for_silent_peers(&mut silent);
        if !idle_after.is_zero()
            && cluster.cluster_version().allows(Feature::Quiescence)
            && !cluster.is_leaving()
        {
            cluster.offer_quiescence(idle_after).await;
        }
        let quiet = cluster
            .replicas
            .all()
            .iter()
            .filter(|replica| replica.is_quiet())
            .count();
        metrics::gauge!(QUIET_GROUPS).set(quiet as f64);
    }
}

impl Cluster {
    /// How long a peer may go without answering before the quiet groups it takes part in wake:
    /// the election timeout, the time raft itself would give a silent leader.
    fn silence_limit(&self) -> Duration {
        Duration::from_millis(self.context.timing.election_timeout_min_ms)
    }

    /// Wakes the quiet groups of peers that stopped answering (once per silence).
    fn wake_for_silent_peers(&self, silent: &mut HashSet<u64>) {
        let limit = self.silence_limit();
        let peers: Vec<u64> = self
            .metadata
            .current()
            .nodes
            .keys()
            .copied()
            .filter(|node| *node != self.node_id)
            .collect();
        silent.retain(|peer| peers.contains(peer));
        for peer in peers {
            let answered = self
                .rpc
                .last_answer(peer)
                .is_some_and(|at| at.elapsed() <= limit);
            if answered {
                silent.remove(&peer);
                continue;
            }
            if silent.insert(peer) {
                self.wake_groups_of(peer);
            }
        }
    }

    /// Wakes the quiet groups `peer` leads or follows in a group this node leads.
    pub(super) fn wake_groups_of(&self, peer: u64) {
        let woken = self
            .replicas
            .all()
            .iter()
            .filter(|replica| replica.wake_for_peer(peer))
            .count();
        if woken > 0 {
            tracing::info!(
                peer,
                groups = woken,
                "peer silent: woke the quiet groups it takes part in"
            );
        }
    }

    /// Offers every idle group this node leads to its followers and settles each.
    async fn offer_quiescence(&self, idle_after: Duration) {
        let mut offers = Vec::new();
        let mut by_follower: BTreeMap<u64, Vec<QuietGroup>> = BTreeMap::new();
        for replica in self.replicas.all() {
            let Some(offer) = replica.quiesce_offer(idle_after) else {
                continue;
            };
            // Every follower must be answering: a silent one is what waking is for.
            if !offer
                .followers
                .iter()
                .all(|follower| self.membership.is_up(*follower))
            {
                replica.settle_quiesce(&offer, false);
                continue;
            }
            for follower in &offer.followers {
                by_follower.entry(*follower).or_default().push(QuietGroup {
                    group: replica.group(),
                    term: offer.term,
                    last_index: offer.last_index,
                });
            }
            offers.push((replica, offer));
        }
        if offers.is_empty() {
            return;
        }
        let deadline = Instant::now() + OFFER_TIMEOUT;
        let asks = by_follower.into_iter().map(|(follower, groups)| {
            let request = QuiesceGroups {
                leader: self.node_id,
                groups,
            };
            async move {
                let accepted = ask(&self.rpc, follower, &request, deadline)
                    .await
                    .unwrap_or_default();
                (follower, accepted.into_iter().collect::<HashSet<_>>())
            }
        });
        let accepted: HashMap<u64, HashSet<RaftGroupId>> =
            futures::future::join_all(asks).await.into_iter().collect();
        for (replica, offer) in offers {
            let group = replica.group();
            let all_agreed = offer.followers.iter().all(|follower| {
                accepted
                    .get(follower)
                    .is_some_and(|groups| groups.contains(&group))
            });
            replica.settle_quiesce(&offer, all_agreed);
        }
    }
}
