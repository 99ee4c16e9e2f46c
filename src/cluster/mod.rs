//! The cluster layer: the metadata group, and the partition replicas this node runs.
//!
//! A reconciler follows the applied metadata: it starts a raft group for every partition
//! placed on this node and stops (and erases) the groups of deleted topics. The broker asks
//! here for a partition's replica and for metadata changes; raft details stay below.

mod error;
pub mod placement;

pub use error::ClusterError;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use crate::raft::{GroupContext, MetadataReplica, NodeAddr, PartitionReplica, RaftTiming};
use crate::storage::Store;

/// How many partition groups the reconciler starts at once.
const START_CONCURRENCY: usize = 16;

pub struct ClusterOptions {
    pub node_id: u64,
    pub http_addr: String,
    pub raft_addr: String,
    pub store: Store,
    pub timing: RaftTiming,
}

pub struct Cluster {
    node_id: u64,
    context: GroupContext,
    metadata: MetadataReplica,
    replicas: RwLock<HashMap<u64, Arc<PartitionReplica>>>,
    /// Bumped whenever `replicas` changes, so waiters can wake.
    replicas_version: watch::Sender<u64>,
    reconcile_lock: tokio::sync::Mutex<()>,
}

impl Cluster {
    /// Starts the metadata group, registers this node, starts its partition replicas, and
    /// keeps them in line with the metadata from then on.
    pub async fn start(options: ClusterOptions) -> Result<Arc<Cluster>, ClusterError> {
        let node = NodeAddr {
            http_addr: options.http_addr.clone(),
            raft_addr: options.raft_addr.clone(),
        };
        let context = GroupContext {
            node_id: options.node_id,
            node,
            store: options.store,
            timing: options.timing,
        };
        let metadata = MetadataReplica::start(&context).await?;
        if metadata.wait_for_leader().await.is_none() {
            return Err(ClusterError::Timeout("a metadata leader".into()));
        }
        let cluster = Arc::new(Cluster {
            node_id: options.node_id,
            context,
            metadata,
            replicas: RwLock::new(HashMap::new()),
            replicas_version: watch::Sender::new(0),
            reconcile_lock: tokio::sync::Mutex::new(()),
        });
        if cluster.metadata().cluster_id.is_none() {
            cluster
                .propose(MetadataCommand::InitCluster {
                    cluster_id: new_cluster_id(options.node_id),
                })
                .await?;
        }
        let registered = cluster.metadata().nodes.get(&options.node_id).cloned();
        let current = crate::domain::metadata::NodeRecord {
            http_addr: options.http_addr.clone(),
            raft_addr: options.raft_addr.clone(),
        };
        if registered.as_ref() != Some(&current) {
            cluster
                .propose(MetadataCommand::RegisterNode {
                    node_id: options.node_id,
                    http_addr: options.http_addr,
                    raft_addr: options.raft_addr,
                })
                .await?;
        }
        cluster.reconcile().await;
        tokio::spawn(Self::follow_metadata(
            Arc::downgrade(&cluster),
            cluster.metadata.subscribe(),
        ));
        Ok(cluster)
    }

    async fn follow_metadata(
        cluster: std::sync::Weak<Cluster>,
        mut changes: watch::Receiver<Arc<MetadataState>>,
    ) {
        while changes.changed().await.is_ok() {
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            cluster.reconcile().await;
        }
    }

    /// Brings the running replicas in line with the metadata.
    async fn reconcile(&self) {
        let _running = self.reconcile_lock.lock().await;
        let state = self.metadata();
        let wanted: BTreeSet<u64> = state
            .topics
            .values()
            .flat_map(|topic| topic.partitions.iter())
            .filter(|partition| partition.replicas.contains(&self.node_id))
            .map(|partition| partition.group_id)
            .collect();
        let (missing, removed): (Vec<u64>, Vec<Arc<PartitionReplica>>) = {
            let replicas = self.replicas.read();
            let missing = wanted
                .iter()
                .filter(|group| !replicas.contains_key(group))
                .copied()
                .collect();
            let removed = replicas
                .iter()
                .filter(|(group, _)| !wanted.contains(group))
                .map(|(_, r)| r.clone())
                .collect();
            (missing, removed)
        };
        for replica in removed {
            self.replicas.write().remove(&replica.group());
            if let Err(error) = replica.destroy().await {
                tracing::error!(group = replica.group(), %error, "could not erase a deleted partition");
            }
        }
        let context = &self.context;
        let mut started = futures::stream::iter(missing)
            .map(|group| async move { (group, PartitionReplica::start(context, group).await) })
            .buffer_unordered(START_CONCURRENCY);
        while let Some((group, outcome)) = started.next().await {
            match outcome {
                Ok(replica) => {
                    self.replicas.write().insert(group, Arc::new(replica));
                }
                Err(error) => tracing::error!(group, %error, "could not start a partition replica"),
            }
        }
        self.replicas_version.send_modify(|version| *version += 1);
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The latest metadata applied on this node.
    pub fn metadata(&self) -> Arc<MetadataState> {
        self.metadata.state()
    }

    pub fn metadata_leader(&self) -> Option<u64> {
        self.metadata.leader()
    }

    pub async fn propose(&self, command: MetadataCommand) -> Result<MetadataOutcome, ClusterError> {
        Ok(self.metadata.propose(command).await?)
    }

    /// This node's replica of `group`, if it runs one now.
    pub fn local_replica(&self, group: u64) -> Option<Arc<PartitionReplica>> {
        self.replicas.read().get(&group).cloned()
    }

    /// This node's replica of `group`, waiting up to `timeout` for the reconciler to start it
    /// (a partition created a moment ago).
    pub async fn replica(
        &self,
        group: u64,
        timeout: Duration,
    ) -> Result<Arc<PartitionReplica>, ClusterError> {
        let mut version = self.replicas_version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(replica) = self.local_replica(group) {
                return Ok(replica);
            }
            match tokio::time::timeout_at(deadline, version.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(ClusterError::GroupUnavailable(group)),
            }
        }
    }

    /// Waits until no replica of the given groups runs here any more (after a delete).
    pub async fn wait_until_gone(
        &self,
        groups: &[u64],
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let mut version = self.replicas_version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if groups
                .iter()
                .all(|group| self.local_replica(*group).is_none())
            {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, version.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(ClusterError::Timeout("deleted partitions to stop".into())),
            }
        }
    }

    /// Every running local replica.
    pub fn local_replicas(&self) -> Vec<Arc<PartitionReplica>> {
        self.replicas.read().values().cloned().collect()
    }

    /// Stops every group; storage is flushed by the caller afterwards.
    pub async fn shutdown(&self) {
        let replicas: Vec<Arc<PartitionReplica>> = self
            .replicas
            .write()
            .drain()
            .map(|(_, replica)| replica)
            .collect();
        futures::stream::iter(replicas)
            .for_each_concurrent(START_CONCURRENCY, |replica| async move {
                replica.shutdown().await
            })
            .await;
        self.metadata.shutdown().await;
    }
}

/// A fresh cluster id: unique enough across clusters (time, process, node), not a secret.
fn new_cluster_id(node_id: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(node_id);
    format!("herald-{:016x}", hasher.finish())
}
