//! The consumer groups' replicated state, as the metadata group's state machine keeps it.
//!
//! Groups change often (every commit), unlike topics, so
//! they are not part of the metadata state that is rewritten and republished whole after each
//! apply: each group is one row, rewritten when that group changes, and readers look at the
//! shared in-memory copy under a read lock instead of receiving a new clone per change.

use std::io;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::engine::codec;
use herald_domain::groups::{ConsumerGroups, GroupCommand, GroupOutcome};
use herald_domain::metadata::METADATA_GROUP;
use herald_storage::{keys, Cf, Store, WriteSet};

/// Rows `(metadata group, TAG_GROUP, group name)`, one encoded `ConsumerGroup` each.
const TAG_GROUP: u8 = 30;

fn row_key(name: &str) -> Vec<u8> {
    let mut key = keys::group_tag(METADATA_GROUP, TAG_GROUP).to_vec();
    key.extend_from_slice(name.as_bytes());
    key
}

fn rows_start() -> [u8; 9] {
    keys::group_tag(METADATA_GROUP, TAG_GROUP)
}

fn rows_end() -> [u8; 9] {
    keys::group_tag(METADATA_GROUP, TAG_GROUP + 1)
}

/// A read-only view of this node's applied consumer groups, cheap to clone.
#[derive(Clone)]
pub struct ConsumerGroupsView {
    shared: Arc<RwLock<ConsumerGroups>>,
    applied: watch::Receiver<u64>,
}

impl ConsumerGroupsView {
    /// Runs `read` on the groups as applied on this node.
    pub fn read<R>(&self, read: impl FnOnce(&ConsumerGroups) -> R) -> R {
        read(&self.shared.read())
    }

    /// Changes each time applied group commands become visible.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.applied.clone()
    }
}

/// The applier's side: applies commands, writes rows, tells readers.
pub(crate) struct GroupsStore {
    shared: Arc<RwLock<ConsumerGroups>>,
    applied: watch::Sender<u64>,
    dirty: bool,
}

impl GroupsStore {
    pub(crate) fn new() -> Self {
        GroupsStore {
            shared: Arc::default(),
            applied: watch::Sender::new(0),
            dirty: false,
        }
    }

    pub(crate) fn view(&self) -> ConsumerGroupsView {
        ConsumerGroupsView {
            shared: self.shared.clone(),
            applied: self.applied.subscribe(),
        }
    }

    pub(crate) fn apply(&mut self, command: &GroupCommand, writes: &mut WriteSet) -> GroupOutcome {
        let mut groups = self.shared.write();
        let outcome = groups.apply(command);
        let changed = matches!(
            outcome,
            GroupOutcome::Joined { .. }
                | GroupOutcome::Rebalanced { .. }
                | GroupOutcome::Committed { .. }
                | GroupOutcome::Done
        );
        if changed {
            let name = command.group();
            match groups.get(name) {
                Some(group) => match codec::encode(group) {
                    Ok(row) => writes.put(Cf::RaftState, row_key(name), row),
                    Err(error) => {
                        // Cannot happen for these plain types; if it did, the row would be
                        // stale until the group changes again, and a restart would replay.
                        tracing::error!(group = name, %error, "encoding a consumer group");
                    }
                },
                None => writes.delete(Cf::RaftState, row_key(name)),
            }
            self.dirty = true;
        }
        outcome
    }

    pub(crate) fn load_rows(&mut self, store: &Store) -> Result<(), io::Error> {
        let mut loaded = ConsumerGroups::default();
        store.scan(Cf::RaftState, &rows_start(), &rows_end(), |_, row| {
            let group: herald_domain::groups::ConsumerGroup = codec::decode(row)?;
            loaded.groups.insert(group.name.clone(), group);
            Ok(true)
        })?;
        *self.shared.write() = loaded;
        self.dirty = true;
        Ok(())
    }

    pub(crate) fn snapshot(&self) -> ConsumerGroups {
        self.shared.read().clone()
    }

    /// Replaces every group with a snapshot's, rows included.
    pub(crate) fn restore(
        &mut self,
        groups: ConsumerGroups,
        writes: &mut WriteSet,
    ) -> Result<(), io::Error> {
        writes.delete_range(Cf::RaftState, rows_start().to_vec(), rows_end().to_vec());
        for (name, group) in &groups.groups {
            writes.put(Cf::RaftState, row_key(name), codec::encode(group)?);
        }
        *self.shared.write() = groups;
        self.dirty = true;
        Ok(())
    }

    pub(crate) fn publish(&mut self) {
        if std::mem::take(&mut self.dirty) {
            self.applied.send_modify(|version| *version += 1);
        }
    }
}
