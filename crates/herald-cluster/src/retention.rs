//! Retention by time and size, driven by each partition's leader: every
//! `retention_check_interval` it plans which whole batches expired and replicates a `Trim`, so
//! every replica moves its log start at the same point of the log. Every replica then purges
//! the trimmed raft log prefix and gives the disk space back (checked every second in a loop of
//! its own: cheap when there is nothing to do). The loop itself is `reconcile::every`.

use herald_domain::RaftGroupId;
use std::collections::HashMap;

use super::{now_ms, Cluster};
use herald_domain::topic::{CleanupPolicy, TopicConfig};

impl Cluster {
    /// On every partition this node leads: trim what its topic's retention lets go.
    pub(super) async fn apply_retention(&self) {
        let metadata = self.metadata.current();
        let configs: HashMap<RaftGroupId, &TopicConfig> = metadata
            .partitions()
            .map(|(topic, _, assignment)| (assignment.group_id, &topic.config))
            .collect();
        let now = now_ms();
        for replica in self.replicas.all() {
            if !replica.is_leader() {
                continue;
            }
            let Some(config) = configs.get(&replica.group()) else {
                continue;
            };
            if config.cleanup_policy == CleanupPolicy::Compact {
                continue;
            }
            let cutoff =
                (config.retention_ms >= 0).then(|| now.saturating_sub(config.retention_ms));
            let max_bytes = u64::try_from(config.retention_bytes).ok();
            if cutoff.is_none() && max_bytes.is_none() {
                continue;
            }
            let group = replica.group();
            match replica.plan_retention(cutoff, max_bytes).await {
                Ok(Some(plan)) => match replica.trim(plan).await {
                    Ok(start) => {
                        tracing::info!(
                            group = group.get(),
                            log_start_offset = start,
                            "retention trimmed a partition"
                        );
                        metrics::counter!("herald_retention_trims_total").increment(1);
                    }
                    Err(error) => {
                        tracing::warn!(group = group.get(), %error, "retention trim failed")
                    }
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(group = group.get(), %error, "retention planning failed")
                }
            }
        }
        self.purge_trimmed().await;
        self.plan_compaction().await;
    }

    /// On every local replica: purge the raft log below its log start, if not done yet.
    pub(super) async fn purge_trimmed(&self) {
        for replica in self.replicas.all() {
            if let Err(error) = replica.purge_trimmed().await {
                tracing::warn!(group = replica.group().get(), %error, "purging a trimmed prefix failed");
            }
        }
    }
}
