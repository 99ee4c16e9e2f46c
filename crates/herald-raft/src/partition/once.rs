//! Idempotent appends on a partition's leader: each batch is its own `AppendOnce` entry, and
//! the partition's dedup window decides at apply whether it is written (see
//! [`dedup`](super::dedup)).

use crate::engine::error::RaftLayerError;
use crate::engine::types::RaftResponse;

/// What an idempotent append came to, as the partition's dedup window decided at apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnceOutcome {
    /// Written now, from this offset.
    Appended { base_offset: u64 },
    /// Written before and not again; where, when the window still remembers.
    Duplicate { base_offset: Option<u64> },
    /// Refused: the producer's next sequence is `expected`.
    OutOfOrderSequence { expected: i64 },
    /// Refused: the partition knows a newer epoch of the producer.
    ProducerFenced { current_epoch: i16 },
    /// Refused: the idempotency key was used for a different request.
    IdempotencyKeyReused,
}

pub(super) fn once_outcome(response: RaftResponse) -> Result<OnceOutcome, RaftLayerError> {
    Ok(match response {
        RaftResponse::Appended { base_offset, .. } => OnceOutcome::Appended { base_offset },
        RaftResponse::Duplicate { base_offset, .. } => OnceOutcome::Duplicate { base_offset },
        RaftResponse::OutOfOrderSequence { expected } => {
            OnceOutcome::OutOfOrderSequence { expected }
        }
        RaftResponse::ProducerFenced { current_epoch } => {
            OnceOutcome::ProducerFenced { current_epoch }
        }
        RaftResponse::IdempotencyKeyReused => OnceOutcome::IdempotencyKeyReused,
        RaftResponse::Rejected(reason) => return Err(RaftLayerError::Rejected(reason)),
        _ => {
            return Err(RaftLayerError::Rejected(
                "unexpected answer to an idempotent append".into(),
            ))
        }
    })
}
