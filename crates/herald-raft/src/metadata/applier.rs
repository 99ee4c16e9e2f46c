//! The metadata group's state machine: applies topic and node commands to
//! [`MetadataState`] and publishes each new state to the node's watchers; consumer group
//! commands go to the groups' own store (`consumer_groups`).

use std::io;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::consumer_groups::{ConsumerGroupsView, GroupsStore};
use crate::engine::codec;
use crate::engine::state_machine::GroupApplier;
use crate::engine::types::{RaftRequest, RaftResponse};
use herald_domain::groups::ConsumerGroups;
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use herald_storage::{Store, WriteSet};

pub struct MetadataApplier {
    state: MetadataState,
    published: watch::Sender<Arc<MetadataState>>,
    dirty: bool,
    groups: GroupsStore,
}

/// What a metadata snapshot carries: the state, and the consumer groups kept in rows.
#[derive(Serialize, Deserialize)]
struct MetadataSnapshot {
    state: MetadataState,
    groups: ConsumerGroups,
}

impl MetadataApplier {
    pub fn new() -> Self {
        MetadataApplier {
            state: MetadataState::default(),
            published: watch::Sender::new(Arc::default()),
            dirty: true,
            groups: GroupsStore::new(),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.published.subscribe()
    }

    pub fn groups(&self) -> ConsumerGroupsView {
        self.groups.view()
    }
}

impl Default for MetadataApplier {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupApplier for MetadataApplier {
    fn apply(&mut self, _index: u64, request: &RaftRequest, writes: &mut WriteSet) -> RaftResponse {
        match request {
            RaftRequest::Metadata(MetadataCommand::Groups(command)) => {
                RaftResponse::Metadata(MetadataOutcome::Groups(self.groups.apply(command, writes)))
            }
            RaftRequest::Metadata(command) => {
                self.dirty = true;
                RaftResponse::Metadata(self.state.apply(command))
            }
            RaftRequest::Append { .. }
            | RaftRequest::AppendOnce { .. }
            | RaftRequest::Trim { .. }
            | RaftRequest::Compact(_)
            | RaftRequest::Delivery(_) => {
                RaftResponse::Rejected("the metadata group takes only metadata commands".into())
            }
        }
    }

    fn encode_state(&self) -> Result<Vec<u8>, io::Error> {
        codec::encode(&self.state)
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        self.state = codec::decode(bytes)?;
        self.dirty = true;
        Ok(())
    }

    fn load_rows(&mut self, store: &Store) -> Result<(), io::Error> {
        self.groups.load_rows(store)
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, io::Error> {
        codec::encode(&MetadataSnapshot {
            state: self.state.clone(),
            groups: self.groups.snapshot(),
        })
    }

    fn restore_snapshot(&mut self, bytes: &[u8], writes: &mut WriteSet) -> Result<(), io::Error> {
        let snapshot: MetadataSnapshot = codec::decode(bytes)?;
        self.state = snapshot.state;
        self.dirty = true;
        self.groups.restore(snapshot.groups, writes)
    }

    fn publish(&mut self) {
        if self.dirty {
            self.published.send_replace(Arc::new(self.state.clone()));
            self.dirty = false;
        }
        self.groups.publish();
    }
}
