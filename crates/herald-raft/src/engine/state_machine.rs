//! The state machine shared by every group kind. It keeps what openraft needs (last applied
//! log id, membership, snapshots) and delegates the meaning of commands to a [`GroupApplier`]:
//! the partition applier assigns offsets and indexes batches, the metadata applier maintains
//! topics. Everything an apply changes is written in one atomic `WriteSet`.

use herald_domain::RaftGroupId;
use std::io;

use futures::StreamExt;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};

use super::checkpoints::Checkpoints;
use super::codec;
use super::types::{
    LogId, RaftRequest, RaftResponse, Snapshot, SnapshotMeta, StoredMembership, TypeConfig,
};
use herald_storage::{keys, Cf, Store, WriteSet};

pub(crate) const TAG_STATE: u8 = 10;

/// Snapshots this node installed from a leader (a replica that fell behind the purged log).
pub const SNAPSHOT_INSTALLS_TOTAL: &str = "herald_raft_snapshot_installs_total";
pub(super) const TAG_SNAPSHOT: u8 = 11;

/// The meaning of a group's commands.
pub trait GroupApplier: Send + Sync + 'static {
    /// Applies the command in the entry at raft `index`, adding its writes to `writes`.
    /// Must be deterministic: every replica applies the same commands to the same state.
    fn apply(&mut self, index: u64, request: &RaftRequest, writes: &mut WriteSet) -> RaftResponse;
    /// The small state persisted after every applied batch of entries (offsets, topics).
    fn encode_state(&self) -> Result<Vec<u8>, io::Error>;
    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), io::Error>;
    /// Loads, once when the group opens, state the applier keeps in rows of its own beside
    /// the small state (a partition's dedup window, the consumer groups): rows are written
    /// as they change, so a large state does not cost a full rewrite per apply. Runs on a
    /// blocking thread.
    fn load_rows(&mut self, _store: &Store) -> Result<(), io::Error> {
        Ok(())
    }
    /// Adds to an applied batch's writes the rows its commands changed, for an applier that
    /// keeps rows in step with its state only once per batch (the metadata's topics).
    fn write_rows(&mut self, _writes: &mut WriteSet) -> Result<(), io::Error> {
        Ok(())
    }
    /// What a snapshot carries: the small state and whatever the applier keeps in rows.
    fn encode_snapshot(&self) -> Result<Vec<u8>, io::Error> {
        self.encode_state()
    }
    /// Restores the state a leader's snapshot carries, replacing the applier's rows through
    /// `writes`. Everything before the snapshot point was purged on the leader and never
    /// reached this replica.
    fn restore_snapshot(&mut self, bytes: &[u8], _writes: &mut WriteSet) -> Result<(), io::Error> {
        self.restore_state(bytes)
    }
    /// Called once the writes of applied entries are stored: makes them visible to readers.
    fn publish(&mut self);
    /// Whether the group snapshots at checkpoints taken before a limit its owner sets (a
    /// partition, see [`super::checkpoints`]) rather than at its applied point.
    fn snapshots_at_checkpoints(&self) -> bool {
        false
    }
}

/// What is persisted of a state machine, and what a snapshot carries.
#[derive(Serialize, Deserialize, Default, Clone)]
pub(crate) struct StateRecord {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    pub(crate) state: Vec<u8>,
}

pub struct GroupStateMachine<A: GroupApplier> {
    pub(super) group: RaftGroupId,
    pub(super) store: Store,
    pub(super) last_applied: Option<LogId>,
    pub(super) membership: StoredMembership,
    pub(crate) applier: A,
    /// Checkpoints kept as candidate snapshots, and which one a snapshot may use (see
    /// [`super::checkpoints`]). Groups that never set a limit snapshot at their applied point.
    pub(super) checkpoints: Checkpoints,
}

impl<A: GroupApplier> GroupStateMachine<A> {
    /// The raft index applied last, if any.
    pub fn applied_index(&self) -> Option<u64> {
        self.last_applied.as_ref().map(|log_id| log_id.index)
    }

    /// Opens the state machine of `group`, restoring what was applied before a restart.
    pub async fn open(group: RaftGroupId, store: Store, mut applier: A) -> Result<Self, io::Error> {
        let reader = store.clone();
        let record = tokio::task::spawn_blocking(move || {
            reader.get(Cf::RaftState, &keys::group_tag(group, TAG_STATE))
        })
        .await
        .map_err(io::Error::other)??;
        let record: StateRecord = match record {
            Some(bytes) => codec::decode(&bytes)?,
            None => StateRecord::default(),
        };
        if !record.state.is_empty() {
            applier.restore_state(&record.state)?;
        }
        let rows = store.clone();
        let mut applier =
            tokio::task::spawn_blocking(move || applier.load_rows(&rows).map(|()| applier))
                .await
                .map_err(io::Error::other)??;
        applier.publish();
        let checkpoints =
            Checkpoints::load(&store, group, applier.snapshots_at_checkpoints()).await?;
        Ok(GroupStateMachine {
            group,
            store,
            last_applied: record.last_applied,
            membership: record.membership,
            applier,
            checkpoints,
        })
    }

    fn record(&self) -> Result<StateRecord, io::Error> {
        Ok(StateRecord {
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            state: self.applier.encode_state()?,
        })
    }

    /// The record a snapshot carries: as [`Self::record`], with the applier's rows.
    pub(super) fn snapshot_record(&self) -> Result<StateRecord, io::Error> {
        Ok(StateRecord {
            state: self.applier.encode_snapshot()?,
            ..self.record()?
        })
    }

    async fn write(&self, writes: WriteSet) -> Result<(), io::Error> {
        super::group::write_unsynced(&self.store, writes).await
    }
}

impl<A: GroupApplier> RaftStateMachine<TypeConfig> for GroupStateMachine<A> {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>>
            + Unpin
            + OptionalSend,
    {
        let mut writes = WriteSet::new();
        let mut replies = Vec::new();
        let mut batch_bytes = 0;
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let response = match &entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
                    None
                }
                EntryPayload::Normal(request) => {
                    batch_bytes += request.batch().map_or(0, |batch| batch.len());
                    Some(self.applier.apply(entry.log_id.index, request, &mut writes))
                }
            };
            self.last_applied = Some(entry.log_id);
            if let Some(responder) = responder {
                replies.push((
                    responder,
                    response.unwrap_or(RaftResponse::Rejected("not a command".into())),
                ));
            }
        }
        self.applier.write_rows(&mut writes)?;
        if self.checkpoints.note_applied(batch_bytes) {
            self.put_checkpoint(&mut writes)?;
        }
        let record = codec::encode(&self.record()?)?;
        writes.put(
            Cf::RaftState,
            keys::group_tag(self.group, TAG_STATE).to_vec(),
            record,
        );
        self.write(writes).await?;
        self.applier.publish();
        for (responder, response) in replies {
            responder.send(response);
        }
        Ok(())
    }

    /// A group with a snapshot limit (a partition, see [`super::checkpoints`]) snapshots at
    /// its newest checkpoint within the limit, and defers when there is none newer than its
    /// current snapshot; others snapshot at their applied point.
    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<Self::SnapshotBuilder> {
        if self.checkpoints.limited() {
            match self.checkpoint_builder().await {
                Ok(Some(builder)) => return Some(builder),
                Ok(None) if !force => return None,
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(group = self.group.get(), %error, "reading a checkpoint");
                    if !force {
                        return None;
                    }
                }
            }
        }
        Some(self.get_snapshot_builder().await)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            group: self.group,
            store: self.store.clone(),
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
            },
            record: self
                .snapshot_record()
                .and_then(|record| codec::encode(&record)),
            drop_checkpoints_below: None,
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        let record: StateRecord = codec::decode(&snapshot)?;
        let mut writes = WriteSet::new();
        self.applier.restore_snapshot(&record.state, &mut writes)?;
        // Checkpoints of the state this replaces are no snapshot of the new one.
        self.checkpoints.clear(self.group, &mut writes);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        writes.put(
            Cf::RaftState,
            keys::group_tag(self.group, TAG_STATE).to_vec(),
            codec::encode(&self.record()?)?,
        );
        writes.put(
            Cf::RaftState,
            keys::group_tag(self.group, TAG_SNAPSHOT).to_vec(),
            codec::encode(&(meta.clone(), snapshot))?,
        );
        self.write(writes).await?;
        self.applier.publish();
        self.checkpoints
            .snapshot_installed(meta.last_log_id.map(|log_id| log_id.index));
        metrics::counter!(SNAPSHOT_INSTALLS_TOTAL).increment(1);
        tracing::info!(group = self.group.get(), snapshot = ?meta.last_log_id, "installed a snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let (store, group) = (self.store.clone(), self.group);
        let stored = tokio::task::spawn_blocking(move || {
            store.get(Cf::RaftState, &keys::group_tag(group, TAG_SNAPSHOT))
        })
        .await
        .map_err(io::Error::other)??;
        match stored {
            Some(bytes) => {
                let (meta, snapshot): (SnapshotMeta, Vec<u8>) = codec::decode(&bytes)?;
                Ok(Some(Snapshot { meta, snapshot }))
            }
            None => Ok(None),
        }
    }
}

/// Builds a snapshot from the state captured when it was created: a point-in-time view, as
/// openraft builds snapshots concurrently with apply. The state is small (offsets, topics);
/// a partition's messages stay in its log.
pub struct SnapshotBuilder {
    pub(super) group: RaftGroupId,
    pub(super) store: Store,
    pub(super) meta: SnapshotMeta,
    pub(super) record: Result<Vec<u8>, io::Error>,
    /// Built from a checkpoint: the checkpoint rows up to this index go (the snapshot holds
    /// the newest of them now).
    pub(super) drop_checkpoints_below: Option<u64>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let data = std::mem::replace(&mut self.record, Ok(Vec::new()))?;
        let meta = self.meta.clone();
        let stored = codec::encode(&(meta.clone(), data.clone()))?;
        let (store, group) = (self.store.clone(), self.group);
        let drop_below = self.drop_checkpoints_below;
        tokio::task::spawn_blocking(move || {
            let mut writes = WriteSet::new();
            writes.put(
                Cf::RaftState,
                keys::group_tag(group, TAG_SNAPSHOT).to_vec(),
                stored,
            );
            if let Some(upto) = drop_below {
                super::checkpoints::drop_rows_upto(&mut writes, group, upto);
            }
            store.write(writes, false)
        })
        .await
        .map_err(io::Error::other)??;
        Ok(Snapshot {
            meta,
            snapshot: data,
        })
    }
}
