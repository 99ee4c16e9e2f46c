//! The topics of the metadata state, stored one row per topic (on-disk format 12 on).
//!
//! The metadata state is persisted after every applied batch. Encoded whole, 100,000
//! partitions are a 1.1 MiB write and about 10 ms of encoding for each topic created or node
//! registered; as rows, a change writes the topics it touched and the rest of the state (nodes,
//! producers, clients: small) without them. Which topics changed is read off the state itself:
//! each topic is behind an `Arc` that a change replaces (`MetadataState::topic_mut` copies on
//! write, because the rows' mirror here holds a reference to every stored topic), so a topic
//! whose `Arc` is not the one stored has changed.
//!
//! Snapshots still carry the whole state, topics included: their encoding is on the wire and
//! unchanged.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use super::applier::MetadataStateExtension;
use crate::engine::codec;
use crate::engine::state_machine::{StateRecord, TAG_STATE};
use herald_domain::metadata::{MetadataState, TopicMeta, METADATA_GROUP};
use herald_storage::{keys, Cf, Store, WriteSet};

/// Rows `(metadata group, TAG_TOPIC, topic name)`, one encoded `TopicMeta` each.
pub(crate) const TAG_TOPIC: u8 = 31;

pub(crate) fn row_key(name: &str) -> Vec<u8> {
    keys::group_tag_bytes(METADATA_GROUP, TAG_TOPIC, name.as_bytes())
}

fn rows_start() -> [u8; 9] {
    keys::group_tag(METADATA_GROUP, TAG_TOPIC)
}

fn rows_end() -> [u8; 9] {
    keys::group_tag(METADATA_GROUP, TAG_TOPIC + 1)
}

/// What the topic rows hold: the topics as last written, sharing their values with the state.
#[derive(Default)]
pub(crate) struct TopicRows {
    stored: BTreeMap<String, Arc<TopicMeta>>,
}

impl TopicRows {
    /// Reads every topic row (once, when the group opens).
    pub(crate) fn load(store: &Store) -> Result<BTreeMap<String, Arc<TopicMeta>>, io::Error> {
        let mut topics = BTreeMap::new();
        store.scan(Cf::RaftState, &rows_start(), &rows_end(), |_, row| {
            let topic: TopicMeta = codec::decode(row)?;
            topics.insert(topic.name.clone(), Arc::new(topic));
            Ok(true)
        })?;
        Ok(topics)
    }

    /// Remembers `topics` as what the rows hold (just loaded from them).
    pub(crate) fn loaded(&mut self, topics: &BTreeMap<String, Arc<TopicMeta>>) {
        self.stored = topics.clone();
    }

    /// Adds to `writes` the rows that make the stored topics `topics`: a put for each topic
    /// added or changed, a delete for each one gone. Walks both maps once, in name order,
    /// comparing pointers only. Answers how many rows it wrote.
    pub(crate) fn sync(
        &mut self,
        topics: &BTreeMap<String, Arc<TopicMeta>>,
        writes: &mut WriteSet,
    ) -> Result<usize, io::Error> {
        let mut changed: Vec<(&String, Option<&Arc<TopicMeta>>)> = Vec::new();
        let mut current = topics.iter().peekable();
        let mut stored = self.stored.iter().peekable();
        loop {
            let order = match (current.peek(), stored.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((name, _)), Some((stored_name, _))) => name.cmp(stored_name),
            };
            match order {
                Ordering::Less => {
                    if let Some((name, topic)) = current.next() {
                        changed.push((name, Some(topic)));
                    }
                }
                Ordering::Greater => {
                    if let Some((name, _)) = stored.next() {
                        changed.push((name, None));
                    }
                }
                Ordering::Equal => {
                    if let (Some((name, topic)), Some((_, was))) = (current.next(), stored.next()) {
                        if !Arc::ptr_eq(topic, was) {
                            changed.push((name, Some(topic)));
                        }
                    }
                }
            }
        }
        let count = changed.len();
        let mut updates: Vec<(String, Option<Arc<TopicMeta>>)> = Vec::with_capacity(count);
        for (name, topic) in changed {
            match topic {
                Some(topic) => writes.put(Cf::RaftState, row_key(name), codec::encode(&**topic)?),
                None => writes.delete(Cf::RaftState, row_key(name)),
            }
            updates.push((name.clone(), topic.cloned()));
        }
        for (name, topic) in updates {
            match topic {
                Some(topic) => self.stored.insert(name, topic),
                None => self.stored.remove(&name),
            };
        }
        Ok(count)
    }

    /// Replaces every row with `topics` (a snapshot's).
    pub(crate) fn replace(
        &mut self,
        topics: &BTreeMap<String, Arc<TopicMeta>>,
        writes: &mut WriteSet,
    ) -> Result<(), io::Error> {
        writes.delete_range(Cf::RaftState, rows_start().to_vec(), rows_end().to_vec());
        self.stored.clear();
        self.sync(topics, writes)?;
        Ok(())
    }
}

/// The migration from on-disk format 11: moves the topics out of the metadata group's
/// persisted state into rows, in one write. Answers how many topics it moved (none when the
/// node has no metadata replica, or when they were moved already: it may run again).
pub fn move_topics_to_rows(store: &Store) -> Result<usize, io::Error> {
    let key = keys::group_tag(METADATA_GROUP, TAG_STATE);
    let Some(bytes) = store.get(Cf::RaftState, &key).map_err(io::Error::other)? else {
        return Ok(0);
    };
    let mut record: StateRecord = codec::decode(&bytes)?;
    if record.state.is_empty() {
        return Ok(0);
    }
    let (mut state, extension): (MetadataState, Option<MetadataStateExtension>) =
        codec::decode_extended(&record.state)?;
    let topics = std::mem::take(&mut state.topics);
    if topics.is_empty() {
        return Ok(0);
    }
    let mut writes = WriteSet::new();
    for (name, topic) in &topics {
        writes.put(Cf::RaftState, row_key(name), codec::encode(&**topic)?);
    }
    // The rest is written back as it was: the extension too, byte for byte.
    record.state = match &extension {
        Some(extension) => codec::encode_extended(&state, extension)?,
        None => codec::encode(&state)?,
    };
    writes.put(Cf::RaftState, key.to_vec(), codec::encode(&record)?);
    store.write(writes, true).map_err(io::Error::other)?;
    Ok(topics.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_domain::metadata::{MetadataCommand, MetadataState};
    use herald_domain::topic::TopicConfig;
    use herald_storage::StoreOptions;

    fn create(name: &str, partitions: usize) -> MetadataCommand {
        MetadataCommand::CreateTopic {
            name: name.into(),
            replication_factor: 1,
            config: TopicConfig::default(),
            replicas: vec![vec![1]; partitions],
            created_at_ms: 1,
        }
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        (dir, store)
    }

    #[test]
    fn a_change_writes_only_the_topics_it_touched_and_the_rows_read_back_as_the_state() {
        let (_dir, store) = store();
        let mut state = MetadataState::default();
        let mut rows = TopicRows::default();
        for name in ["a", "b", "c"] {
            state.apply(&create(name, 2));
        }
        let mut writes = WriteSet::new();
        assert_eq!(rows.sync(&state.topics, &mut writes).unwrap(), 3);
        store.write(writes, true).unwrap();
        // Nothing changed: nothing written.
        let mut writes = WriteSet::new();
        assert_eq!(rows.sync(&state.topics, &mut writes).unwrap(), 0);
        assert!(writes.is_empty());

        // One topic grows, one goes, one comes: three rows, the untouched one not among them.
        state.apply(&MetadataCommand::UpdateTopic {
            name: "b".into(),
            partitions: Some(3),
            config: Default::default(),
            new_replicas: vec![vec![1]],
        });
        state.apply(&MetadataCommand::DeleteTopic {
            name: "c".into(),
            deleted_at_ms: 2,
        });
        state.apply(&create("d", 1));
        let mut writes = WriteSet::new();
        assert_eq!(rows.sync(&state.topics, &mut writes).unwrap(), 3);
        store.write(writes, true).unwrap();
        let loaded = TopicRows::load(&store).unwrap();
        assert_eq!(loaded, state.topics);
        assert_eq!(loaded["b"].partitions.len(), 3);
        assert!(!loaded.contains_key("c"));

        // A snapshot's topics replace every row.
        let mut other = MetadataState::default();
        other.apply(&create("z", 1));
        let mut writes = WriteSet::new();
        rows.replace(&other.topics, &mut writes).unwrap();
        store.write(writes, true).unwrap();
        assert_eq!(TopicRows::load(&store).unwrap(), other.topics);
        let mut writes = WriteSet::new();
        assert_eq!(rows.sync(&other.topics, &mut writes).unwrap(), 0);
    }

    #[test]
    fn the_migration_moves_a_format_11_states_topics_into_rows_and_keeps_everything_else() {
        use crate::engine::state_machine::GroupApplier;
        use crate::metadata::applier::MetadataApplier;
        use herald_domain::wire_version::WireVersion;

        let (_dir, store) = store();
        assert_eq!(
            move_topics_to_rows(&store).unwrap(),
            0,
            "no metadata replica here"
        );
        let mut state = MetadataState::default();
        state.apply(&MetadataCommand::InitCluster {
            cluster_id: "c".into(),
        });
        state.apply(&MetadataCommand::RaiseClusterVersion {
            version: WireVersion(2),
        });
        for name in ["orders", "payments"] {
            state.apply(&create(name, 3));
        }
        // As format 11 stored it: the whole state, then its extension.
        let extension = MetadataStateExtension::V1 {
            cluster_version: WireVersion(2),
        };
        let mut record = StateRecord::default();
        record.state = codec::encode_extended(&state, &extension).unwrap();
        let key = keys::group_tag(METADATA_GROUP, TAG_STATE);
        let mut writes = WriteSet::new();
        writes.put(Cf::RaftState, key.to_vec(), codec::encode(&record).unwrap());
        store.write(writes, true).unwrap();

        assert_eq!(move_topics_to_rows(&store).unwrap(), 2);
        // Interrupted and run again: nothing left to move, nothing lost.
        assert_eq!(move_topics_to_rows(&store).unwrap(), 0);
        let stored: StateRecord =
            codec::decode(&store.get(Cf::RaftState, &key).unwrap().unwrap()).unwrap();
        let (persisted, kept): (MetadataState, Option<MetadataStateExtension>) =
            codec::decode_extended(&stored.state).unwrap();
        assert!(persisted.topics.is_empty());
        assert_eq!(kept, Some(extension));

        // What this release's state machine reads back is the state of before.
        let mut applier = MetadataApplier::new();
        applier.restore_state(&stored.state).unwrap();
        applier.load_rows(&store).unwrap();
        assert_eq!(applier.state(), &state);
    }
}
