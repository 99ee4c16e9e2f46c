//! Quiescent groups: a partition group with nothing to do stops ticking and heartbeating.
//!
//! An idle raft group still costs its node a tick every fifth of a heartbeat interval and one
//! heartbeat per follower per interval; a node holding thousands of idle partitions spends its
//! CPU on them (`benches/cluster-idle.sh`). Here, as CockroachDB quiesces idle ranges, a
//! leader whose group had no write for a while and whose followers all hold its whole log,
//! committed and applied, asks them to go quiet; once every follower agreed, the leader stops
//! its ticks too (openraft's `runtime_config().tick(false)`: no heartbeats, no election timer).
//!
//! What wakes a group (ticks back on):
//! - a write or a membership change on the leader, which first sends a heartbeat and waits for
//!   a quorum to answer it, so the leader's lease is valid again before it proposes;
//! - a raft message reaching a quiet replica (an append, a snapshot, a transfer; a vote or
//!   pre-vote only when granted): a woken leader's first heartbeat wakes its followers;
//! - the cluster layer, when a peer stops answering: the followers of a group that peer leads
//!   (their election timer then runs out at once, since the leader was last heard long ago, and
//!   they elect), and the leader of a group the peer follows (so in-sync replicas are reported
//!   as they are). Liveness of quiet groups thus comes from the node-to-node pings, one per
//!   peer pair, not from one heartbeat per group.
//!
//! Followers that are down (the failure detector's view, `is_up`) do not keep a group awake:
//! as CockroachDB quiesces ranges past dead followers, a leader goes quiet when a quorum of
//! voters (itself included) holds its whole log and every follower that is up agreed; the
//! others are recorded as *absent*. They are not in sync while absent, and a follower that
//! dies while its group is quiet is only added to the list (nothing to do while nobody
//! writes). When an absent follower answers again the cluster layer wakes the group (paced),
//! and its first heartbeat catches the follower up. So a node's absence does not wake every
//! group it takes part in, and its return does not wake them all at once.
//!
//! A replica that restarts on a node starts *dormant* (quiet, no ticks) when the vote it kept
//! is for another node, its leader or a candidate it voted for (the target of a hand-off whose
//! first append came after the stop): it waits to be woken by a message from its group (the
//! leader's heartbeat once the leader's node saw this node back) instead of campaigning when
//! its election timer, started before any leader could reach it, runs out. If that leader is
//! silent, or nobody claims the group, the cluster layer wakes it to elect.
//!
//! A replica that led its group before it stopped restarts as its leader (openraft's leader
//! restore), which is right when nobody elected another meanwhile (a whole cluster restarting).
//! When somebody did, its first heartbeat meets the newer vote and it steps down, knowing the
//! new leader: it then goes dormant too ([`Quiescence::dormant_after_step_down`]) instead of
//! campaigning against a group that has a leader, which may be quiet and only send heartbeats
//! once its node notices this one is back. And a heartbeat from such a stale leader does not
//! wake a quiet replica (the `dispatch` of `engine::network`): the answer, the newer vote, needs
//! no ticks, and a woken follower of a quiet leader would campaign.
//!
//! A follower whose election timer runs out while its leader is alive (the cluster layer's
//! view: connected, answering, claiming the group) stands down the same way instead of
//! campaigning ([`Quiescence::stand_down`], asked in `network`, see `leader_liveness`).
//!
//! Races: a write marks activity before it looks at the quiet flag; a leader going quiet sets
//! the flag, stops its ticks and then checks activity again, so one of the two always sees the
//! other and the group never stays quiet with a write in flight.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use openraft::rt::watch::WatchReceiver;
use openraft::storage::RaftStateMachine;
use openraft::{Raft, ServerState};

use super::types::TypeConfig;

/// Milliseconds are counted from here (an `AtomicU64` holds no `Instant`).
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

/// One group's quiet flag and when it last had something to do.
#[derive(Debug)]
pub struct Quiescence {
    quiet: AtomicBool,
    /// When the group last had a write or was woken, in ms from [`EPOCH`].
    active_at_ms: AtomicU64,
    /// On a quiet leader: the followers that were down when it went quiet, or died since.
    absent: Mutex<Vec<u64>>,
    /// On a quiet follower whose dead leader's group another survivor was picked to take over:
    /// it stays quiet until that candidate's vote reaches it (see [`Self::await_candidate`]).
    awaiting_candidate: AtomicBool,
}

impl Default for Quiescence {
    fn default() -> Self {
        Quiescence {
            quiet: AtomicBool::new(false),
            active_at_ms: AtomicU64::new(now_ms()),
            absent: Mutex::new(Vec::new()),
            awaiting_candidate: AtomicBool::new(false),
        }
    }
}

/// Whether `present` voters out of `voters` are a majority.
fn is_quorum(present: usize, voters: usize) -> bool {
    present * 2 > voters
}

/// A leader's proposal to its followers that the group go quiet, valid while nothing changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuiesceOffer {
    pub term: u64,
    /// The leader's last log index, which every follower must hold, committed and applied.
    pub last_index: u64,
    /// The voters other than the leader that are up: every one must agree.
    pub followers: Vec<u64>,
    /// The voters that are down: the group goes quiet without them.
    pub absent: Vec<u64>,
    /// The leader's activity mark when the offer was made.
    active_at_ms: u64,
}

impl Quiescence {
    pub fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::SeqCst)
    }

    /// Notes a write (or anything else that must keep the group awake a while longer).
    pub fn touch(&self) {
        self.active_at_ms.store(now_ms(), Ordering::SeqCst);
    }

    fn idle_for(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.active_at_ms.load(Ordering::SeqCst)))
    }

    /// Ticks back on if the group was quiet; answers whether it was.
    pub(crate) fn wake<SM>(&self, raft: &Raft<TypeConfig, SM>) -> bool
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        if self.quiet.swap(false, Ordering::SeqCst) {
            self.absent.lock().clear();
            self.awaiting_candidate.store(false, Ordering::SeqCst);
            self.touch();
            raft.runtime_config().tick(true);
            metrics::counter!(QUIESCENCE_WAKES_TOTAL).increment(1);
            true
        } else {
            false
        }
    }

    /// On a quiet follower whose leader is gone and whose group another survivor takes over:
    /// stays quiet instead of waking with the others, whose election timers, long run out,
    /// would campaign against the candidate at once. The candidate's vote, once granted, wakes
    /// it (`engine::network`); if nobody wins, the cluster layer's check for unclaimed groups
    /// does. An awake replica is left as it is.
    pub(crate) fn await_candidate(&self) {
        if self.is_quiet() {
            self.awaiting_candidate.store(true, Ordering::SeqCst);
        }
    }

    /// Whether this quiet replica waits for a takeover's candidate (see
    /// [`Self::await_candidate`]).
    pub fn is_awaiting_candidate(&self) -> bool {
        self.is_quiet() && self.awaiting_candidate.load(Ordering::SeqCst)
    }

    /// The followers a quiet leader went quiet without (empty when awake).
    pub fn absent(&self) -> Vec<u64> {
        if self.is_quiet() {
            self.absent.lock().clone()
        } else {
            Vec::new()
        }
    }

    /// On a quiet leader whose follower `peer` stopped answering: records it absent when the
    /// others still make a quorum, so the group stays quiet. Answers whether it did (else the
    /// caller wakes the group).
    pub(crate) fn mark_absent(&self, peer: u64, voters: &[u64]) -> bool {
        let mut absent = self.absent.lock();
        if !self.is_quiet() {
            return false;
        }
        if absent.contains(&peer) {
            return true;
        }
        let present = voters
            .iter()
            .filter(|voter| **voter != peer && !absent.contains(voter))
            .count();
        if !is_quorum(present, voters.len()) {
            return false;
        }
        absent.push(peer);
        true
    }

    /// On a replica that restarted: when the vote it kept is for another node (its leader, or
    /// a candidate it voted for), quiet from the start (see the module docs); a message from
    /// its group or the cluster layer wakes it. Answers what the kept vote made it.
    pub(crate) async fn start_dormant<SM>(
        &self,
        raft: &Raft<TypeConfig, SM>,
        node_id: u64,
    ) -> RestartedAs
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        // Asked of the core, not read off the metrics: until the core has published its
        // first metrics they name no leader, and on a node starting 10,000 replicas many were
        // read that early, so those replicas campaigned instead of waiting. A vote for another
        // node that is not committed counts too: it was granted to a candidate (a hand-off's
        // target, typically) whose first append did not arrive before the stop. That candidate
        // most likely leads now; if nobody claims the group, the cluster layer wakes this
        // replica to elect.
        let kept = raft
            .with_raft_state(move |state| {
                let vote = state.vote_ref();
                let voted_for = vote.leader_id();
                if voted_for.term > 0 && voted_for.node_id != node_id {
                    RestartedAs::Dormant
                } else if voted_for.node_id == node_id && vote.is_committed() {
                    RestartedAs::Leader {
                        term: voted_for.term,
                    }
                } else {
                    RestartedAs::Follower
                }
            })
            .await
            .unwrap_or(RestartedAs::Follower);
        if kept == RestartedAs::Dormant {
            self.go_dormant(raft);
        }
        kept
    }

    /// Quiet, no ticks, until something wakes it (its leader's next message, or the cluster
    /// layer when that leader falls silent or stops claiming the group): on a follower whose
    /// election timer ran out while its leader is alive (see `leader_liveness`), and under
    /// [`Self::go_dormant`]. Answers whether it was awake.
    pub(crate) fn stand_down<SM>(&self, raft: &Raft<TypeConfig, SM>) -> bool
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        if self.quiet.swap(true, Ordering::SeqCst) {
            return false;
        }
        raft.runtime_config().tick(false);
        true
    }

    /// Quiet, no ticks, waiting to be woken (counted once, however often it is asked).
    fn go_dormant<SM>(&self, raft: &Raft<TypeConfig, SM>)
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        if self.stand_down(raft) {
            metrics::counter!(DORMANT_STARTS_TOTAL).increment(1);
        }
    }

    /// On a replica whose kept vote made it the leader again (openraft's leader restore) in
    /// `restored_term`: if within `within` it steps down at a newer term (another node was
    /// elected while it was away), it goes quiet to wait for that leader's heartbeat, as if it
    /// had restarted voting for it (see the module docs). Watches in a task of its own.
    pub(crate) fn dormant_after_step_down<SM>(
        self: &std::sync::Arc<Self>,
        raft: &Raft<TypeConfig, SM>,
        restored_term: u64,
        within: Duration,
    ) where
        SM: RaftStateMachine<TypeConfig>,
    {
        let quiescence = self.clone();
        let mut metrics = raft.metrics();
        let raft = raft.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + within;
            loop {
                let (state, term, alone) = {
                    let metrics = metrics.borrow_watched();
                    let voters = metrics.membership_config.membership().voter_ids().count();
                    (metrics.state, metrics.current_term, voters <= 1)
                };
                match state {
                    // The only voter: nobody else can have been elected.
                    ServerState::Leader if alone => return,
                    // Stepped down at a newer term (by the term, not by a leadership seen in
                    // the metrics first: they are published late, and begin as a follower's):
                    // waits for the newer leader even before it is known (a vote it granted
                    // names none yet). Campaigning while that leader's group is quiet would
                    // only disrupt it, and on a loaded node the election timer ran out before
                    // the leader's first heartbeat came.
                    ServerState::Follower if term > restored_term => {
                        quiescence.go_dormant(&raft);
                        return;
                    }
                    ServerState::Candidate | ServerState::Shutdown => return,
                    _ => {}
                }
                match tokio::time::timeout_at(deadline, metrics.changed()).await {
                    Ok(Ok(())) => {}
                    _ => return,
                }
            }
        });
    }

    /// On the leader: an offer to go quiet when the group was idle for `idle_after`, a quorum
    /// of voters holds the leader's whole log committed and applied, every follower `is_up`
    /// says is up among them, and no membership change is under way. Marks the group quiet
    /// (ticks still on) until [`Self::settle`].
    pub(crate) fn offer<SM>(
        &self,
        raft: &Raft<TypeConfig, SM>,
        node_id: u64,
        idle_after: Duration,
        is_up: impl Fn(u64) -> bool,
    ) -> Option<QuiesceOffer>
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        if self.is_quiet() || self.idle_for() < idle_after {
            return None;
        }
        let active_at_ms = self.active_at_ms.load(Ordering::SeqCst);
        let metrics = raft.metrics().borrow_watched().clone();
        if metrics.state != ServerState::Leader || metrics.current_leader != Some(node_id) {
            return None;
        }
        let last_index = metrics.last_log_index?;
        let committed = metrics.local_committed.map(|log_id| log_id.index);
        let applied = metrics.last_applied.map(|log_id| log_id.index);
        if committed != Some(last_index) || applied != Some(last_index) {
            return None;
        }
        let config = metrics.membership_config.membership();
        if config.get_joint_config().len() > 1 || config.learner_ids().next().is_some() {
            return None;
        }
        let voters = config.voter_ids().count();
        let (followers, absent): (Vec<u64>, Vec<u64>) = config
            .voter_ids()
            .filter(|id| *id != node_id)
            .partition(|id| is_up(*id));
        if !is_quorum(followers.len() + 1, voters) {
            return None;
        }
        let replication = metrics.replication.as_ref()?;
        let all_matched = followers.iter().all(|follower| {
            replication
                .get(follower)
                .cloned()
                .flatten()
                .is_some_and(|matched| matched.index == last_index)
        });
        if !all_matched {
            return None;
        }
        self.begin_offer();
        Some(QuiesceOffer {
            term: metrics.current_term,
            last_index,
            followers,
            absent,
            active_at_ms,
        })
    }

    /// Marks the group quiet while its offer is out, with nobody absent yet: a follower that
    /// stops answering meanwhile is recorded by [`Self::mark_absent`] (the cluster layer checks
    /// its peers while offers are out) and kept by [`Self::settle_absent`].
    fn begin_offer(&self) {
        let mut absent = self.absent.lock();
        absent.clear();
        self.quiet.store(true, Ordering::SeqCst);
    }

    /// Adds the followers that were down when `offer` was made to those that stopped answering
    /// while it was out. Answers whether the rest, the leader included, still make a majority.
    fn settle_absent(&self, offer: &QuiesceOffer) -> bool {
        let mut absent = self.absent.lock();
        for peer in &offer.absent {
            if !absent.contains(peer) {
                absent.push(*peer);
            }
        }
        let voters = offer.followers.len() + offer.absent.len() + 1;
        is_quorum(voters - absent.len(), voters)
    }

    /// On the leader, once the followers answered `offer`: ticks off when all agreed and
    /// nothing happened meanwhile, else back to normal. Answers whether the group is quiet.
    pub(crate) fn settle<SM>(
        &self,
        raft: &Raft<TypeConfig, SM>,
        offer: &QuiesceOffer,
        all_agreed: bool,
    ) -> bool
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        if !all_agreed {
            // The followers that did agree wake with the next heartbeat.
            self.quiet.store(false, Ordering::SeqCst);
            return false;
        }
        if !self.is_quiet() {
            // A write woke it while the offer was out.
            return false;
        }
        if !self.settle_absent(offer) {
            self.quiet.store(false, Ordering::SeqCst);
            return false;
        }
        raft.runtime_config().tick(false);
        let last_index = raft.metrics().borrow_watched().last_log_index;
        let changed = self.active_at_ms.load(Ordering::SeqCst) != offer.active_at_ms
            || last_index != Some(offer.last_index);
        if changed || !self.is_quiet() {
            self.quiet.store(false, Ordering::SeqCst);
            raft.runtime_config().tick(true);
            return false;
        }
        true
    }

    /// On a follower: goes quiet when `leader` leads it in `term` and this replica holds, has
    /// committed and applied the leader's log up to `last_index` (and no further).
    pub(crate) fn accept<SM>(
        &self,
        raft: &Raft<TypeConfig, SM>,
        leader: u64,
        term: u64,
        last_index: u64,
    ) -> bool
    where
        SM: RaftStateMachine<TypeConfig>,
    {
        let metrics = raft.metrics().borrow_watched().clone();
        let caught_up = metrics.state == ServerState::Follower
            && metrics.current_leader == Some(leader)
            && metrics.current_term == term
            && metrics.last_log_index == Some(last_index)
            && metrics.local_committed.map(|log_id| log_id.index) == Some(last_index)
            && metrics.last_applied.map(|log_id| log_id.index) == Some(last_index);
        if !caught_up {
            return false;
        }
        self.quiet.store(true, Ordering::SeqCst);
        raft.runtime_config().tick(false);
        // An append that arrived meanwhile (it woke nothing: the flag was not set yet).
        let now = raft.metrics().borrow_watched().last_log_index;
        if now != Some(last_index) {
            self.wake(raft);
            return false;
        }
        true
    }
}

/// What a restarted replica's kept vote made it ([`Quiescence::start_dormant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartedAs {
    /// Voted for another node: quiet, waiting for it.
    Dormant,
    /// Led the group in `term` (openraft restores the leadership).
    Leader { term: u64 },
    /// Neither (it had voted for itself without winning, or never voted).
    Follower,
}

/// Counter of partition replicas that restarted quiet, waiting for their leader.
pub const DORMANT_STARTS_TOTAL: &str = "herald_raft_dormant_starts_total";

/// Counter of quiet groups woken (a write, a raft message, a peer that stopped answering).
pub const QUIESCENCE_WAKES_TOTAL: &str = "herald_raft_quiescence_wakes_total";

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet() -> Quiescence {
        let quiescence = Quiescence::default();
        quiescence.quiet.store(true, Ordering::SeqCst);
        quiescence
    }

    #[test]
    fn an_awake_group_records_nobody_absent() {
        let quiescence = Quiescence::default();
        assert!(!quiescence.mark_absent(3, &[1, 2, 3]));
        assert!(quiescence.absent().is_empty());
    }

    #[test]
    fn a_quiet_group_stays_quiet_without_followers_while_the_rest_make_a_majority() {
        let quiescence = quiet();
        assert!(quiescence.mark_absent(3, &[1, 2, 3]));
        assert!(quiescence.mark_absent(3, &[1, 2, 3]), "already absent");
        assert_eq!(quiescence.absent(), [3]);
        assert!(
            !quiescence.mark_absent(2, &[1, 2, 3]),
            "one of three is no majority: the group must wake"
        );
        assert_eq!(quiescence.absent(), [3]);

        let five = quiet();
        assert!(five.mark_absent(4, &[1, 2, 3, 4, 5]));
        assert!(five.mark_absent(5, &[1, 2, 3, 4, 5]));
        assert!(!five.mark_absent(3, &[1, 2, 3, 4, 5]));
        assert_eq!(five.absent(), [4, 5]);
    }

    fn offer(followers: Vec<u64>, absent: Vec<u64>) -> QuiesceOffer {
        QuiesceOffer {
            term: 1,
            last_index: 1,
            followers,
            absent,
            active_at_ms: 0,
        }
    }

    #[test]
    fn a_follower_that_stops_answering_while_an_offer_is_out_stays_absent() {
        let quiescence = quiet();
        assert!(quiescence.mark_absent(2, &[1, 2, 3]));
        // Woken since; a new offer starts with nobody absent.
        quiescence.quiet.store(false, Ordering::SeqCst);
        quiescence.begin_offer();
        assert!(
            quiescence.absent().is_empty(),
            "an old absence outlived a wake"
        );
        // Node 3 stops answering while the offer (to 2 and 3) is out.
        assert!(quiescence.mark_absent(3, &[1, 2, 3]));
        assert!(quiescence.settle_absent(&offer(vec![2, 3], vec![])));
        assert_eq!(quiescence.absent(), [3]);

        // Five voters, 5 down at the offer, 4 stops answering meanwhile: 3 of 5 remain.
        let five = Quiescence::default();
        five.begin_offer();
        assert!(five.mark_absent(4, &[1, 2, 3, 4, 5]));
        assert!(five.settle_absent(&offer(vec![2, 3, 4], vec![5])));
        assert_eq!(five.absent(), [4, 5]);
        // Two more would leave no majority.
        let three = Quiescence::default();
        three.begin_offer();
        assert!(three.mark_absent(2, &[1, 2, 3]));
        assert!(!three.settle_absent(&offer(vec![2], vec![3])));
    }

    #[test]
    fn a_majority_is_more_than_half() {
        assert!(is_quorum(2, 3));
        assert!(!is_quorum(1, 3));
        assert!(!is_quorum(2, 4));
        assert!(is_quorum(3, 5));
        assert!(is_quorum(1, 1));
    }
}
