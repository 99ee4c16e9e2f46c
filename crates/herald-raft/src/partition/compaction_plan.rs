//! Planning a compaction pass, on the partition's leader: whether one is due and how far its
//! dirty section reaches. The plan is replicated as a `Compact` command; every replica then runs
//! it (see [`compaction`](super::compaction)). Blocking: callers run this off the async runtime.

use std::io;

use super::applier::{CompactionProgress, Watermarks};
use super::cleaner_state::CleanerState;
use super::compaction::{build_map, CleanContext, KeyMap};
use crate::engine::types::CompactionPlan;
use herald_storage::{keys, Cf};

/// What the leader found when it looked at a partition for cleaning.
pub struct PlanOutcome {
    /// Messages written since the last pass, as a share of all messages.
    pub dirty_ratio: f64,
    /// The pass to replicate, and the key map it built for it (the leader's own cleaner runs
    /// the pass with it instead of reading the dirty section again).
    pub plan: Option<(CompactionPlan, KeyMap)>,
}

/// What decides whether and how far a partition is cleaned.
#[derive(Debug, Clone, Copy)]
pub struct PlanSettings {
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub min_dirty_ratio: f64,
    pub map_budget: usize,
}

/// On the leader: whether the partition needs a pass, and which. The active tail (the newest
/// batch, and every batch holding a message younger than `min_compaction_lag_ms`) is never
/// part of a pass. A pass is planned when the dirty share reached `min_dirty_ratio`, or when
/// tombstones this replica still holds are past the horizon.
pub fn plan(
    context: &CleanContext<'_>,
    watermarks: Watermarks,
    progress: &CompactionProgress,
    cleaner: &CleanerState,
    settings: PlanSettings,
) -> Result<PlanOutcome, io::Error> {
    let (store, group) = (context.store, context.group);
    let dirty_start = progress.clean_end.max(watermarks.log_start_offset);
    let dirty = watermarks.high_watermark.saturating_sub(dirty_start);
    let clean = cleaner.cleaned.records_kept;
    let dirty_ratio = if dirty == 0 {
        0.0
    } else {
        dirty as f64 / (dirty + clean) as f64
    };
    let idle = PlanOutcome {
        dirty_ratio,
        plan: None,
    };
    let mut tail_start = match store.last_at_or_before(
        Cf::OffsetIndex,
        &keys::group_u64(group, watermarks.log_start_offset),
        &keys::group_u64(group, watermarks.high_watermark.saturating_sub(1)),
    )? {
        Some((key, _)) => keys::decode_group_u64(&key).map_or(dirty_start, |(_, base)| base),
        None => return Ok(idle),
    };
    if settings.min_compaction_lag_ms > 0 {
        let cutoff = settings
            .now_ms
            .saturating_sub(settings.min_compaction_lag_ms);
        if let Some((key, _)) = store.first_at_or_after(
            Cf::TimeIndex,
            &keys::time_index(group, cutoff, 0),
            &keys::group_end(group),
        )? {
            if let Some(base) = keys::decode_time_index(group, &key) {
                tail_start = tail_start.min(base);
            }
        }
    }
    let horizon =
        progress.tombstone_horizon(settings.now_ms.saturating_sub(settings.delete_retention_ms));
    let tombstones_due = cleaner
        .cleaned
        .oldest_tombstone
        .is_some_and(|oldest| oldest < horizon);
    let dirty_due = tail_start > dirty_start && dirty_ratio >= settings.min_dirty_ratio;
    if !dirty_due && !tombstones_due {
        return Ok(idle);
    }
    let (end, map) = if tail_start > dirty_start {
        build_map(context, dirty_start, tail_start, Some(settings.map_budget))?
    } else {
        (dirty_start, KeyMap::default())
    };
    Ok(PlanOutcome {
        dirty_ratio,
        plan: Some((
            CompactionPlan {
                clean_end: progress.clean_end,
                end,
                tombstone_horizon: horizon,
                planned_at_ms: settings.now_ms,
            },
            map,
        )),
    })
}
