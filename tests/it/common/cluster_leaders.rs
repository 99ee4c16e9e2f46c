//! Who leads in a cluster: the metadata leader once the live nodes agree on it, a partition's
//! leader (any, a new one after a failover, or a stable one with every replica in sync), and
//! waits on a partition's state (in-sync count, any predicate) as a node reports it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cluster::{TestCluster, CATCH_UP_DEADLINE, ELECTION_DEADLINE, POLL};
use super::poll;

impl TestCluster {
    /// The metadata leader, once every live member names the same one.
    pub async fn metadata_leader(&self) -> u64 {
        poll(ELECTION_DEADLINE, POLL, || async {
            let mut leaders = BTreeSet::new();
            let mut problem = None;
            for id in self.live_ids() {
                match self.cluster_view(id).await {
                    Ok(view) => match view["metadata_leader"].as_u64() {
                        Some(leader) => {
                            leaders.insert(leader);
                        }
                        None => problem = Some(format!("node {id}: no metadata leader: {view}")),
                    },
                    Err(err) => problem = Some(err),
                }
            }
            if problem.is_none() && leaders.len() == 1 {
                return Ok(leaders.into_iter().next().unwrap());
            }
            Err(format!("{leaders:?} {problem:?}"))
        })
        .await
        .unwrap_or_else(|seen| {
            self.fail(&format!(
                "the live nodes did not agree on a metadata leader within {ELECTION_DEADLINE:?}: {seen}"
            ))
        })
    }

    /// The leader of a partition as a live node reports it, once it is not null (and is a live
    /// member: a paused or dead node's claim is not taken).
    pub async fn leader_of(&self, topic: &str, partition: u32) -> u64 {
        self.wait_for_leader(topic, partition, None).await
    }

    /// The leader of a partition once every live node has reported the same live leader, with
    /// every replica in sync, for `LEADER_SETTLE` in a row: a leader that is about to hand its
    /// leadership on (e.g. back to a preferred replica) is not taken for the leader.
    pub async fn stable_leader(&self, topic: &str, partition: u32) -> u64 {
        const LEADER_SETTLE: Duration = Duration::from_millis(2500);
        let deadline = Instant::now() + CATCH_UP_DEADLINE;
        let mut candidate: Option<(u64, Instant)> = None;
        loop {
            let live = self.live_ids();
            let mut leaders = BTreeSet::new();
            let mut last = String::new();
            for &via in &live {
                match self.partition_view(via, topic, partition).await {
                    Ok(view) => {
                        let all_in_sync = view["in_sync"].as_array().map(Vec::len)
                            == view["replicas"].as_array().map(Vec::len);
                        match view["leader"].as_u64() {
                            Some(leader) if all_in_sync && live.contains(&leader) => {
                                leaders.insert(leader);
                            }
                            _ => {
                                leaders.insert(0);
                            }
                        }
                        last = format!("node {via}: {view}");
                    }
                    Err(err) => {
                        leaders.insert(0);
                        last = err;
                    }
                }
            }
            let agreed = match leaders.iter().collect::<Vec<_>>()[..] {
                [&leader] if leader != 0 => Some(leader),
                _ => None,
            };
            candidate = match (agreed, candidate) {
                (Some(leader), Some((same, since))) if leader == same => {
                    if since.elapsed() >= LEADER_SETTLE {
                        return leader;
                    }
                    Some((same, since))
                }
                (Some(leader), _) => Some((leader, Instant::now())),
                (None, _) => None,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "{topic}/{partition}: the live nodes did not agree on one leader with all \
                     replicas in sync for {LEADER_SETTLE:?} within {CATCH_UP_DEADLINE:?}; \
                     reported {leaders:?}; last: {last}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the live nodes report a leader of the partition other than `old`.
    pub async fn wait_for_leader_change(&self, topic: &str, partition: u32, old: u64) -> u64 {
        self.wait_for_leader(topic, partition, Some(old)).await
    }

    async fn wait_for_leader(&self, topic: &str, partition: u32, not: Option<u64>) -> u64 {
        poll(ELECTION_DEADLINE, POLL, || async {
            let live = self.live_ids();
            let mut last = String::new();
            for &via in &live {
                match self.partition_view(via, topic, partition).await {
                    Ok(view) => match view["leader"].as_u64() {
                        Some(leader) if Some(leader) != not && live.contains(&leader) => {
                            return Ok(leader)
                        }
                        _ => last = format!("node {via}: {view}"),
                    },
                    Err(err) => last = err,
                }
            }
            Err(last)
        })
        .await
        .unwrap_or_else(|last| {
            self.fail(&format!(
                "{topic}/{partition}: no live leader (other than {not:?}) within {ELECTION_DEADLINE:?}; last: {last}"
            ))
        })
    }

    /// Waits until a live node reports the partition with a leader and `n` replicas in sync.
    pub async fn wait_until_in_sync(&self, topic: &str, partition: u32, n: usize) -> Value {
        let via = self.first_live();
        self.wait_for_partition(via, topic, partition, CATCH_UP_DEADLINE, |p| {
            p["leader"].is_u64() && p["in_sync"].as_array().map(Vec::len) == Some(n)
        })
        .await
    }

    /// Waits until node `via` reports the partition so that `pred` holds; returns it.
    pub async fn wait_for_partition(
        &self,
        via: u64,
        topic: &str,
        partition: u32,
        within: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        poll(within, POLL, || async {
            match self.partition_view(via, topic, partition).await {
                Ok(view) if pred(&view) => Ok(view),
                Ok(view) => Err(view.to_string()),
                Err(err) => Err(err),
            }
        })
        .await
        .unwrap_or_else(|last| {
            self.fail(&format!(
                "{topic}/{partition} via node {via}: not as expected within {within:?}; last: {last}"
            ))
        })
    }
}
