//! The groups' gauges (members, generation, lag), computed from the replicated state each
//! time `/metrics` is scraped.
//!
//! Group names are chosen by clients, so series labelled with them must neither outlive their
//! group nor grow without bound. A gauge set through the `metrics` recorder lives until the
//! process ends (the Prometheus exporter drops series only by a global idle timeout), so
//! these are not recorded at all: they are read off the state at scrape time, and a deleted
//! group's series are gone at the next scrape. Only the first `max_metric_groups` groups by
//! name are listed; the total count says how many there are. Only the metadata leader answers
//! them, so a dashboard that sums over nodes counts each group once.

use crate::GroupService;

use std::collections::BTreeMap;

use crate::{GroupGauge, GroupGauges};

impl GroupService {
    /// The gauges of the groups, or None on a node that is not the metadata leader.
    pub fn group_gauges(&self) -> Option<GroupGauges> {
        let cluster = self.core.cluster();
        if cluster.metadata().leader() != Some(cluster.node_id()) {
            return None;
        }
        let metadata = cluster.metadata().current();
        let limit = self.core.options.groups.max_metric_groups;
        Some(cluster.groups().read(|groups| {
            GroupGauges {
                total_groups: groups.groups.len(),
                listed: groups
                    .groups
                    .values()
                    .take(limit)
                    .map(|group| {
                        let mut lag: BTreeMap<&str, u64> = BTreeMap::new();
                        for (partition, committed) in &group.offsets {
                            let Some(assignment) =
                                metadata.topics.get(&partition.topic).and_then(|topic| {
                                    topic.partitions.get(partition.partition as usize)
                                })
                            else {
                                continue;
                            };
                            let end = cluster
                                .routing()
                                .partition_state(assignment.group_id)
                                .watermarks
                                .high_watermark;
                            *lag.entry(&partition.topic).or_default() +=
                                end.saturating_sub(committed.offset);
                        }
                        GroupGauge {
                            group: group.name.clone(),
                            members: group.members.len(),
                            generation: group.generation,
                            lag: lag
                                .into_iter()
                                .map(|(topic, lag)| (topic.to_string(), lag))
                                .collect(),
                        }
                    })
                    .collect(),
            }
        }))
    }
}
