//! Topics and what the node keeps of them: topic administration, retention, compaction, the
//! memory budget.

mod compaction;
mod memory_budget;
mod retention;
mod topics;
