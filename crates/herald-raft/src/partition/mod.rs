//! A partition's raft group: the applier that assigns offsets (`applier`), the dedup window of
//! idempotent producing (`dedup`, `once`), reads (`reader`), retention and compaction
//! (`retention`, `compaction`, `cleaning`), and this node's replica handle (`replica`).

pub(crate) mod applier;
pub(crate) mod cleaner_state;
pub(crate) mod cleaning;
pub(crate) mod compaction;
pub(crate) mod compaction_plan;
pub(crate) mod dedup;
pub(crate) mod dedup_rows;
pub(crate) mod once;
pub(crate) mod proposal;
pub(crate) mod reader;
pub(crate) mod replica;
pub(crate) mod retention;
pub(crate) mod subscriptions;
pub(crate) mod subscriptions_lease;
pub(crate) mod subscriptions_rows;
pub(crate) mod throttle;

#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod dedup_tests;
#[cfg(test)]
mod delivery_fixtures;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod subscriptions_delay_tests;
#[cfg(test)]
mod subscriptions_tests;
