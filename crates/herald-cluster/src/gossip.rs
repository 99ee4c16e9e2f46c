//! Who leads which group, as the leaders themselves report it.
//!
//! Every node pings every other node once a second; the answer lists the groups the peer
//! leads, with their voters and in-sync replicas. That lets any node route a request for a
//! partition it holds no replica of, show leaders and in-sync replicas for every partition, and
//! tell which nodes are up, without a round of RPCs per request.

use herald_domain::RaftGroupId;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::service::{GroupLeadership, PingReport};

/// Reports older than this are not trusted: their node may be gone.
pub(super) const REPORT_TTL: Duration = Duration::from_secs(3);
/// How often each peer is pinged.
pub(super) const PING_INTERVAL: Duration = Duration::from_millis(1000);

struct Claim {
    leader: u64,
    leadership: GroupLeadership,
    seen: Instant,
}

#[derive(Default)]
pub(super) struct LeaderMap {
    claims: RwLock<HashMap<RaftGroupId, Claim>>,
    /// When each node's last report came in.
    reported: RwLock<HashMap<u64, Instant>>,
}

impl LeaderMap {
    /// Takes in what `report.node_id` leads now; drops what it no longer claims.
    pub(super) fn absorb(&self, report: PingReport) {
        let now = Instant::now();
        self.reported.write().insert(report.node_id, now);
        // A set: a node reports thousands of groups, and each of its claims is looked up.
        let led: HashSet<RaftGroupId> = report.leads.iter().map(|led| led.group).collect();
        let mut claims = self.claims.write();
        claims.retain(|group, claim| claim.leader != report.node_id || led.contains(group));
        for leadership in report.leads {
            let newer = claims.get(&leadership.group).is_none_or(|claim| {
                leadership.term >= claim.leadership.term
                    || now.duration_since(claim.seen) > REPORT_TTL
            });
            if newer {
                claims.insert(
                    leadership.group,
                    Claim {
                        leader: report.node_id,
                        leadership,
                        seen: now,
                    },
                );
            }
        }
    }

    /// The freshest leader claim for `group`, if recent.
    pub(super) fn get(&self, group: RaftGroupId) -> Option<(u64, GroupLeadership)> {
        let claims = self.claims.read();
        let claim = claims.get(&group)?;
        (claim.seen.elapsed() <= REPORT_TTL).then(|| (claim.leader, claim.leadership.clone()))
    }

    /// The node that recently claimed to lead `group`, if any (no copy of the claim).
    pub(super) fn claimant(&self, group: RaftGroupId) -> Option<u64> {
        let claims = self.claims.read();
        let claim = claims.get(&group)?;
        (claim.seen.elapsed() <= REPORT_TTL).then_some(claim.leader)
    }

    /// Whether `node` reported what it leads recently: a group missing from its report is
    /// one it does not lead.
    pub(super) fn has_fresh_report(&self, node: u64) -> bool {
        self.reported
            .read()
            .get(&node)
            .is_some_and(|at| at.elapsed() <= REPORT_TTL)
    }

    /// Forgets a node's claims (e.g. it answered that it does not lead a group any more).
    pub(super) fn forget(&self, group: RaftGroupId, leader: u64) {
        let mut claims = self.claims.write();
        if claims
            .get(&group)
            .is_some_and(|claim| claim.leader == leader)
        {
            claims.remove(&group);
        }
    }

    /// Every recent claim: group to leader.
    pub(super) fn leaders(&self) -> HashMap<RaftGroupId, u64> {
        self.claims
            .read()
            .iter()
            .filter(|(_, claim)| claim.seen.elapsed() <= REPORT_TTL)
            .map(|(group, claim)| (*group, claim.leader))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn led(group: RaftGroupId, term: u64) -> GroupLeadership {
        GroupLeadership {
            group,
            term,
            voters: vec![1, 2, 3],
            learners: vec![],
            in_sync: vec![1, 2],
            log_start_offset: 0,
            high_watermark: 0,
        }
    }

    #[test]
    fn newer_terms_win_and_dropped_claims_go() {
        let map = LeaderMap::default();
        map.absorb(PingReport {
            node_id: 1,
            leads: vec![led(RaftGroupId::new(7), 3), led(RaftGroupId::new(8), 1)],
        });
        assert_eq!(
            map.get(RaftGroupId::new(7)).map(|(leader, _)| leader),
            Some(1)
        );
        // Node 2 claims group 7 with an older term: ignored.
        map.absorb(PingReport {
            node_id: 2,
            leads: vec![led(RaftGroupId::new(7), 2)],
        });
        assert_eq!(
            map.get(RaftGroupId::new(7)).map(|(leader, _)| leader),
            Some(1)
        );
        // Node 2 wins a newer term.
        map.absorb(PingReport {
            node_id: 2,
            leads: vec![led(RaftGroupId::new(7), 4)],
        });
        assert_eq!(
            map.get(RaftGroupId::new(7)).map(|(leader, _)| leader),
            Some(2)
        );
        // Node 1 no longer claims group 8.
        map.absorb(PingReport {
            node_id: 1,
            leads: vec![],
        });
        assert!(map.get(RaftGroupId::new(8)).is_none());
        assert_eq!(map.leaders().get(&RaftGroupId::new(7)), Some(&2));
    }
}
