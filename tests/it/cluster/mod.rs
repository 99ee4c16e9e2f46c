//! Three (or more) real nodes on loopback: replication, failover, partitions, membership, nodes
//! of two releases (wire versions), and every feature that must hold across nodes; the
//! randomized fault schedule.

mod cluster_acks;
mod cluster_audit;
mod cluster_authz;
mod cluster_availability;
mod cluster_backpressure;
mod cluster_binary_batches;
mod cluster_compaction;
mod cluster_failover;
mod cluster_groups;
mod cluster_heartbeats;
mod cluster_idempotency;
mod cluster_membership;
mod cluster_mixed_versions;
mod cluster_mtls;
mod cluster_node_replacement;
mod cluster_partitions;
mod cluster_pipeline;
mod cluster_quiescence;
mod cluster_rebalance;
mod cluster_redrive;
mod cluster_replication;
mod cluster_retention;
mod cluster_rolling_restart;
mod cluster_rpc_lanes;
mod cluster_snapshot;
mod cluster_stream_failover;
mod cluster_subscriptions;
mod cluster_subscriptions_remote;
mod cluster_ws;
mod cluster_zones;
mod fault_schedule;
