//! Putting idle partition groups to sleep, and waking them when a peer stops answering
//! (the mechanism is `herald_raft`'s `engine::quiescence`).
//!
//! Once a second this node's leaders that were idle for `raft.quiesce_after_ms` make their
//! offers, one [`QuiesceGroups`] request per follower node carrying every group that node
//! follows: thousands of idle groups cost a handful of messages, once. A group goes quiet when
//! all its followers agreed.
//!
//! A follower that is down does not keep a group awake: the offer goes to the followers that
//! are up, and the group goes quiet without the others when the rest make a quorum (they are
//! *absent*, not in sync). So a node that stops or dies wakes only the groups it led, which
//! must elect.
//!
//! Quiet groups exchange nothing, so their liveness is this node's pings to each peer (one per
//! second, `gossip`): when a peer has not answered for the election timeout, the quiet groups
//! it leads wake here (their followers' election timers then elect a new leader at once), and
//! the quiet groups this node leads record it absent (or wake, when the others are no quorum).
//! A peer whose process is gone is noticed sooner (`detector`), and its groups woken and taken
//! over there.
//!
//! When an absent peer answers again, the groups that went quiet without it wake here, at most
//! [`RETURN_WAKES_PER_CHECK`] a check and [`RETURN_IN_FLIGHT`] catching it up at a time, so a
//! returning node holding thousands of replicas is caught up in waves, at its own pace, instead
//! of all at once; its own replicas started dormant
//! (`herald_raft`'s `engine::quiescence`) and wait for those leaders. A quiet replica whose
//! group nobody claims to lead for [`UNCLAIMED_GRACE`] wakes to elect.

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
/// How long a follower node gets to answer an offer: long enough for a busy one (a survivor
/// that just took over a dead node's groups answered a second late, so the groups that most
/// needed to go quiet never did), short enough that a group is not held half-quiet for long.
const OFFER_TIMEOUT: Duration = Duration::from_millis(3000);
/// How many quiet groups that went quiet without a peer wake per check once it answers again.
pub(crate) const RETURN_WAKES_PER_CHECK: usize = 1000;
/// How many of the groups woken for one returned peer may be catching it up at once: the next
/// wake for it waits until some are done (the peer in sync, or the group quiet again). A node
/// back from a stop answers everything late while it starts thousands of replicas; waking all
/// the groups that went quiet without it then (1,000 a second) had them all heartbeat it at
/// once, and its replicas' election timers ran out behind the queue.
pub(crate) const RETURN_IN_FLIGHT: usize = 500;
/// How long a quiet follower waits for a claim that its group has a leader (the leaders'
/// gossip reports come every second and last three) before it wakes to elect one.
const UNCLAIMED_GRACE: Duration = Duration::from_secs(5);

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

/// The loops: peers' answers checked every [`CHECK_INTERVAL`], and apart from them (so a slow
/// follower's answer to an offer never delays noticing a silent peer) idle groups offered.
pub(super) async fn quiesce_idle_groups(
    cluster: Weak<Cluster>,
    idle_after: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    if !idle_after.is_zero() {
        // Each pass waits for its offers' answers; the next begins a check interval later.
        tokio::spawn(super::reconcile::every(
            cluster.clone(),
            CHECK_INTERVAL,
            stopped.clone(),
            move |cluster| async move { cluster.offer_idle_groups(idle_after).await },
        ));
    }
    let mut silent: HashSet<u64> = HashSet::new();
    let mut unclaimed: HashMap<RaftGroupId, Instant> = HashMap::new();
    let mut catching_up: HashMap<u64, HashSet<RaftGroupId>> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = stopped.wait_for(|stopped| *stopped) => return,
        }
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        cluster.wake_for_silent_peers(&mut silent);
        cluster.wake_for_returned_peers(&mut catching_up);
        cluster.wake_unclaimed(&mut unclaimed);
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

    /// Whether `leader`, a peer, is alive and leads `group` (asked before a replica here
    /// campaigns, `herald_raft`'s `leader_liveness`): its connection is open, it answered
    /// within the silence limit (the same limit after which its quiet groups wake here, so a
    /// replica that stood down for a leader is woken when that leader falls silent), and its
    /// latest report claims the group.
    pub(super) fn leader_is_alive(&self, group: RaftGroupId, leader: u64) -> bool {
        leader != self.node_id
            && self.rpc.is_connected(leader)
            && !self.is_silent(leader)
            && self.routing.leader_map().claimant(group) == Some(leader)
    }

    /// Whether `peer` has not answered within the [silence limit](Self::silence_limit).
    fn is_silent(&self, peer: u64) -> bool {
        self.rpc
            .last_answer(peer)
            .is_none_or(|answered| answered.elapsed() > self.silence_limit())
    }

    /// Wakes the quiet groups of peers that stopped answering (once per silence).
    fn wake_for_silent_peers(&self, silent: &mut HashSet<u64>) {
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
            if !self.is_silent(peer) {
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

    /// Wakes quiet groups this node leads that went quiet without a peer that is up again, at
    /// most [`RETURN_WAKES_PER_CHECK`], and while fewer than [`RETURN_IN_FLIGHT`] woken for
    /// that peer are still catching it up (`catching_up`, by peer, kept between checks).
    fn wake_for_returned_peers(&self, catching_up: &mut HashMap<u64, HashSet<RaftGroupId>>) {
        // Done: the group is quiet again, is led elsewhere now, or has the peer in sync.
        catching_up.retain(|peer, groups| {
            groups.retain(|group| {
                self.replicas.get(*group).is_some_and(|replica| {
                    !replica.is_quiet()
                        && replica
                            .leader_report()
                            .is_some_and(|report| !report.in_sync.contains(peer))
                })
            });
            !groups.is_empty()
        });
        let mut woken = 0;
        let mut up: HashMap<u64, bool> = HashMap::new();
        for replica in self.replicas.all() {
            if woken >= RETURN_WAKES_PER_CHECK {
                break;
            }
            let absent = replica.absent_followers();
            let returned = absent.iter().copied().find(|peer| {
                *up.entry(*peer)
                    .or_insert_with(|| self.membership.is_up(*peer))
                    && catching_up.get(peer).map_or(0, HashSet::len) < RETURN_IN_FLIGHT
            });
            if let Some(peer) = returned {
                if replica.wake_for_return(peer) {
                    woken += 1;
                    catching_up.entry(peer).or_default().insert(replica.group());
                }
            }
        }
        if woken > 0 {
            tracing::info!(
                groups = woken,
                "peers answer again: woke quiet groups that went quiet without them"
            );
        }
    }

    /// Wakes quiet followers whose group no node has claimed to lead for [`UNCLAIMED_GRACE`]
    /// while the leader they know reports, fresh, that it does not lead it (a dormant replica
    /// whose leader of old leads no more, and nobody else does), or while they wait for a
    /// takeover's candidate that has not won. A leader whose reports are
    /// late is left to [`Self::wake_for_silent_peers`]: an overloaded node's late answers must
    /// not wake groups to campaign.
    fn wake_unclaimed(&self, unclaimed: &mut HashMap<RaftGroupId, Instant>) {
        let now = Instant::now();
        let leaders = self.routing.leader_map();
        let mut seen = HashSet::new();
        for replica in self.replicas.all() {
            if !replica.is_quiet() || replica.is_leader() {
                continue;
            }
            // (One waiting for a takeover's candidate knows its leader is gone: if nobody
            // claims the group within the grace, the candidate did not win.)
            let disowned = match replica.leader() {
                Some(known) => {
                    (leaders.has_fresh_report(known) || replica.is_awaiting_candidate())
                        && leaders.claimant(replica.group()).is_none()
                }
                None => leaders.claimant(replica.group()).is_none(),
            };
            if !disowned {
                continue;
            }
            let group = replica.group();
            seen.insert(group);
            let since = *unclaimed.entry(group).or_insert(now);
            if now.duration_since(since) >= UNCLAIMED_GRACE && replica.wake_to_elect() {
                tracing::info!(
                    group = group.get(),
                    "no node claims to lead this quiet group: woke it to elect"
                );
            }
        }
        unclaimed.retain(|group, _| seen.contains(group));
    }

    /// Offers the groups idle for `idle_after`, once every node can quiesce and while this
    /// one is not leaving.
    async fn offer_idle_groups(&self, idle_after: Duration) {
        if self.cluster_version().allows(Feature::Quiescence) && !self.is_leaving() {
            self.offer_quiescence(idle_after).await;
        }
    }

    /// Offers every idle group this node leads to its followers and settles each.
    async fn offer_quiescence(&self, idle_after: Duration) {
        let mut offers = Vec::new();
        let mut by_follower: BTreeMap<u64, Vec<QuietGroup>> = BTreeMap::new();
        for replica in self.replicas.all() {
            // Followers that are down are left out: the group goes quiet without them.
            let Some(offer) = replica.quiesce_offer(idle_after, |node| self.membership.is_up(node))
            else {
                continue;
            };
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
