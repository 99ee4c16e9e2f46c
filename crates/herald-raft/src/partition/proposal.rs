//! Appends proposed without waiting for the ones before them: the partition's appender keeps
//! several raft entries in flight. A proposal returns once raft has it queued, so proposals
//! reach the log in the order they were made; what it returns resolves with the outcome.
//!
//! **Early answers (`acks=leader`).** Offsets are assigned at apply, so the base offset of an
//! entry not yet applied is a prediction. The leader keeps a *chain*: anchored when the log is
//! fully applied (the next entry's index is the last one plus one and its base offset the high
//! watermark), and extended by each plain append proposed after it (index plus one, offset plus
//! the batch's span). A prediction is only told once it is certain: every entry of the chain,
//! in order, is checked once flushed on this node, and must be the very batch proposed (the
//! same bytes in memory, found in the log's cache of recent entries) in the chain's term at the
//! predicted index. Then nothing else took an index or an offset between the anchor and it.
//! Anything else (an idempotent append, whose offsets depend on the dedup window; an entry of
//! another kind proposed meanwhile; a refused proposal; a new term; an entry the cache no
//! longer holds) breaks the chain: its remaining entries are answered at quorum, and a new
//! chain starts at the next proposal made while the log is fully applied.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use openraft::errors::{ClientWriteError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::rt::watch::WatchReceiver;
use openraft::EntryPayload;
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use super::once::{once_outcome, OnceOutcome};
use super::replica::PartitionReplica;
use crate::engine::error::RaftLayerError;
use crate::engine::group::write_error;
use crate::engine::recent_entries::RecentEntries;
use crate::engine::registry::PartitionRaft;
use crate::engine::types::{DedupClaim, RaftRequest, RaftResponse};
use herald_domain::batch::decode_header;

/// A plain append proposed: resolves with its base offset and span once a quorum has it.
pub type PendingAppend = BoxFuture<'static, Result<(u64, u32), RaftLayerError>>;
/// Idempotent appends proposed: resolves with each one's outcome, in order.
pub type PendingOnce = BoxFuture<'static, Vec<Result<OnceOutcome, RaftLayerError>>>;

/// The leader's chain of predictions (see the module doc).
#[derive(Default)]
pub(crate) struct Predictions {
    chain: Option<Chain>,
}

struct Chain {
    term: u64,
    next_index: u64,
    next_offset: u64,
    checked: Arc<watch::Sender<Checked>>,
}

/// How far a chain's entries were found where predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checked {
    /// Every entry of the chain before this index was found where predicted.
    before: u64,
    broken: bool,
}

/// One entry's place in a chain.
struct Predicted {
    term: u64,
    index: u64,
    base_offset: u64,
    checked: Arc<watch::Sender<Checked>>,
}

impl Predictions {
    /// Breaks the chain (the next proposal made on a fully applied log starts a new one).
    fn break_chain(&mut self) {
        if let Some(chain) = self.chain.take() {
            chain.checked.send_modify(|checked| checked.broken = true);
        }
    }
}

impl PartitionReplica {
    /// Proposes one stored batch; returns once raft has it queued, with what resolves to its
    /// base offset and span once a quorum has it. With `early`, the base offset is also sent
    /// there as soon as this node (the leader) has the entry durable, when it is certain (see
    /// the module doc); such an early answer may be lost by a failover.
    pub async fn propose_append(
        &self,
        batch: Bytes,
        early: Option<oneshot::Sender<u64>>,
    ) -> Result<PendingAppend, RaftLayerError> {
        let span = decode_header(&batch)
            .map_err(|error| RaftLayerError::Rejected(format!("corrupt batch: {error}")))?
            .offset_span;
        self.awake().await;
        let predicted = self.predict(span);
        let (responder, complete) = ProgressResponder::complete_only();
        let proposed = self
            .raft
            .client_write_ff(
                RaftRequest::Append {
                    batch: batch.clone(),
                },
                Some(responder),
            )
            .await;
        if let Err(fatal) = proposed {
            self.predictions.lock().break_chain();
            return Err(RaftLayerError::Fatal {
                group: self.group(),
                reason: fatal.to_string(),
            });
        }
        let group = self.group();
        let predictions = self.predictions.clone();
        let quorum = async move {
            let outcome = match complete.await {
                Ok(Ok(written)) => match written.data {
                    RaftResponse::Appended {
                        base_offset,
                        offset_span,
                    } => Ok((base_offset, offset_span)),
                    RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
                    _ => Err(RaftLayerError::Rejected(
                        "unexpected answer to an append".into(),
                    )),
                },
                Ok(Err(error)) => Err(write_error(group, RaftError::APIError(error))),
                Err(_) => Err(RaftLayerError::Fatal {
                    group,
                    reason: "the raft group stopped".into(),
                }),
            };
            if outcome.is_err() {
                predictions.lock().break_chain();
            }
            outcome
        };
        let Some(predicted) = predicted else {
            if early.is_some() {
                metrics::counter!("herald_leader_acks_total", "answered" => "at_quorum")
                    .increment(1);
            }
            return Ok(quorum.boxed());
        };
        let base_offset = predicted.base_offset;
        let check = tokio::spawn(check_in_chain(
            self.raft.clone(),
            self.recent.clone(),
            self.node_id(),
            predicted,
            batch,
        ));
        let Some(early) = early else {
            return Ok(quorum.boxed());
        };
        Ok(async move {
            tokio::pin!(quorum);
            tokio::select! {
                outcome = &mut quorum => {
                    // The quorum answered before this node's own flush was confirmed.
                    metrics::counter!("herald_leader_acks_total", "answered" => "at_quorum").increment(1);
                    outcome
                }
                found = check => {
                    let ours = found.unwrap_or(false);
                    let answered = if ours { "at_leader_fsync" } else { "at_quorum" };
                    metrics::counter!("herald_leader_acks_total", "answered" => answered).increment(1);
                    if ours {
                        let _ = early.send(base_offset);
                    }
                    quorum.await
                }
            }
        }
        .boxed())
    }

    /// The place of the next plain append of `span` offsets in the chain, extending it; or
    /// starting one when the log is fully applied. `None` when unknown.
    fn predict(&self, span: u32) -> Option<Predicted> {
        let mut predictions = self.predictions.lock();
        if predictions
            .chain
            .as_ref()
            .is_some_and(|chain| chain.checked.borrow().broken)
        {
            predictions.chain = None;
        }
        if predictions.chain.is_none() {
            predictions.chain = self.anchor();
        }
        let chain = predictions.chain.as_mut()?;
        let predicted = Predicted {
            term: chain.term,
            index: chain.next_index,
            base_offset: chain.next_offset,
            checked: chain.checked.clone(),
        };
        chain.next_index += 1;
        chain.next_offset += u64::from(span);
        Some(predicted)
    }

    /// A new chain, when this node leads and its log is fully applied.
    fn anchor(&self) -> Option<Chain> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        if metrics.current_leader != Some(self.node_id()) {
            return None;
        }
        let last_index = metrics.last_log_index?;
        let applied = metrics.last_applied.as_ref().map(|log_id| log_id.index);
        if applied != Some(last_index) {
            return None;
        }
        // The watermarks are published after the apply the metrics report; with nothing left
        // to apply they no longer move, except by an entry proposed meanwhile, which the
        // chain's check finds at the first predicted index.
        let high_watermark = self.watermarks().high_watermark;
        let next_index = last_index + 1;
        Some(Chain {
            term: metrics.current_term,
            next_index,
            next_offset: high_watermark,
            checked: Arc::new(watch::Sender::new(Checked {
                before: next_index,
                broken: false,
            })),
        })
    }

    /// Proposes idempotent batches, each as its own entry, in this order; returns once raft
    /// has them queued, with what resolves to each one's outcome. They reach raft in one
    /// message, so they share the log write and its fsync without sharing an entry. Breaks
    /// the chain of predictions: whether they take offsets is decided at apply.
    ///
    /// An entry a new leader discarded may still commit through another leader (openraft's
    /// `LogEntryDiscarded`), or never; it is reported as not led here all the same, because
    /// retrying an idempotent append is safe either way: a retry of an entry that did commit
    /// is answered as a duplicate by the dedup window.
    pub async fn propose_once_many(&self, appends: Vec<(Bytes, DedupClaim)>) -> PendingOnce {
        self.awake().await;
        self.predictions.lock().break_chain();
        let count = appends.len();
        let group = self.group();
        let requests = appends
            .into_iter()
            .map(|(batch, claim)| RaftRequest::AppendOnce { batch, claim });
        let proposed = self.raft.client_write_many(requests).await;
        async move {
            let mut outcomes = Vec::with_capacity(count);
            match proposed {
                Ok(mut results) => {
                    while let Some(result) = results.next().await {
                        outcomes.push(match result {
                            Ok(Ok(written)) => once_outcome(written.response),
                            Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => {
                                Err(RaftLayerError::NoLeader { group })
                            }
                            Ok(Err(error)) => Err(write_error(group, RaftError::APIError(error))),
                            Err(fatal) => Err(RaftLayerError::Fatal {
                                group,
                                reason: fatal.to_string(),
                            }),
                        });
                    }
                }
                Err(fatal) => {
                    tracing::warn!(group = group.get(), %fatal, "idempotent appends not proposed");
                }
            }
            while outcomes.len() < count {
                outcomes.push(Err(RaftLayerError::Fatal {
                    group,
                    reason: "the raft group stopped".into(),
                }));
            }
            outcomes
        }
        .boxed()
    }
}

/// Waits until the entries of the chain before `predicted` were found where predicted and
/// this node has flushed its log through `predicted.index`, then checks that the entry there
/// is `batch`, proposed in the chain's term by this node. Records the result in the chain;
/// answers whether the prediction holds.
async fn check_in_chain(
    raft: PartitionRaft,
    recent: Arc<RecentEntries>,
    node_id: u64,
    predicted: Predicted,
    batch: Bytes,
) -> bool {
    // Whatever ends this check without a verdict breaks the chain.
    struct Verdict<'a> {
        checked: &'a watch::Sender<Checked>,
        index: u64,
        found: Option<bool>,
    }
    impl Drop for Verdict<'_> {
        fn drop(&mut self) {
            let (index, found) = (self.index, self.found.unwrap_or(false));
            self.checked.send_modify(|checked| {
                if found && checked.before == index {
                    checked.before = index + 1;
                } else {
                    checked.broken = true;
                }
            });
        }
    }
    let mut verdict = Verdict {
        checked: &predicted.checked,
        index: predicted.index,
        found: None,
    };
    let mut chain = predicted.checked.subscribe();
    let before_ok = chain
        .wait_for(|checked| checked.broken || checked.before >= predicted.index)
        .await
        .is_ok_and(|checked| !checked.broken && checked.before == predicted.index);
    if !before_ok {
        return false;
    }
    let mut progress = raft.watch_log_progress();
    let reached = progress
        .wait_until(|point| {
            point
                .as_ref()
                .and_then(|point| point.last_log_id.as_ref())
                .is_some_and(|log_id| log_id.index >= predicted.index)
        })
        .await;
    let found = reached.is_ok()
        && recent.at(predicted.index).is_some_and(|entry| {
            entry.log_id.leader_id.term == predicted.term
                && entry.log_id.leader_id.node_id == node_id
                && matches!(
                    &entry.payload,
                    EntryPayload::Normal(RaftRequest::Append { batch: stored })
                        if stored.as_ptr() == batch.as_ptr() && stored.len() == batch.len()
                )
        });
    verdict.found = Some(found);
    found
}

/// Shared with the proposals' futures, which break the chain when an append fails.
pub(crate) type SharedPredictions = Arc<Mutex<Predictions>>;
