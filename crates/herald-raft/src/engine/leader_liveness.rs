//! Whether a group's leader is alive, asked before a partition replica campaigns: a follower
//! whose election timer ran out while its leader's node is alive and still claims the group
//! goes quiet instead, and waits for that leader's next message.
//!
//! A quiet group exchanges no heartbeats, so what tells its followers that the leader lives is
//! the node-to-node pings of the cluster layer, not raft's per-group lease (see
//! `quiescence`). A follower that was woken (by its leader catching it up after a restart, or
//! by a write) runs its election timer again, and that timer can run out while the leader is
//! alive: the leader went quiet again without it (this node answered the offer late), or its
//! heartbeats came late (a node starting 10,000 replicas answers everything late). Raft would
//! campaign then. Against a quiet leader the campaign wins (the voters' leases on it ran out
//! long ago) and moves a healthy group's leadership for nothing; on a loaded node thousands of
//! them feed each other, every election adding load that makes more timers run out. That
//! storm kept a restarted node holding 10,000 replicas from becoming ready for minutes
//! (`benches/cluster-idle.sh`). So, as CockroachDB lets a follower of a quiesced range
//! campaign only when node liveness says its leader is gone, a partition replica asks here
//! before its pre-vote leaves (`network::PeerClient::pre_vote`); when its leader is alive it
//! goes quiet instead of campaigning, and a message from the leader wakes it.
//!
//! What still elects: a leader whose process is gone (its connection drops: no longer alive at
//! once), that is silent for the election timeout (the cluster layer then also wakes the quiet
//! groups it leads), or that no longer claims the group (the cluster layer wakes the quiet
//! replicas of groups nobody claims). Leadership transfers and takeovers vote without a
//! pre-vote and are not asked about.

use std::sync::OnceLock;

use herald_domain::RaftGroupId;

/// `(group, leader)`: whether `leader` is alive and leads `group`, as the cluster layer sees it.
type LivenessCheck = Box<dyn Fn(RaftGroupId, u64) -> bool + Send + Sync>;

/// The cluster layer's answer to "is this group's leader alive?", set once it exists (the
/// groups start before it does). Until then, and where it is never set, no leader counts as
/// alive: replicas campaign as raft alone would.
#[derive(Default)]
pub struct LeaderLiveness {
    check: OnceLock<LivenessCheck>,
}

impl LeaderLiveness {
    /// Sets the check (only the first call counts).
    pub fn set(&self, check: impl Fn(RaftGroupId, u64) -> bool + Send + Sync + 'static) {
        let _ = self.check.set(Box::new(check));
    }

    /// Whether `leader` is alive and leads `group`.
    pub(crate) fn is_alive(&self, group: RaftGroupId, leader: u64) -> bool {
        self.check.get().is_some_and(|check| check(group, leader))
    }
}

impl std::fmt::Debug for LeaderLiveness {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LeaderLiveness")
            .field("set", &self.check.get().is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_leader_is_alive_until_the_check_is_set() {
        let liveness = LeaderLiveness::default();
        let group = RaftGroupId::new(7);
        assert!(!liveness.is_alive(group, 2));
        liveness.set(|group, leader| group.get() == 7 && leader == 2);
        assert!(liveness.is_alive(group, 2));
        assert!(!liveness.is_alive(group, 3));
        // The first check stays.
        liveness.set(|_, _| true);
        assert!(!liveness.is_alive(group, 3));
    }
}
