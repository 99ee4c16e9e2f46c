//! The migration steps, one per format change since [`super::FIRST_SUPPORTED_FORMAT`]: step `i`
//! upgrades format `FIRST_SUPPORTED_FORMAT + i` to the next.
//!
//! A step rewrites what changed in place, through the store, and answers a one-line summary
//! for the log ("rewrote 1,204 group rows"). It must be safe to run again on a directory where
//! it was interrupted (the format is recorded only once it finished): read the old layout, write
//! the new one, delete the old keys in the same write set. The fixture of the format it reads
//! (`migrations/<N>/`, written by the release before the change) is what its test starts on.

use crate::storage::Store;

/// One step from a format to the next.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// What changed, for the log and for errors: "group rows gain a member's owner".
    pub what: &'static str,
    /// Rewrites the store in place; answers a summary of what it did.
    pub run: fn(&Store) -> anyhow::Result<String>,
}

/// Every step, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    // 11 -> 12
    Migration {
        what: "the metadata's topics move out of its persisted state into one row each",
        run: topics_to_rows,
    },
];

/// Format 12: a metadata change writes the topics it touched, not the whole state (which was
/// 1.1 MiB at 100,000 partitions). Nodes that hold no metadata replica have nothing to move.
fn topics_to_rows(store: &Store) -> anyhow::Result<String> {
    let moved = crate::raft::move_topics_to_rows(store)?;
    Ok(format!("moved {moved} topics into rows"))
}
