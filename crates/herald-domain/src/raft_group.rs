//! The id of a raft group: the metadata group or one partition's group.
//!
//! Its own type, because "group" also means a consumer group one layer up: a consumer group is
//! named by a string, a raft group by this number, and the compiler keeps the two apart. The
//! serialized form is the bare number (`serde(transparent)`), so stored metadata, raft entries
//! and RPC bodies are byte for byte what they were when the id was a `u64`; it prints as the
//! bare number too, so log lines and messages read the same.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A raft group's id: [`RaftGroupId::METADATA`], or a partition's, counted up from 1 and never
/// reused.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct RaftGroupId(u64);

impl RaftGroupId {
    /// The metadata group.
    pub const METADATA: RaftGroupId = RaftGroupId(0);

    pub const fn new(id: u64) -> RaftGroupId {
        RaftGroupId(id)
    }

    /// The number, for storage keys, metrics labels and log fields.
    pub const fn get(self) -> u64 {
        self.0
    }

    pub fn is_metadata(self) -> bool {
        self == RaftGroupId::METADATA
    }

    /// The id allocated after this one.
    pub fn next(self) -> RaftGroupId {
        RaftGroupId(self.0 + 1)
    }
}

/// For the storage keys, which start with the group's number (`herald-storage` knows no domain
/// types).
impl From<RaftGroupId> for u64 {
    fn from(id: RaftGroupId) -> u64 {
        id.0
    }
}

impl fmt::Display for RaftGroupId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, formatter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_and_prints_as_the_bare_number() {
        let id = RaftGroupId::new(300);
        assert_eq!(
            postcard::to_allocvec(&id).unwrap(),
            postcard::to_allocvec(&300u64).unwrap()
        );
        assert_eq!(serde_json::to_string(&id).unwrap(), "300");
        assert_eq!(id.to_string(), "300");
        assert_eq!(format!("group {id:>5}"), "group   300");
        let back: RaftGroupId =
            postcard::from_bytes(&postcard::to_allocvec(&300u64).unwrap()).unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn partition_groups_count_up_from_the_metadata_group() {
        assert!(RaftGroupId::METADATA.is_metadata());
        assert_eq!(RaftGroupId::METADATA.next(), RaftGroupId::new(1));
        assert!(!RaftGroupId::new(1).is_metadata());
    }
}
