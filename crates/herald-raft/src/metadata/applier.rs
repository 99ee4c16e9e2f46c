//! The metadata group's state machine: applies topic and node commands to
//! [`MetadataState`] and publishes each new state to the node's watchers; consumer group
//! commands go to the groups' own store (`consumer_groups`).
//!
//! `MetadataState`'s own encoding is frozen (it is in data directories and snapshots of format
//! 11); what it holds since is stored after it, as a [`MetadataStateExtension`] that a node of
//! an older release skips (`codec::encode_extended`). From on-disk format 12 the persisted
//! state leaves its topics out: they are rows of their own (`topic_rows`), so a change writes
//! the topics it touched, not all of them. Snapshots carry the whole state.

use std::io;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::consumer_groups::{ConsumerGroupsView, GroupsStore};
use super::topic_rows::TopicRows;
use crate::engine::codec;
use crate::engine::state_machine::GroupApplier;
use crate::engine::types::{RaftRequest, RaftResponse};
use herald_domain::groups::ConsumerGroups;
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use herald_domain::schemas::SchemaRegistry;
use herald_domain::wire_version::{ClusterVersion, WireVersion};
use herald_domain::zones::Zones;
use herald_storage::{Store, WriteSet};

pub struct MetadataApplier {
    state: MetadataState,
    published: watch::Sender<Arc<MetadataState>>,
    dirty: bool,
    groups: GroupsStore,
    /// The state's encoding (without its topics) while it has not changed. The state is
    /// persisted after every applied batch, and most batches are consumer group commits that
    /// leave it as it was.
    encoded: Mutex<Option<Vec<u8>>>,
    /// The topics' rows, and whether a metadata command since the last batch may have
    /// changed them.
    topic_rows: TopicRows,
    topics_changed: bool,
}

/// What a metadata snapshot carries: the state, and the consumer groups kept in rows.
#[derive(Serialize, Deserialize)]
struct MetadataSnapshot {
    state: MetadataState,
    groups: ConsumerGroups,
}

/// What the metadata state holds beyond `MetadataState`'s frozen encoding, stored after it.
/// Frozen in its turn: a release that adds to it appends a variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum MetadataStateExtension {
    /// Wire version 1: the cluster version.
    V1 { cluster_version: WireVersion },
    /// Wire version 2: the cluster version and the schema registry.
    V2 {
        cluster_version: WireVersion,
        /// Shared with the state (encoded as the registry itself).
        schemas: Arc<SchemaRegistry>,
    },
    /// Wire version 3: the cluster version, the schema registry and the nodes' zones.
    V3 {
        cluster_version: WireVersion,
        schemas: Arc<SchemaRegistry>,
        zones: Zones,
    },
}

impl MetadataStateExtension {
    /// `V1` while the registry was never used: a node can then still be rolled back to a
    /// release of wire version 1, which reads only `V1`.
    fn of(state: &MetadataState) -> MetadataStateExtension {
        // The oldest variant that holds everything, so a rollback stays possible while the
        // newer parts are unused.
        if !state.zones.is_empty() {
            return MetadataStateExtension::V3 {
                cluster_version: state.cluster_version.version(),
                schemas: state.schemas.clone(),
                zones: state.zones.clone(),
            };
        }
        if *state.schemas == SchemaRegistry::default() {
            return MetadataStateExtension::V1 {
                cluster_version: state.cluster_version.version(),
            };
        }
        MetadataStateExtension::V2 {
            cluster_version: state.cluster_version.version(),
            schemas: state.schemas.clone(),
        }
    }

    /// Puts what it holds back into `state` (which was decoded without it); with no extension
    /// (written by a release before it), the state keeps its defaults.
    fn restore_into(extension: Option<MetadataStateExtension>, state: &mut MetadataState) {
        match extension {
            Some(MetadataStateExtension::V1 { cluster_version }) => {
                state.cluster_version = ClusterVersion(cluster_version);
            }
            Some(MetadataStateExtension::V2 {
                cluster_version,
                schemas,
            }) => {
                state.cluster_version = ClusterVersion(cluster_version);
                state.schemas = schemas;
            }
            Some(MetadataStateExtension::V3 {
                cluster_version,
                schemas,
                zones,
            }) => {
                state.cluster_version = ClusterVersion(cluster_version);
                state.schemas = schemas;
                state.zones = zones;
            }
            None => {}
        }
    }
}

impl MetadataApplier {
    pub fn new() -> Self {
        MetadataApplier {
            state: MetadataState::default(),
            published: watch::Sender::new(Arc::default()),
            dirty: true,
            groups: GroupsStore::new(),
            encoded: Mutex::new(None),
            topic_rows: TopicRows::default(),
            topics_changed: false,
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.published.subscribe()
    }

    pub fn groups(&self) -> ConsumerGroupsView {
        self.groups.view()
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> &MetadataState {
        &self.state
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
                self.topics_changed = true;
                *self.encoded.get_mut() = None;
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
        let mut encoded = self.encoded.lock();
        if let Some(bytes) = encoded.as_ref() {
            return Ok(bytes.clone());
        }
        let bytes = codec::encode_extended(
            &self.state.without_topics(),
            &MetadataStateExtension::of(&self.state),
        )?;
        *encoded = Some(bytes.clone());
        Ok(bytes)
    }

    fn write_rows(&mut self, writes: &mut WriteSet) -> Result<(), io::Error> {
        if std::mem::take(&mut self.topics_changed) {
            self.topic_rows.sync(&self.state.topics, writes)?;
        }
        Ok(())
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        let (mut state, extension) = codec::decode_extended(bytes)?;
        MetadataStateExtension::restore_into(extension, &mut state);
        self.state = state;
        self.dirty = true;
        *self.encoded.get_mut() = None;
        Ok(())
    }

    fn load_rows(&mut self, store: &Store) -> Result<(), io::Error> {
        let topics = TopicRows::load(store)?;
        self.topic_rows.loaded(&topics);
        // The persisted state holds no topics since format 12 (the format's migration moved
        // them out); should it hold some, the next batch writes them as rows.
        if self.state.topics.is_empty() {
            self.state.topics = topics;
        } else {
            self.topics_changed = true;
        }
        self.groups.load_rows(store)
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, io::Error> {
        let snapshot = MetadataSnapshot {
            state: self.state.clone(),
            groups: self.groups.snapshot(),
        };
        codec::encode_extended(&snapshot, &MetadataStateExtension::of(&self.state))
    }

    fn restore_snapshot(&mut self, bytes: &[u8], writes: &mut WriteSet) -> Result<(), io::Error> {
        let (mut snapshot, extension): (MetadataSnapshot, _) = codec::decode_extended(bytes)?;
        MetadataStateExtension::restore_into(extension, &mut snapshot.state);
        self.state = snapshot.state;
        self.dirty = true;
        *self.encoded.get_mut() = None;
        self.topic_rows.replace(&self.state.topics, writes)?;
        self.topics_changed = false;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn raised() -> MetadataApplier {
        let mut applier = MetadataApplier::new();
        applier.state.apply(&MetadataCommand::RaiseClusterVersion {
            version: WireVersion(1),
        });
        applier
    }

    #[test]
    fn the_cluster_version_survives_a_restart_and_older_releases_skip_it() {
        let applier = raised();
        let bytes = applier.encode_state().unwrap();
        let mut restored = MetadataApplier::new();
        restored.restore_state(&bytes).unwrap();
        assert_eq!(restored.state, applier.state);
        assert_eq!(
            restored.state.cluster_version,
            ClusterVersion(WireVersion(1))
        );

        // A release before the extension reads the state and ignores the rest.
        let old_reader: MetadataState = codec::decode(&bytes).unwrap();
        assert_eq!(old_reader.topics, applier.state.topics);
        // State rows an older release wrote: no extension, the cluster version of before.
        let mut from_older = MetadataApplier::new();
        from_older
            .restore_state(&codec::encode(&applier.state).unwrap())
            .unwrap();
        assert_eq!(from_older.state.cluster_version, ClusterVersion::default());
    }

    #[test]
    fn a_snapshot_carries_the_cluster_version_after_what_older_releases_read() {
        let applier = raised();
        let bytes = applier.encode_snapshot().unwrap();
        let old_reader: MetadataSnapshot = codec::decode(&bytes).unwrap();
        assert_eq!(old_reader.state.cluster_version, ClusterVersion::default());
        let (snapshot, extension) =
            codec::decode_extended::<MetadataSnapshot, MetadataStateExtension>(&bytes).unwrap();
        assert_eq!(
            extension,
            Some(MetadataStateExtension::V1 {
                cluster_version: WireVersion(1)
            })
        );
        assert_eq!(snapshot.groups, applier.groups.snapshot());
    }

    #[test]
    fn the_schema_registry_survives_a_restart_and_a_snapshot() {
        use herald_domain::schemas::{SchemaCommand, SchemaFormat, StoredSchema};
        let mut applier = raised();
        // Unused, the registry leaves the extension at V1 (a rollback to wire version 1 reads
        // it).
        assert!(matches!(
            MetadataStateExtension::of(&applier.state),
            MetadataStateExtension::V1 { .. }
        ));
        applier
            .state
            .apply(&MetadataCommand::Schemas(SchemaCommand::Register {
                subject: "orders-value".into(),
                schema: StoredSchema {
                    format: SchemaFormat::Avro,
                    text: r#""string""#.into(),
                    references: Vec::new(),
                },
                checked_against: None,
            }));
        let mut restored = MetadataApplier::new();
        restored
            .restore_state(&applier.encode_state().unwrap())
            .unwrap();
        assert_eq!(restored.state.schemas, applier.state.schemas);
        assert_eq!(restored.state.schemas.schemas.len(), 1);
        let mut from_snapshot = MetadataApplier::new();
        let mut writes = WriteSet::default();
        from_snapshot
            .restore_snapshot(&applier.encode_snapshot().unwrap(), &mut writes)
            .unwrap();
        assert_eq!(from_snapshot.state.schemas, applier.state.schemas);
        assert_eq!(
            from_snapshot.state.cluster_version,
            ClusterVersion(WireVersion(1))
        );
    }

    #[test]
    fn the_persisted_state_follows_every_change_and_is_not_encoded_again_without_one() {
        let mut applier = MetadataApplier::new();
        let mut writes = WriteSet::default();
        let empty = applier.encode_state().unwrap();
        let command = MetadataCommand::AddNode {
            node_id: 2,
            http_addr: "h2".into(),
            raft_addr: "r2".into(),
        };
        applier.apply(1, &RaftRequest::Metadata(command), &mut writes);
        let added = applier.encode_state().unwrap();
        assert_ne!(added, empty, "a change is persisted");
        let mut restored = MetadataApplier::new();
        restored.restore_state(&added).unwrap();
        assert_eq!(restored.state, applier.state);
        // A consumer group command leaves the state, and its cached encoding, as they were.
        let group = MetadataCommand::Groups(herald_domain::groups::GroupCommand::Delete {
            group: "g".into(),
        });
        applier.apply(2, &RaftRequest::Metadata(group), &mut writes);
        assert!(applier.encoded.lock().is_some());
        assert_eq!(applier.encode_state().unwrap(), added);
        // Restoring another state drops the cache.
        applier.restore_state(&empty).unwrap();
        assert_eq!(applier.encode_state().unwrap(), empty);
    }

    #[test]
    fn topics_are_persisted_as_rows_a_batch_writes_only_those_it_changed_and_a_restart_reads_them_back(
    ) {
        use herald_domain::topic::TopicConfig;
        use herald_storage::StoreOptions;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        let create = |name: &str| {
            RaftRequest::Metadata(MetadataCommand::CreateTopic {
                name: name.into(),
                replication_factor: 1,
                config: TopicConfig::default(),
                replicas: vec![vec![1]; 100],
                created_at_ms: 1,
            })
        };
        let mut applier = MetadataApplier::new();
        // One batch (several commands), then the state machine's persisting of it.
        let persist = |applier: &mut MetadataApplier, requests: &[RaftRequest]| {
            let mut writes = WriteSet::default();
            for (index, request) in requests.iter().enumerate() {
                applier.apply(index as u64, request, &mut writes);
            }
            applier.write_rows(&mut writes).unwrap();
            let state = applier.encode_state().unwrap();
            let bytes = writes.bytes() + state.len();
            store.write(writes, true).unwrap();
            (state, bytes)
        };
        let (_, first) = persist(&mut applier, &[create("a"), create("b")]);
        let (state, one_more) = persist(&mut applier, &[create("c")]);
        // The topics are not in the persisted state, and a batch costs what it changed: the
        // third topic's batch is about half the first's (which held two).
        let plain: MetadataState = codec::decode(&state).unwrap();
        assert!(plain.topics.is_empty());
        assert!(one_more * 3 < first * 2, "{one_more} vs {first}");
        // A batch of other commands writes no topic row.
        let (_, node_only) = persist(
            &mut applier,
            &[RaftRequest::Metadata(MetadataCommand::AddNode {
                node_id: 2,
                http_addr: "h2".into(),
                raft_addr: "r2".into(),
            })],
        );
        assert!(node_only < one_more / 4, "{node_only} vs {one_more}");
        let (state, _) = persist(
            &mut applier,
            &[RaftRequest::Metadata(MetadataCommand::DeleteTopic {
                name: "a".into(),
                deleted_at_ms: 5,
            })],
        );

        let mut restarted = MetadataApplier::new();
        restarted.restore_state(&state).unwrap();
        restarted.load_rows(&store).unwrap();
        assert_eq!(restarted.state, applier.state);
        assert_eq!(
            restarted.state.topics.keys().collect::<Vec<_>>(),
            ["b", "c"]
        );
        // A snapshot still carries the topics, and installing one replaces the rows.
        let mut installed = MetadataApplier::new();
        let mut writes = WriteSet::default();
        installed
            .restore_snapshot(&applier.encode_snapshot().unwrap(), &mut writes)
            .unwrap();
        assert_eq!(installed.state.topics, applier.state.topics);
    }
}
