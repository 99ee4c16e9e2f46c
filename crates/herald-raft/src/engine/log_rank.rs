//! How advanced a copy of a group's log is, read from a store that no group runs on (a backup
//! being restored), ranked the way raft ranks logs in an election: by the last entry's log id
//! (the leader's term first, then the index).

use std::cmp::Ordering;

use super::codec;
use super::types::LogId;
use herald_storage::{keys, Cf, Store};

/// The last log id of one group's log in one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRank(Option<LogId>);

impl LogRank {
    /// Reads the rank of `group` in `store`: the last entry, or the last purged one when the
    /// log is empty (everything was purged behind a snapshot).
    pub fn read(store: &Store, group: u64) -> Result<LogRank, std::io::Error> {
        let last = store
            .last_in_range(
                Cf::RaftLog,
                &keys::group_start(group),
                &keys::group_end(group),
            )
            .map_err(std::io::Error::other)?;
        if let Some((_, value)) = last {
            return Ok(LogRank(Some(codec::decode_entry(&value)?.log_id)));
        }
        let purged = store
            .get(
                Cf::RaftState,
                &keys::group_tag(group, super::log_store::TAG_PURGED),
            )
            .map_err(std::io::Error::other)?;
        match purged {
            Some(bytes) => Ok(LogRank(Some(codec::decode::<LogId>(&bytes)?))),
            None => Ok(LogRank(None)),
        }
    }

    /// The last entry's index, if the log has any.
    pub fn index(&self) -> Option<u64> {
        self.0.as_ref().map(|log_id| log_id.index)
    }
}

impl PartialOrd for LogRank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LogRank {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

impl std::fmt::Display for LogRank {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(log_id) => write!(formatter, "{log_id}"),
            None => formatter.write_str("empty"),
        }
    }
}
