//! Log compaction on one replica: the leader plans passes and replicates them; every replica
//! runs the passes it has queued (see [`compaction`](super::compaction)).

use herald_domain::RaftGroupId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::cleaner_state::{self, CleanTally};
use super::compaction::{self, CleanContext, PassEnd, PassReport};
use super::compaction_plan::{self, PlanSettings};
use super::replica::PartitionReplica;
use super::throttle::Throttle;
use crate::engine::group::{blocking, write_error};
use crate::engine::types::{RaftRequest, RaftResponse};
use crate::RaftLayerError;
use herald_storage::{keys, Cf, Store};

/// What the leader found when it checked a partition for cleaning.
#[derive(Debug, Clone, Copy)]
pub struct CompactionCheck {
    /// Messages written since the last pass, as a share of all messages.
    pub dirty_ratio: f64,
    /// The pass this check replicated, if any.
    pub queued_pass: Option<u64>,
}

/// What a cleaning job on the blocking pool owns, to lend as a [`CleanContext`].
struct CleanerHandles {
    store: Store,
    group: RaftGroupId,
    throttle: Arc<Mutex<Throttle>>,
    closing: Arc<AtomicBool>,
    log_lock: Arc<Mutex<()>>,
}

impl CleanerHandles {
    fn context(&self) -> CleanContext<'_> {
        CleanContext {
            store: &self.store,
            group: self.group,
            throttle: &self.throttle,
            closing: &self.closing,
            log_lock: &self.log_lock,
        }
    }
}

impl PartitionReplica {
    fn cleaner_handles(&self, throttle: Arc<Mutex<Throttle>>) -> CleanerHandles {
        CleanerHandles {
            store: self.store.clone(),
            group: self.group(),
            throttle,
            closing: self.closing.clone(),
            log_lock: self.log_lock.clone(),
        }
    }

    /// On the leader: plans a compaction pass when one is due and replicates it. Plans nothing
    /// while this replica still has a pass to run, so passes never pile up behind the
    /// leader's own cleaner.
    pub async fn plan_compaction(
        &self,
        settings: PlanSettings,
        throttle: Arc<Mutex<Throttle>>,
    ) -> Result<CompactionCheck, RaftLayerError> {
        let handles = self.cleaner_handles(throttle);
        let watermarks = self.watermarks();
        let progress = self.compaction.borrow().clone();
        let outcome = blocking(move || {
            let context = handles.context();
            if cleaner_state::next_queued(context.store, context.group)?.is_some() {
                return Ok(None);
            }
            let cleaner = cleaner_state::load(context.store, context.group)?;
            compaction_plan::plan(&context, watermarks, &progress, &cleaner, settings).map(Some)
        })
        .await?;
        let Some(outcome) = outcome else {
            return Ok(CompactionCheck {
                dirty_ratio: 0.0,
                queued_pass: None,
            });
        };
        let mut check = CompactionCheck {
            dirty_ratio: outcome.dirty_ratio,
            queued_pass: None,
        };
        let Some((plan, map)) = outcome.plan else {
            return Ok(check);
        };
        self.awake().await;
        let response = self
            .raft
            .client_write(RaftRequest::Compact(plan))
            .await
            .map_err(|error| write_error(self.group(), error))?;
        match response.data {
            RaftResponse::CompactionQueued { pass } => {
                if let Ok(mut prepared) = self.prepared_map.lock() {
                    *prepared = Some((pass, map));
                }
                check.queued_pass = Some(pass);
                Ok(check)
            }
            RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
            _ => Err(RaftLayerError::Rejected(
                "unexpected answer to a compaction plan".into(),
            )),
        }
    }

    /// Runs the compaction passes queued on this replica, in order, within the node's I/O
    /// budget; answers what each finished pass did. Stops early when the group shuts down (the
    /// pass resumes from its checkpoint when it starts again).
    pub async fn clean_queued(
        &self,
        throttle: Arc<Mutex<Throttle>>,
    ) -> Result<Vec<PassReport>, RaftLayerError> {
        let mut reports = Vec::new();
        loop {
            if self.closing.load(Ordering::Relaxed) {
                return Ok(reports);
            }
            let handles = self.cleaner_handles(throttle.clone());
            let prepared = self
                .prepared_map
                .lock()
                .ok()
                .and_then(|mut prepared| prepared.take());
            let log_start_offset = self.watermarks().log_start_offset;
            let ended = blocking(move || {
                let context = handles.context();
                let (store, group) = (context.store, context.group);
                let Some(pass) = cleaner_state::next_queued(store, group)? else {
                    return Ok(None);
                };
                let map = prepared
                    .filter(|(prepared_pass, _)| *prepared_pass == pass.pass)
                    .map(|(_, map)| map);
                let state = cleaner_state::load(store, group)?;
                let ended = compaction::run_pass(&context, &pass, log_start_offset, map, state)?;
                if let PassEnd::Finished(PassReport {
                    rewritten: Some((first, last)),
                    bytes_reclaimed,
                    ..
                }) = &ended
                {
                    if *bytes_reclaimed > 0 {
                        // Overwritten values take disk space until RocksDB compacts them away.
                        store.compact_range(
                            Cf::RaftLog,
                            &keys::group_u64(group, *first),
                            &keys::group_u64(group, last + 1),
                        )?;
                    }
                }
                Ok(Some(ended))
            })
            .await?;
            match ended {
                None | Some(PassEnd::Interrupted) => return Ok(reports),
                Some(PassEnd::Finished(report)) => reports.push(report),
            }
        }
    }

    /// How many compaction passes the applied log has planned (this replica runs them all).
    pub fn planned_passes(&self) -> u64 {
        self.compaction.borrow().passes
    }

    /// The last pass this replica finished, and what it left: messages and bytes kept, the
    /// oldest tombstone.
    pub async fn cleaner_progress(&self) -> Result<(u64, CleanTally), RaftLayerError> {
        let (store, group) = (self.store.clone(), self.group());
        blocking(move || {
            let state = cleaner_state::load(&store, group)?;
            Ok((state.done_pass, state.cleaned))
        })
        .await
    }
}
