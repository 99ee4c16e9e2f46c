//! Topics and what the node keeps of them: topic administration, retention, compaction, the
//! memory budget, a full disk.

mod compaction;
mod full_disk;
mod memory_budget;
mod retention;
mod topics;
