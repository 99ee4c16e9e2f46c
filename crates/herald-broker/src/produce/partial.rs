//! One answer from the outcomes of a request's partition shares.
//!
//! Each share is written or refused by its own partition, so a request across partitions can
//! end partly written. A single error for the whole request would then lie: a client retrying
//! it would write the written shares twice. So:
//! - every share written: the offsets, as always;
//! - every share failed: one error, the most telling one: a `timeout` (the outcome is unknown,
//!   the messages may be written) beats a certain refusal, since it is the one a client must
//!   handle with care; among the others, the share whose first message comes first;
//! - some written, some failed: a partial answer, the offsets of the written messages and, per
//!   failed partition, its error; the client retries exactly the messages that have one.

use super::super::{BrokerError, BrokerResult, FailedShare, ProduceAnswer, ProducedOffset};

/// Where one partition's share of a request landed: its base offset (unknown for a producer's
/// duplicate too old to be remembered) and whether it was written before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Landed {
    pub partition: u32,
    pub base_offset: Option<u64>,
    pub duplicate: bool,
    pub records: usize,
    pub value_bytes: usize,
}

/// What one partition's share of a request came to.
#[derive(Debug)]
pub(super) struct Share {
    pub partition: u32,
    /// Where the share's first message is in the request.
    pub first_position: usize,
    pub outcome: BrokerResult<Landed>,
}

/// A request's answer, with the shares that were written (for the metrics).
#[derive(Debug)]
pub(super) struct Combined {
    pub answer: ProduceAnswer,
    pub written: Vec<Landed>,
}

/// Combines the shares of a request whose messages were placed as `placements` (per message,
/// in request order: its partition and its position in the partition's share).
pub(super) fn combine(
    placements: &[(u32, u64)],
    shares: Vec<Share>,
    idempotent: bool,
) -> BrokerResult<Combined> {
    let mut written = Vec::with_capacity(shares.len());
    let mut failed: Vec<(usize, FailedShare)> = Vec::new();
    for share in shares {
        match share.outcome {
            Ok(landed) => written.push(landed),
            Err(error) => failed.push((
                share.first_position,
                FailedShare {
                    partition: share.partition,
                    error,
                },
            )),
        }
    }
    failed.sort_by_key(|(first_position, _)| *first_position);
    if written.is_empty() {
        return Err(most_telling(
            failed.into_iter().map(|(_, share)| share.error),
        ));
    }
    let partitions = placements
        .iter()
        .map(|&(partition, _)| partition as usize + 1)
        .max()
        .unwrap_or(0);
    let mut base_offsets = vec![None; partitions];
    for share in &written {
        base_offsets[share.partition as usize] = share.base_offset;
    }
    let offsets = placements
        .iter()
        .map(|&(partition, delta)| ProducedOffset {
            partition,
            offset: base_offsets[partition as usize].map(|base| base + delta),
        })
        .collect();
    // Nothing written now only if every share was a duplicate; a partial answer is never one.
    let duplicate = idempotent && failed.is_empty() && written.iter().all(|share| share.duplicate);
    Ok(Combined {
        answer: ProduceAnswer {
            offsets,
            duplicate,
            failed: failed.into_iter().map(|(_, share)| share).collect(),
        },
        written,
    })
}

/// The error a request answers when none of its shares was written: the first `timeout` (its
/// outcome is unknown, so the client must know), otherwise the first error. `errors` are in
/// request order and not empty.
fn most_telling(errors: impl IntoIterator<Item = BrokerError>) -> BrokerError {
    let mut first = None;
    for error in errors {
        if matches!(error, BrokerError::Timeout(_)) {
            return error;
        }
        first.get_or_insert(error);
    }
    first.unwrap_or_else(|| BrokerError::Internal("a produce request without shares".into()))
}

/// The answer of an `acks=none` request: where each message goes, no offsets.
pub(super) fn unacknowledged(placements: &[(u32, u64)]) -> ProduceAnswer {
    ProduceAnswer {
        offsets: placements
            .iter()
            .map(|&(partition, _)| ProducedOffset {
                partition,
                offset: None,
            })
            .collect(),
        duplicate: false,
        failed: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(partition: u32, base_offset: u64, duplicate: bool) -> BrokerResult<Landed> {
        Ok(Landed {
            partition,
            base_offset: Some(base_offset),
            duplicate,
            records: 1,
            value_bytes: 1,
        })
    }

    fn share(partition: u32, first_position: usize, outcome: BrokerResult<Landed>) -> Share {
        Share {
            partition,
            first_position,
            outcome,
        }
    }

    /// Messages 0 and 2 to partition 0, message 1 to partition 1.
    const PLACEMENTS: [(u32, u64); 3] = [(0, 0), (1, 0), (0, 1)];

    fn offsets(answer: &ProduceAnswer) -> Vec<(u32, Option<u64>)> {
        answer
            .offsets
            .iter()
            .map(|produced| (produced.partition, produced.offset))
            .collect()
    }

    #[test]
    fn every_share_written_answers_every_offset() {
        let shares = vec![
            share(0, 0, written(0, 10, false)),
            share(1, 1, written(1, 4, false)),
        ];
        let combined = combine(&PLACEMENTS, shares, false).expect("written");
        assert_eq!(
            offsets(&combined.answer),
            [(0, Some(10)), (1, Some(4)), (0, Some(11))]
        );
        assert!(combined.answer.failed.is_empty());
        assert!(!combined.answer.duplicate);
        assert_eq!(combined.written.len(), 2);
    }

    #[test]
    fn a_failed_share_leaves_its_messages_without_offset_and_says_why() {
        let refused = Err(BrokerError::Overloaded("partition 1 is full".into()));
        let shares = vec![share(0, 0, written(0, 10, false)), share(1, 1, refused)];
        let combined = combine(&PLACEMENTS, shares, false).expect("partly written");
        assert_eq!(
            offsets(&combined.answer),
            [(0, Some(10)), (1, None), (0, Some(11))]
        );
        let failed = &combined.answer.failed;
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].partition, 1);
        assert!(matches!(failed[0].error, BrokerError::Overloaded(_)));
        assert_eq!(combined.written.len(), 1);
    }

    #[test]
    fn a_partial_answer_is_never_a_duplicate() {
        let refused = Err(BrokerError::IdempotencyKeyReused("k".into()));
        let shares = vec![share(0, 0, written(0, 10, true)), share(1, 1, refused)];
        let combined = combine(&PLACEMENTS, shares, true).expect("partly written");
        assert!(!combined.answer.duplicate);
        let shares = vec![
            share(0, 0, written(0, 10, true)),
            share(1, 1, written(1, 3, true)),
        ];
        assert!(
            combine(&PLACEMENTS, shares, true)
                .expect("dup")
                .answer
                .duplicate
        );
    }

    #[test]
    fn all_failed_answers_a_timeout_before_a_certain_refusal() {
        let shares = vec![
            share(0, 0, Err(BrokerError::NoLeader("partition 0".into()))),
            share(1, 1, Err(BrokerError::Timeout("partition 1".into()))),
        ];
        let error = combine(&PLACEMENTS, shares, false).expect_err("nothing written");
        assert!(matches!(error, BrokerError::Timeout(_)), "{error}");
    }

    #[test]
    fn all_refused_answers_the_share_of_the_first_message() {
        // Shares come in partition order; partition 1's first message is the request's first.
        let placements = [(1, 0), (0, 0)];
        let shares = vec![
            share(0, 1, Err(BrokerError::NoLeader("partition 0".into()))),
            share(1, 0, Err(BrokerError::Overloaded("partition 1".into()))),
        ];
        let error = combine(&placements, shares, false).expect_err("nothing written");
        assert!(matches!(error, BrokerError::Overloaded(_)), "{error}");
    }
}
