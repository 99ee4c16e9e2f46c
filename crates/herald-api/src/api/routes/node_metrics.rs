//! The gauges read at scrape time (not kept in the metrics recorder, so nothing stale
//! outlives a group that moved away or a deleted topic): raft progress per group, storage, and
//! consumer-group lag in messages and seconds per partition. Rendered in the Prometheus text
//! format after the recorder's own output.

use std::fmt::Write as _;

use crate::api::routes::groups::label;
use crate::broker::node_gauges::{GroupRaftStatus, ReplicaOffsets, StorageGauges, RAFT_ROLES};
use crate::broker::GroupLagAge;

/// A per-group raft gauge: its name, help text and how to read it off a status.
type RaftSeries = (&'static str, &'static str, fn(&GroupRaftStatus) -> u64);
type ReplicaSeries = (&'static str, &'static str, fn(&ReplicaOffsets) -> u64);

fn family(text: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// `herald_raft_*` for every local raft group.
pub(in crate::api) fn render_raft(statuses: &[GroupRaftStatus]) -> String {
    let mut text = String::new();
    family(
        &mut text,
        "herald_raft_role",
        "gauge",
        "1 for this node's role in a raft group (label role), 0 for the others",
    );
    for group in statuses {
        for role in RAFT_ROLES {
            let value = u8::from(group.status.role == role);
            let _ = writeln!(
                text,
                "herald_raft_role{{raft_group=\"{}\",role=\"{role}\"}} {value}",
                label(&group.raft_group)
            );
        }
    }
    let series: [RaftSeries; 4] = [
        (
            "herald_raft_term",
            "The raft group's current term on this node",
            |group| group.status.term,
        ),
        (
            "herald_raft_last_log_index",
            "The last index in this node's log of the raft group",
            |group| group.status.last_log_index,
        ),
        (
            "herald_raft_commit_index",
            "The last index this node knows to be committed",
            |group| group.status.committed_index,
        ),
        (
            "herald_raft_applied_index",
            "The last index this node has applied",
            |group| group.status.applied_index,
        ),
    ];
    for (name, help, value) in series {
        family(&mut text, name, "gauge", help);
        for group in statuses {
            let _ = writeln!(
                text,
                "{name}{{raft_group=\"{}\"}} {}",
                label(&group.raft_group),
                value(group)
            );
        }
    }
    family(
        &mut text,
        "herald_raft_follower_lag_entries",
        "gauge",
        "On a group's leader: entries each follower is behind the leader's log",
    );
    for group in statuses {
        for (follower, behind) in &group.status.follower_lag {
            let _ = writeln!(
                text,
                "herald_raft_follower_lag_entries{{raft_group=\"{}\",follower=\"{follower}\"}} {behind}",
                label(&group.raft_group)
            );
        }
    }
    let replica_series: [ReplicaSeries; 4] = [
        (
            "herald_replica_log_start_offset",
            "This replica's view of the partition's first retained offset",
            |offsets| offsets.log_start_offset,
        ),
        (
            "herald_replica_high_watermark",
            "This replica's view of the partition's high watermark",
            |offsets| offsets.high_watermark,
        ),
        (
            "herald_replica_purged_offset",
            "The log start whose prefix this replica purged from its raft log",
            |offsets| offsets.purged_offset,
        ),
        (
            "herald_replica_checkpointed_offset",
            "The high watermark as of the newest checkpoint of this replica's state",
            |offsets| offsets.checkpointed_offset,
        ),
    ];
    for (name, help, value) in replica_series {
        family(&mut text, name, "gauge", help);
        for offsets in statuses.iter().filter_map(|group| group.replica.as_ref()) {
            let _ = writeln!(
                text,
                "{name}{{topic=\"{}\",partition=\"{}\"}} {}",
                label(&offsets.topic),
                offsets.partition,
                value(offsets)
            );
        }
    }
    text
}

/// `herald_storage_*` gauges of the node's RocksDB and the file system under it.
pub(in crate::api) fn render_storage(gauges: &StorageGauges) -> String {
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        family(&mut text, name, "gauge", help);
        let _ = writeln!(text, "{name} {value}");
    };
    gauge(
        "herald_storage_sst_bytes",
        "Bytes of live SST files over every column family",
        gauges.sst_bytes,
    );
    gauge(
        "herald_storage_memtable_bytes",
        "Bytes in memtables, written and not yet flushed",
        gauges.memtable_bytes,
    );
    gauge(
        "herald_storage_block_cache_bytes",
        "Bytes of blocks in the block cache (bounded by storage.block_cache_bytes)",
        gauges.block_cache_bytes,
    );
    gauge(
        "herald_storage_block_cache_pinned_bytes",
        "Bytes of cached blocks pinned by open iterators and table readers",
        gauges.block_cache_pinned_bytes,
    );
    gauge(
        "herald_storage_table_readers_bytes",
        "Bytes the open SST table readers hold outside the block cache (indexes, filters)",
        gauges.table_readers_bytes,
    );
    gauge(
        "herald_storage_pending_compaction_bytes",
        "Bytes RocksDB estimates compaction still has to rewrite",
        gauges.pending_compaction_bytes,
    );
    gauge(
        "herald_storage_write_stopped",
        "1 while RocksDB stops writes (too many L0 files or too much compaction debt)",
        u64::from(gauges.write_stopped),
    );
    gauge(
        "herald_storage_delayed_write_rate_bytes",
        "The rate RocksDB slows writes to, bytes/s; 0 when writes are not delayed",
        gauges.delayed_write_rate,
    );
    gauge(
        "herald_storage_disk_full",
        "1 while the data directory's free space is under storage.disk_reserve_bytes: produce requests are refused (507)",
        u64::from(gauges.disk_full),
    );
    if let (Some(total), Some(free)) = (gauges.disk_total_bytes, gauges.disk_free_bytes) {
        gauge(
            "herald_storage_disk_total_bytes",
            "Size of the file system holding the data directory",
            total,
        );
        gauge(
            "herald_storage_disk_free_bytes",
            "Space left to this process on the file system holding the data directory",
            free,
        );
    }
    text
}

/// Consumer-group lag per partition, in messages and in seconds, from the partitions' leaders.
pub(in crate::api) fn render_lag_ages(ages: &[GroupLagAge]) -> String {
    let mut text = String::new();
    family(
        &mut text,
        "herald_group_partition_lag",
        "gauge",
        "Messages after a group's committed offset on a partition (from the partition's leader)",
    );
    for age in ages {
        let _ = writeln!(
            text,
            "herald_group_partition_lag{{group=\"{}\",topic=\"{}\",partition=\"{}\"}} {}",
            label(&age.group),
            label(&age.topic),
            age.partition,
            age.messages
        );
    }
    family(
        &mut text,
        "herald_group_lag_seconds",
        "gauge",
        "Age of the oldest message a group has not consumed on a partition; 0 when caught up",
    );
    for age in ages {
        let _ = writeln!(
            text,
            "herald_group_lag_seconds{{group=\"{}\",topic=\"{}\",partition=\"{}\"}} {}",
            label(&age.group),
            label(&age.topic),
            age.partition,
            age.seconds
        );
    }
    text
}
