//! The metadata group's state machine: applies topic and node commands to
//! [`MetadataState`] and publishes each new state to the node's watchers.

use std::io;
use std::sync::Arc;

use tokio::sync::watch;

use super::codec;
use super::state_machine::GroupApplier;
use super::types::{RaftRequest, RaftResponse};
use crate::domain::metadata::MetadataState;
use crate::storage::WriteSet;

pub struct MetadataApplier {
    state: MetadataState,
    published: watch::Sender<Arc<MetadataState>>,
    dirty: bool,
}

impl MetadataApplier {
    pub fn new() -> Self {
        MetadataApplier {
            state: MetadataState::default(),
            published: watch::Sender::new(Arc::default()),
            dirty: true,
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.published.subscribe()
    }
}

impl Default for MetadataApplier {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupApplier for MetadataApplier {
    fn apply(
        &mut self,
        _index: u64,
        request: &RaftRequest,
        _writes: &mut WriteSet,
    ) -> RaftResponse {
        match request {
            RaftRequest::Metadata(command) => {
                self.dirty = true;
                RaftResponse::Metadata(self.state.apply(command))
            }
            RaftRequest::Append { .. }
            | RaftRequest::AppendOnce { .. }
            | RaftRequest::Trim { .. }
            | RaftRequest::Compact(_) => {
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

    fn publish(&mut self) {
        if self.dirty {
            self.published.send_replace(Arc::new(self.state.clone()));
            self.dirty = false;
        }
    }
}
