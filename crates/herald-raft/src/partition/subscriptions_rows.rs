//! Where a partition keeps its subscriptions' delivery state: one row per subscription in
//! `raft_state` under the partition's group, rewritten in the same atomic write as the apply
//! that changed it. A row is bounded by the window (`subscriptions::MAX_WINDOW`); a deleted
//! partition loses the rows with the rest of its group's keys.

use herald_domain::RaftGroupId;
use std::io;

use super::subscriptions::{DeliveryStates, SubscriptionPartition};
use crate::engine::codec;
use herald_storage::{keys, Cf, Store, WriteSet};

/// `(group, TAG_SUBSCRIPTION, subscription id u64 BE)` → [`SubscriptionPartition`].
const TAG_SUBSCRIPTION: u8 = 26;

fn row_key(group: RaftGroupId, subscription: u64) -> Vec<u8> {
    keys::group_tag_u64(group, TAG_SUBSCRIPTION, subscription).to_vec()
}

/// Writes (or, when gone, deletes) the row of `subscription`.
pub(crate) fn persist(
    writes: &mut WriteSet,
    group: RaftGroupId,
    subscription: u64,
    state: Option<&SubscriptionPartition>,
) -> Result<(), io::Error> {
    match state {
        Some(state) => writes.put(
            Cf::RaftState,
            row_key(group, subscription),
            codec::encode(state)?,
        ),
        None => writes.delete(Cf::RaftState, row_key(group, subscription)),
    }
    Ok(())
}

/// Reads every subscription's state back (blocking).
pub(crate) fn load(store: &Store, group: RaftGroupId) -> Result<DeliveryStates, io::Error> {
    let mut states = DeliveryStates::new();
    store.scan(
        Cf::RaftState,
        &keys::group_tag(group, TAG_SUBSCRIPTION),
        &keys::group_tag(group, TAG_SUBSCRIPTION + 1),
        |key, row| {
            let suffix = keys::group_tag_suffix(group, TAG_SUBSCRIPTION, key).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "malformed subscription row key")
            })?;
            let id: [u8; 8] = suffix.try_into().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, "malformed subscription row key")
            })?;
            states.insert(u64::from_be_bytes(id), codec::decode(row)?);
            Ok(true)
        },
    )?;
    Ok(states)
}

/// Replaces every row with a snapshot's states.
pub(crate) fn replace_all(
    writes: &mut WriteSet,
    group: RaftGroupId,
    states: &DeliveryStates,
) -> Result<(), io::Error> {
    writes.delete_range(
        Cf::RaftState,
        keys::group_tag(group, TAG_SUBSCRIPTION).to_vec(),
        keys::group_tag(group, TAG_SUBSCRIPTION + 1).to_vec(),
    );
    for (subscription, state) in states {
        persist(writes, group, *subscription, Some(state))?;
    }
    Ok(())
}
