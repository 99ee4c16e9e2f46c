//! The raft groups running on this node, by group id: where messages from peers are delivered.
//!
//! A group is registered when it starts and removed when it stops, so a message for a group
//! that is not (or no longer) here gets a clear "unknown group" answer. A vote or an append
//! may first wait a moment for its group to start (`wait_for`): a new partition's replicas
//! start on each node as it applies the metadata, so its preferred leader often campaigns
//! before the others run it, and a refusal would cost an election timeout.

use herald_domain::RaftGroupId;
use std::collections::HashMap;
use std::sync::Arc;

use openraft::Raft;
use parking_lot::RwLock;
use tokio::sync::watch;
use tokio::time::Instant;

use super::quiescence::Quiescence;
use super::state_machine::GroupStateMachine;
use super::types::TypeConfig;
use crate::metadata::applier::MetadataApplier;
use crate::partition::applier::PartitionApplier;

pub type MetadataRaft = Raft<TypeConfig, GroupStateMachine<MetadataApplier>>;
pub type PartitionRaft = Raft<TypeConfig, GroupStateMachine<PartitionApplier>>;

/// A running group's raft handle (cheap to clone).
#[derive(Clone)]
pub enum RegisteredGroup {
    Metadata(MetadataRaft),
    /// With its quiet flag: a message for a quiet partition group wakes it.
    Partition(PartitionRaft, Arc<Quiescence>),
}

/// The groups running on this node (`Registry` is generic only so its waiting can be tested
/// without starting raft groups).
pub type GroupRegistry = Registry<RegisteredGroup>;

pub struct Registry<G> {
    groups: RwLock<HashMap<RaftGroupId, G>>,
    /// Bumped when a group is registered, so messages waiting for it can go on.
    registered: watch::Sender<u64>,
}

impl<G> Default for Registry<G> {
    fn default() -> Self {
        Registry {
            groups: RwLock::default(),
            registered: watch::Sender::new(0),
        }
    }
}

impl<G: Clone> Registry<G> {
    pub fn insert(&self, group: RaftGroupId, raft: G) {
        self.groups.write().insert(group, raft);
        self.registered
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    pub fn remove(&self, group: RaftGroupId) {
        self.groups.write().remove(&group);
    }

    pub fn get(&self, group: RaftGroupId) -> Option<G> {
        self.groups.read().get(&group).cloned()
    }

    /// The group once it runs here, waiting for it until `deadline` at most.
    pub async fn wait_for(&self, group: RaftGroupId, deadline: Instant) -> Option<G> {
        // Subscribed before looking, so a registration in between is not missed.
        let mut registered = self.registered.subscribe();
        loop {
            if let Some(found) = self.get(group) {
                return Some(found);
            }
            match tokio::time::timeout_at(deadline, registered.changed()).await {
                Ok(Ok(())) => continue,
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_message_waits_for_its_group_to_start_until_its_deadline() {
        let registry = Arc::new(Registry::<&str>::default());
        let group = RaftGroupId::new(7);
        let starting = {
            let registry = registry.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                // Another group's start wakes the waiter, which goes on waiting for its own.
                registry.insert(RaftGroupId::new(6), "another");
                tokio::time::sleep(Duration::from_millis(50)).await;
                registry.insert(group, "started");
            })
        };
        let found = registry
            .wait_for(group, Instant::now() + Duration::from_secs(10))
            .await;
        assert_eq!(found, Some("started"));
        starting.await.unwrap();

        // A group that does not start is refused at the deadline, not before.
        let asked = Instant::now();
        let missing = registry
            .wait_for(RaftGroupId::new(8), asked + Duration::from_millis(100))
            .await;
        assert_eq!(missing, None);
        assert!(asked.elapsed() >= Duration::from_millis(100));
        // A removed group is as good as one that never ran.
        registry.remove(group);
        assert_eq!(registry.wait_for(group, Instant::now()).await, None);
        // A running group is answered without waiting for its deadline.
        registry.insert(group, "restarted");
        let found = tokio::time::timeout(
            Duration::from_secs(5),
            registry.wait_for(group, Instant::now() + Duration::from_secs(3600)),
        )
        .await;
        assert_eq!(found, Ok(Some("restarted")));
    }
}
