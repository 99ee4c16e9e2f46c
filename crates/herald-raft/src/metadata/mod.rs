//! The metadata group: its applier (topics, nodes, producer ids, consumer groups), the consumer
//! groups' replicated state, and this node's replica handle.

pub(crate) mod applier;
pub(crate) mod consumer_groups;
pub(crate) mod replica;
pub(crate) mod topic_rows;
