//! Catching up with the metadata leader before answering "not found".
//!
//! A schema registered through one node must be usable through every other at once: a
//! producer registers through node 1 and produces through node 2, which must know the id. A
//! node's copy of the metadata may trail the leader's by a few milliseconds, so a lookup that
//! misses first makes this node apply everything the leader has committed (a no-op metadata
//! proposal, answered once applied here), then looks again. Misses that arrive while a
//! barrier is under way share it instead of each writing one.

use std::time::Instant;

use tokio::sync::Mutex;

use crate::BrokerResult;
use herald_cluster::Cluster;
use herald_domain::metadata::MetadataCommand;

#[derive(Default)]
pub(super) struct MetadataBarrier {
    /// When the last finished barrier started: it covers every miss asked before then.
    covered_until: Mutex<Option<Instant>>,
}

impl MetadataBarrier {
    /// Returns once this node applied every metadata change committed before the call.
    pub(super) async fn sync(&self, cluster: &Cluster) -> BrokerResult<()> {
        let asked_at = Instant::now();
        let mut covered_until = self.covered_until.lock().await;
        if covered_until.is_some_and(|covered| covered >= asked_at) {
            return Ok(());
        }
        let metadata = cluster.metadata();
        // `InitCluster` changes nothing once the cluster has its id: a proposal that only
        // orders this node behind the leader's log. Before the cluster has an id there is
        // nothing registered to catch up with.
        let Some(cluster_id) = metadata.current().cluster_id.clone() else {
            return Ok(());
        };
        let started = Instant::now();
        metadata
            .propose(MetadataCommand::InitCluster { cluster_id })
            .await?;
        // Everything committed before `started` is applied here now.
        *covered_until = Some(started);
        Ok(())
    }
}
