//! What a lease's apply needs to know of new messages (key, `deliver_at`, `expires_at`), read
//! by the leader from its log at the subscription's read position just before it proposes the
//! lease. Apply cannot read the log itself: entries of its own batch may not be stored yet.

use crate::SubscriptionService;

use super::message_times;
use crate::fetch::MAX_FETCH_MESSAGES;
use crate::{BrokerError, BrokerResult};
use std::collections::BTreeSet;

use crate::topics::now_ms;
use crate::ConsumedMessage;
use herald_domain::batch::{decode_batch, visit_records};
use herald_raft::{
    key_hash, DeliveryCommand, LeaseFacts, MessageFacts, PartitionReplica, ReadLimits, StoredBatch,
};

/// How many messages waiting for their `deliver_at` one lease's facts reach past (besides
/// the `max_messages` it may lease): bounds the facts a lease entry carries.
pub const DELAYED_LOOKAHEAD: usize = 2_000;
/// How many reads gathering one lease's facts may take.
const MAX_FACT_READS: usize = 8;

impl SubscriptionService {
    /// Fills a lease's facts from the leader's log; other commands are left as they are.
    /// Answers the batches it read, so a puller on this node hands out the messages the lease
    /// takes from them instead of reading them again.
    pub(crate) async fn fill_lease_facts(
        &self,
        replica: &PartitionReplica,
        command: &mut DeliveryCommand,
    ) -> BrokerResult<Vec<StoredBatch>> {
        let DeliveryCommand::Lease {
            subscription,
            max_messages,
            start_offset,
            facts,
            ..
        } = command
        else {
            return Ok(Vec::new());
        };
        let marks = replica.watermarks();
        let from = replica
            .delivery_view()
            .read(|states| states.get(subscription).map(|state| state.read_position))
            .unwrap_or(*start_offset)
            .max(marks.log_start_offset);
        *facts = LeaseFacts {
            first_offset: from,
            messages: Vec::new(),
        };
        if from >= marks.high_watermark {
            return Ok(Vec::new());
        }
        let max = (*max_messages as usize).clamp(1, MAX_FETCH_MESSAGES);
        // Messages waiting for their `deliver_at` are read into the state (one entry each)
        // without being leased: the facts reach past them, so a pull gets the ready messages
        // behind up to DELAYED_LOOKAHEAD delayed ones at once instead of one empty pull per
        // `max_messages` of them.
        let most = (max + DELAYED_LOOKAHEAD).min(MAX_FETCH_MESSAGES);
        let now = now_ms();
        let mut ready = 0;
        let mut covered = from;
        let mut all = Vec::new();
        for read in 0..MAX_FACT_READS {
            let wanted = most - facts.messages.len().min(most);
            if ready >= max || wanted == 0 || covered >= marks.high_watermark {
                break;
            }
            // The first read as many as the lease may take; more only past delayed ones.
            let limits = ReadLimits {
                max_records: if read == 0 { max.min(wanted) } else { wanted },
                max_bytes: self.core.options.fetch_max_bytes,
            };
            let end = from + most as u64;
            let batches = replica.read(covered, limits).await?;
            if batches.is_empty() {
                break;
            }
            let before = covered;
            for batch in &batches {
                // Walked in place: only the key's hash and two headers are wanted, not copies
                // of every value.
                let header = visit_records(&batch.bytes, |record| {
                    let offset = batch.base_offset + u64::from(record.offset_delta);
                    if offset < before || offset >= end {
                        return;
                    }
                    // Offsets compaction removed get no facts of their own: leased, they are
                    // found missing and settled.
                    facts
                        .messages
                        .resize((offset - from) as usize, MessageFacts::default());
                    let (deliver_at_ms, expires_at_ms) = message_times::times_of(&record);
                    if deliver_at_ms.is_none_or(|at| at <= now) {
                        ready += 1;
                    }
                    facts.messages.push(MessageFacts {
                        key_hash: record.key.map(key_hash),
                        deliver_at_ms,
                        expires_at_ms,
                    });
                })
                .map_err(|error| {
                    BrokerError::Internal(format!(
                        "stored batch at offset {}: {error}",
                        batch.base_offset
                    ))
                })?;
                covered = covered.max(batch.base_offset + u64::from(header.offset_span));
            }
            covered = covered.min(end).min(marks.high_watermark);
            all.extend(batches);
            if covered <= before {
                break;
            }
        }
        // A batch ending in removed offsets: cover them too, or the read position would stop
        // in front of them.
        if covered > from + facts.messages.len() as u64 {
            facts
                .messages
                .resize((covered - from) as usize, MessageFacts::default());
        }
        Ok(all)
    }
}

/// The messages at `offsets` that `batches` (those a lease's facts were read from) hold, and
/// the offsets they do not (redeliveries from before the read position, removed records): those
/// are read from the log as usual.
pub(super) fn messages_in_batches(
    batches: &[StoredBatch],
    partition: u32,
    offsets: &BTreeSet<u64>,
) -> BrokerResult<(Vec<ConsumedMessage>, BTreeSet<u64>)> {
    let mut remaining = offsets.clone();
    let mut found = Vec::new();
    for batch in batches {
        if remaining.is_empty() {
            break;
        }
        let (_, records) = decode_batch(&batch.bytes).map_err(|error| {
            BrokerError::Internal(format!(
                "stored batch at offset {}: {error}",
                batch.base_offset
            ))
        })?;
        for record in records {
            let offset = batch.base_offset + u64::from(record.offset_delta);
            if remaining.remove(&offset) {
                found.push(ConsumedMessage {
                    partition,
                    offset,
                    timestamp: record.timestamp,
                    key: record.key,
                    value: record.value,
                    headers: record.headers,
                });
            }
        }
    }
    Ok((found, remaining))
}
