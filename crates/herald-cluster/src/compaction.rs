//! Log compaction by key, for topics whose `cleanup_policy` is `compact` or `compact,delete`.
//! Each partition's leader checks every `retention_check_interval` whether a pass is due and
//! replicates its plan; every replica runs the passes it has queued, one at a time per node,
//! within the node's I/O budget (see `raft::partition::compaction` and `docs/architecture.md` §
//! Compaction).

use herald_domain::RaftGroupId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{now_ms, Cluster};
use herald_domain::topic::{CleanupPolicy, TopicConfig};
use herald_raft::{PartitionReplica, PassReport, PlanSettings, Throttle};

/// How this node's cleaner behaves. The budget is shared by every partition on the node: one
/// pass runs at a time.
#[derive(Debug, Clone, Copy)]
pub struct CleanerOptions {
    /// Bytes per second the cleaner may read and write, all partitions together.
    pub io_max_bytes_per_sec: u64,
    /// Memory for the key map of one pass; a leader plans passes that fit in it.
    pub dedupe_buffer_bytes: usize,
    /// A partition is cleaned once this share of its messages is dirty (written since the
    /// last pass).
    pub min_dirty_ratio: f64,
}

impl Default for CleanerOptions {
    fn default() -> Self {
        CleanerOptions {
            io_max_bytes_per_sec: 64 << 20,
            dedupe_buffer_bytes: 128 << 20,
            min_dirty_ratio: 0.5,
        }
    }
}

/// The node's cleaner: its options and the I/O budget every pass on this node draws from.
pub(super) struct Cleaner {
    pub(super) options: CleanerOptions,
    pub(super) throttle: Arc<Mutex<Throttle>>,
    /// Rounds of `clean_queued` so far (see [`SWEEP_EVERY`]).
    rounds: AtomicU64,
}

impl Cleaner {
    pub(super) fn new(options: CleanerOptions) -> Self {
        Cleaner {
            options,
            throttle: Arc::new(Mutex::new(Throttle::new(options.io_max_bytes_per_sec))),
            rounds: AtomicU64::new(0),
        }
    }
}

/// A compacted partition as the metrics name it, with its topic's configuration.
struct CompactedPartition {
    topic: String,
    partition: u32,
    config: TopicConfig,
}

/// Every how many cleaner rounds the replicas of partitions that are not compacted are
/// looked at for queued passes too.
const SWEEP_EVERY: u64 = 60;

impl Cluster {
    /// The partitions of compacted topics, by raft group.
    fn compacted_partitions(&self) -> HashMap<RaftGroupId, CompactedPartition> {
        self.metadata
            .current()
            .partitions()
            .filter(|(topic, _, _)| topic.config.cleanup_policy != CleanupPolicy::Delete)
            .map(|(topic, partition, assignment)| {
                let compacted = CompactedPartition {
                    topic: topic.name.clone(),
                    partition,
                    config: topic.config.clone(),
                };
                (assignment.group_id, compacted)
            })
            .collect()
    }

    /// On every compacted partition this node leads: replicate a compaction pass when one is
    /// due.
    pub(super) async fn plan_compaction(&self) {
        let partitions = self.compacted_partitions();
        for replica in self.replicas.all() {
            if !replica.is_leader() {
                continue;
            }
            let Some(partition) = partitions.get(&replica.group()) else {
                continue;
            };
            let settings = PlanSettings {
                now_ms: now_ms(),
                delete_retention_ms: partition.config.delete_retention_ms,
                min_compaction_lag_ms: partition.config.min_compaction_lag_ms,
                min_dirty_ratio: self.cleaner.options.min_dirty_ratio,
                map_budget: self.cleaner.options.dedupe_buffer_bytes,
            };
            let labels = [
                ("topic", partition.topic.clone()),
                ("partition", partition.partition.to_string()),
            ];
            let started = std::time::Instant::now();
            match replica
                .plan_compaction(settings, self.cleaner.throttle.clone())
                .await
            {
                Ok(check) => {
                    metrics::gauge!("herald_compaction_dirty_ratio", &labels)
                        .set(check.dirty_ratio);
                    if let Some(pass) = check.queued_pass {
                        tracing::info!(
                            group = replica.group().get(),
                            pass,
                            dirty_ratio = check.dirty_ratio,
                            plan_ms = started.elapsed().as_millis() as u64,
                            "compaction pass planned"
                        );
                    }
                }
                Err(error) => {
                    tracing::warn!(group = replica.group().get(), %error, "compaction planning failed")
                }
            }
        }
    }

    /// On every local replica: run the compaction passes it has queued. Where each compacted
    /// replica stands is published before and after (from its stored progress, so also after
    /// a restart, and a long pass shows as planned but not yet done).
    pub(super) async fn clean_queued(&self) {
        let partitions = self.compacted_partitions();
        // Passes are planned on compacted partitions only; a topic whose policy changed since
        // may still have one queued, so the others are looked at too, but rarely: a look is a
        // storage read, and thousands of idle partitions made these reads most of an idle
        // node's CPU.
        let sweep = self.cleaner.rounds.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == 0;
        for replica in self.replicas.all() {
            let group = replica.group();
            let partition = partitions.get(&group);
            if partition.is_none() && !sweep {
                continue;
            }
            if let Some(partition) = partition {
                publish_progress(&replica, partition).await;
            }
            let started = std::time::Instant::now();
            match replica.clean_queued(self.cleaner.throttle.clone()).await {
                Ok(reports) => {
                    for report in &reports {
                        record_pass(group, report, started.elapsed());
                    }
                }
                Err(error) => tracing::warn!(group = group.get(), %error, "compaction pass failed"),
            }
            if let Some(partition) = partition {
                publish_progress(&replica, partition).await;
            }
        }
    }
}

/// Per-replica gauges: passes planned and done here, and what the cleaned section holds.
async fn publish_progress(replica: &PartitionReplica, partition: &CompactedPartition) {
    let Ok((pass, tally)) = replica.cleaner_progress().await else {
        return;
    };
    let labels = [
        ("topic", partition.topic.clone()),
        ("partition", partition.partition.to_string()),
    ];
    metrics::gauge!("herald_compaction_planned_passes", &labels)
        .set(replica.planned_passes() as f64);
    metrics::gauge!("herald_compaction_last_pass", &labels).set(pass as f64);
    metrics::gauge!("herald_compaction_keys_kept", &labels).set(tally.records_kept as f64);
    metrics::gauge!("herald_compaction_bytes_kept", &labels).set(tally.bytes_kept as f64);
}

/// Metrics and a log line for a finished pass.
fn record_pass(group: RaftGroupId, report: &PassReport, took: std::time::Duration) {
    metrics::counter!("herald_compaction_passes_total").increment(1);
    metrics::counter!("herald_compaction_bytes_read_total").increment(report.bytes_read);
    metrics::counter!("herald_compaction_bytes_reclaimed_total").increment(report.bytes_reclaimed);
    metrics::counter!("herald_compaction_records_removed_total").increment(report.records_removed);
    tracing::info!(
        group = group.get(),
        pass = report.pass,
        dirty_keys = report.dirty_keys,
        bytes_read = report.bytes_read,
        bytes_reclaimed = report.bytes_reclaimed,
        records_removed = report.records_removed,
        records_kept = report.tally.records_kept,
        took_ms = took.as_millis() as u64,
        "compaction pass finished"
    );
}
