//! The raft groups running on this node, by group id: where messages from peers are delivered.
//!
//! A group is registered when it starts and removed when it stops, so a message for a group
//! that is not (or no longer) here gets a clear "unknown group" answer instead of waiting.

use herald_domain::RaftGroupId;
use std::collections::HashMap;
use std::sync::Arc;

use openraft::Raft;
use parking_lot::RwLock;

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

#[derive(Default)]
pub struct GroupRegistry {
    groups: RwLock<HashMap<RaftGroupId, RegisteredGroup>>,
}

impl GroupRegistry {
    pub fn insert(&self, group: RaftGroupId, raft: RegisteredGroup) {
        self.groups.write().insert(group, raft);
    }

    pub fn remove(&self, group: RaftGroupId) {
        self.groups.write().remove(&group);
    }

    pub fn get(&self, group: RaftGroupId) -> Option<RegisteredGroup> {
        self.groups.read().get(&group).cloned()
    }
}
