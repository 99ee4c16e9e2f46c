//! What every capability of the broker shares, and nothing more: the cluster handle, the
//! node's options, its memory budget, topic lookup and the dispatcher that runs operations on
//! leaders (`leader::dispatch`).
//!
//! Each capability service (`TopicService`, `ProduceService`, `FetchService`, ...) holds an
//! `Arc<Core>` beside the state it owns itself; none of them reaches into another's state.

use std::sync::Arc;

use crate::memory::ProduceMemory;
use crate::{BrokerError, BrokerOptions, BrokerResult};
use herald_cluster::Cluster;
use herald_domain::metadata::{MetadataState, PartitionAssignment, TopicMeta};

/// The node-wide context of the broker's services.
pub(crate) struct Core {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) options: BrokerOptions,
    /// The records produce requests hold and the push subscriptions open on this node, against
    /// the one memory budget both take from.
    pub(crate) memory: Arc<ProduceMemory>,
}

/// A topic as of one metadata version; the version is immutable, so the topic stays there.
pub(crate) struct TopicRef {
    metadata: Arc<MetadataState>,
    name: String,
}

impl std::ops::Deref for TopicRef {
    type Target = TopicMeta;

    fn deref(&self) -> &TopicMeta {
        // Checked when the reference was made, and `metadata` never changes.
        &self.metadata.topics[&self.name]
    }
}

impl Core {
    pub(crate) fn new(cluster: Arc<Cluster>, options: BrokerOptions) -> Arc<Core> {
        let memory = ProduceMemory::new(options.max_in_flight_produce_bytes);
        Arc::new(Core {
            cluster,
            options,
            memory,
        })
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// A topic of the current metadata, without copying it: every produce and fetch looks
    /// one up, and a topic can hold 1024 partition assignments.
    pub(crate) fn topic(&self, name: &str) -> BrokerResult<TopicRef> {
        let metadata = self.cluster.metadata().current();
        if !metadata.topics.contains_key(name) {
            return Err(BrokerError::TopicNotFound(name.to_string()));
        }
        Ok(TopicRef {
            metadata,
            name: name.to_string(),
        })
    }

    pub(crate) fn assignment<'t>(
        &self,
        topic: &'t TopicMeta,
        partition: u32,
    ) -> BrokerResult<&'t PartitionAssignment> {
        topic
            .partitions
            .get(partition as usize)
            .ok_or_else(|| BrokerError::PartitionNotFound {
                topic: topic.name.clone(),
                partition,
            })
    }
}
