//! The partition replicas this node runs, by raft group: started and erased by the reconciler
//! (`reconcile`), looked up by routing and the broker. A version bumps on every change, so a
//! caller can wait for replicas to go (a topic's delete answers once its partitions stopped).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::watch;
use tokio::time::Instant;

use super::ClusterError;
use herald_domain::RaftGroupId;
use herald_raft::PartitionReplica;

/// This node's partition replicas.
pub struct LocalReplicas {
    by_group: RwLock<HashMap<RaftGroupId, Arc<PartitionReplica>>>,
    /// Bumped whenever `by_group` changes, so waiters can wake.
    version: watch::Sender<u64>,
}

impl Default for LocalReplicas {
    fn default() -> Self {
        LocalReplicas {
            by_group: RwLock::new(HashMap::new()),
            version: watch::Sender::new(0),
        }
    }
}

impl LocalReplicas {
    /// This node's replica of `group`, if it runs one now.
    pub fn get(&self, group: RaftGroupId) -> Option<Arc<PartitionReplica>> {
        self.by_group.read().get(&group).cloned()
    }

    /// Every running local replica.
    pub fn all(&self) -> Vec<Arc<PartitionReplica>> {
        self.by_group.read().values().cloned().collect()
    }

    /// Waits until no replica of the given groups runs here any more (after a delete).
    pub async fn wait_until_gone(
        &self,
        groups: &[RaftGroupId],
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let mut version = self.version.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if groups.iter().all(|group| self.get(*group).is_none()) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, version.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(ClusterError::Timeout("deleted partitions to stop".into())),
            }
        }
    }

    /// Reads the map under one lock (the reconciler's view of what runs).
    pub(crate) fn read<R>(
        &self,
        read: impl FnOnce(&HashMap<RaftGroupId, Arc<PartitionReplica>>) -> R,
    ) -> R {
        read(&self.by_group.read())
    }

    pub(crate) fn insert(&self, group: RaftGroupId, replica: Arc<PartitionReplica>) {
        self.by_group.write().insert(group, replica);
    }

    pub(crate) fn remove(&self, group: RaftGroupId) {
        self.by_group.write().remove(&group);
    }

    /// Takes every replica out (the node is shutting down).
    pub(crate) fn drain(&self) -> Vec<Arc<PartitionReplica>> {
        let drained = self
            .by_group
            .write()
            .drain()
            .map(|(_, replica)| replica)
            .collect();
        self.changed();
        drained
    }

    /// Wakes whoever waits on a change (after inserts and removals).
    pub(crate) fn changed(&self) {
        self.version.send_modify(|version| *version += 1);
    }
}
