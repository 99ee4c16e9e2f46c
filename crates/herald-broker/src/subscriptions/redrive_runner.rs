//! Running redrive jobs: a supervisor on every node runs the jobs while the node leads the
//! metadata group, and stops them when it no longer does (the new leader's supervisor takes
//! over from the replicated checkpoint).
//!
//! A job republishes one batch at a time from its checkpoint. A batch is fixed by where it
//! starts (the checkpoint) and the job's settings: the messages from there in offset order, up
//! to the batch size, the byte budget or the end of the range. It is produced with
//! `acks=all` and an `Idempotency-Key` made of the job id, the dead-letter partition and the
//! batch's first offset; only then does the checkpoint move (compare-and-set). A runner that
//! dies between the two republishes the same batch under the same key, and the source topic's
//! dedup window answers it as a duplicate instead of writing it again.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::SubscriptionService;
use crate::topics::now_ms;
use crate::{
    Acks, Broker, BrokerError, BrokerResult, FetchRequest, Idempotence, OffsetSpec, ProduceMessage,
};
use herald_domain::redrive::{RedriveCommand, RedriveJob, RedriveOutcome, RedrivePartition};

/// How often the supervisor checks leadership when the metadata does not change.
const SUPERVISE_EVERY: Duration = Duration::from_millis(250);
/// How long a runner waits after a failure it expects to pass (no leader, a timeout).
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// The most bytes of values one batch republishes (the first message whatever its size).
const MAX_BATCH_BYTES: usize = 4 << 20;
/// How many reads gathering one batch may take. Far more than a batch needs: a batch cut short
/// by it would differ from the same batch read again after a crash.
const MAX_READS_PER_BATCH: usize = 1_024;
/// How many dead letters a batch may pass over per message it may republish.
const SCAN_PER_BATCH_MESSAGE: u32 = 10;

pub const REDRIVE_COUNT_HEADER: &str = "herald-redrive-count";
const DLQ_HEADER_PREFIX: &str = "herald-dlq-";
const DLQ_SUBSCRIPTION: &str = "herald-dlq-subscription";
const DLQ_SOURCE_TOPIC: &str = "herald-dlq-source-topic";
const DLQ_SOURCE_PARTITION: &str = "herald-dlq-source-partition";

/// Starts the node's redrive supervisor; it ends when the node shuts down.
pub fn spawn_redrive_supervisor(broker: Broker) {
    let queues = broker.subscriptions().clone();
    tokio::spawn(async move { queues.supervise_redrives().await });
}

/// One batch, read and ready to republish.
struct Batch {
    first: u64,
    /// Where the checkpoint moves once the batch is written.
    next: u64,
    messages: Vec<ProduceMessage>,
    messages_len: u64,
    skipped: u64,
}

impl SubscriptionService {
    async fn supervise_redrives(self) {
        let cluster = self.core.cluster();
        let mut stopping = cluster.stopping();
        let mut changes = cluster.metadata().changes();
        let mut runners: HashMap<u64, JoinHandle<()>> = HashMap::new();
        loop {
            if *stopping.borrow() {
                break;
            }
            runners.retain(|_, runner| !runner.is_finished());
            let metadata = changes.borrow_and_update().clone();
            if self.core.cluster().metadata().is_leader() {
                for job in metadata.redrives.running() {
                    if !runners.contains_key(&job.id) {
                        let service = self.clone();
                        let (subscription_id, job_id) = (job.subscription_id, job.id);
                        tracing::info!(
                            subscription = job.subscription,
                            job = job_id,
                            "running a redrive"
                        );
                        runners.insert(
                            job_id,
                            tokio::spawn(async move {
                                service.run_redrive(subscription_id, job_id).await
                            }),
                        );
                    }
                }
            } else {
                for (_, runner) in runners.drain() {
                    runner.abort();
                }
            }
            tokio::select! {
                _ = stopping.changed() => {}
                _ = changes.changed() => {}
                _ = tokio::time::sleep(SUPERVISE_EVERY) => {}
            }
        }
        for (_, runner) in runners.drain() {
            runner.abort();
        }
    }

    /// Runs one job until it is no longer running here (done, failed, cancelled) or this node
    /// no longer leads the metadata.
    async fn run_redrive(&self, subscription_id: u64, job_id: u64) {
        let started = Instant::now();
        let mut republished = 0u64;
        loop {
            if !self.core.cluster().metadata().is_leader() {
                return;
            }
            let Some(job) = self
                .redrive_job(subscription_id)
                .filter(|job| job.id == job_id && job.state.is_running())
            else {
                return;
            };
            let Some(range) = job.partitions.iter().find(|p| p.next < p.end).cloned() else {
                return;
            };
            match self
                .redrive_batch(&job, &range, started, &mut republished)
                .await
            {
                Ok(()) => {}
                Err(error) if is_permanent(&error) => {
                    tracing::warn!(subscription = job.subscription, job = job.id, %error, "redrive failed");
                    // What clients read: an internal fault's cause stays in the log.
                    let reason = match &error {
                        BrokerError::Internal(_) => format!(
                            "an internal error on node {}; its log has the cause",
                            self.core.cluster().node_id()
                        ),
                        other => other.to_string(),
                    };
                    let command = RedriveCommand::Fail {
                        subscription_id,
                        job_id,
                        reason,
                        now_ms: now_ms(),
                    };
                    if let Err(error) = self.propose_redrive(command).await {
                        tracing::debug!(job = job.id, %error, "recording a redrive failure");
                        tokio::time::sleep(RETRY_AFTER).await;
                    }
                }
                Err(error) => {
                    tracing::debug!(subscription = job.subscription, job = job.id, %error, "redrive batch failed; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }

    async fn redrive_batch(
        &self,
        job: &RedriveJob,
        range: &RedrivePartition,
        started: Instant,
        republished: &mut u64,
    ) -> BrokerResult<()> {
        let batch = self.read_batch(job, range).await?;
        if !batch.messages.is_empty() {
            // The rate bound: this batch goes out no earlier than the messages before it allow.
            let due =
                started + Duration::from_secs_f64(*republished as f64 / job.max_per_second as f64);
            tokio::time::sleep_until(due).await;
            let count = batch.messages.len() as u64;
            let idempotence = Idempotence {
                idempotency_key: Some(format!(
                    "herald-redrive-{}-{}-{}",
                    job.id, range.partition, batch.first
                )),
                producer: None,
            };
            let answer = self
                .produce
                .produce(&job.source_topic, batch.messages, Acks::All, idempotence)
                .await?;
            if !answer.failed.is_empty() || answer.offsets.iter().any(|o| o.offset.is_none()) {
                return Err(BrokerError::Unavailable(
                    "part of a redrive batch was not written; it is sent again".into(),
                ));
            }
            if answer.duplicate {
                tracing::info!(
                    subscription = job.subscription,
                    job = job.id,
                    partition = range.partition,
                    first_offset = batch.first,
                    "redrive batch was written before its checkpoint moved: answered from the dedup window, not written again"
                );
            }
            *republished += count;
            metrics::counter!("herald_subscription_redriven_total", "subscription" => job.subscription.clone())
                .increment(count);
        }
        let command = RedriveCommand::Progress {
            subscription_id: job.subscription_id,
            job_id: job.id,
            partition: range.partition,
            expected_next: range.next,
            next: batch.next,
            redriven: batch.messages_len,
            skipped: batch.skipped,
            now_ms: now_ms(),
        };
        match self.propose_redrive(command).await? {
            RedriveOutcome::Job(_) | RedriveOutcome::Stale => Ok(()),
            RedriveOutcome::Invalid(reason) => Err(BrokerError::Internal(reason)),
            other => Err(BrokerError::Internal(format!(
                "unexpected answer to a redrive checkpoint: {other:?}"
            ))),
        }
    }

    /// Reads the batch that starts at the partition's checkpoint.
    async fn read_batch(&self, job: &RedriveJob, range: &RedrivePartition) -> BrokerResult<Batch> {
        let source_partitions = self
            .core
            .cluster()
            .metadata()
            .current()
            .topics
            .get(&job.source_topic)
            .map(|topic| topic.partitions.len() as u32)
            .ok_or_else(|| BrokerError::TopicNotFound(job.source_topic.clone()))?;
        let mut offset = range.next;
        // Other subscriptions' dead letters are passed over without writing anything, up to
        // this many per batch, so a shared dead-letter topic costs few checkpoints.
        let scan_limit = job.batch_size.saturating_mul(SCAN_PER_BATCH_MESSAGE);
        let mut scanned = 0u32;
        let mut bytes = 0usize;
        let mut messages = Vec::new();
        let mut skipped = 0u64;
        let mut full = false;
        for _ in 0..MAX_READS_PER_BATCH {
            if full || offset >= range.end {
                break;
            }
            let request = FetchRequest {
                topic: job.dead_letter_topic.clone(),
                partition: range.partition,
                offset: OffsetSpec::At(offset),
                max_messages: (scan_limit - scanned) as usize,
                max_wait: Duration::ZERO,
            };
            let read = match self.fetch.fetch(request).await {
                Ok(read) => read,
                Err(BrokerError::OffsetOutOfRange {
                    log_start_offset, ..
                }) if offset < log_start_offset => {
                    // Removed by retention meanwhile: nothing left to republish below it.
                    offset = log_start_offset.min(range.end);
                    continue;
                }
                Err(error) => return Err(error),
            };
            for message in read.messages {
                if message.offset < offset {
                    continue;
                }
                if message.offset >= range.end {
                    offset = range.end;
                    break;
                }
                if scanned >= scan_limit || messages.len() >= job.batch_size as usize {
                    full = true;
                    break;
                }
                let size = message.value.as_bytes().len();
                let republished = redriven_message(job, &message.headers, source_partitions);
                if republished.is_some() && !messages.is_empty() && bytes + size > MAX_BATCH_BYTES {
                    full = true;
                    break;
                }
                scanned += 1;
                offset = message.offset + 1;
                match republished {
                    Some((headers, partition)) => {
                        bytes += size;
                        messages.push(ProduceMessage {
                            key: message.key,
                            value: message.value,
                            headers,
                            partition,
                            timestamp: None,
                        });
                    }
                    None => skipped += 1,
                }
            }
            if !full {
                if scanned >= scan_limit || messages.len() >= job.batch_size as usize {
                    full = true;
                } else if read.next_offset > offset {
                    // Past a compaction gap.
                    offset = read.next_offset.min(range.end);
                } else if read.next_offset >= read.high_watermark {
                    break;
                }
            }
        }
        if offset <= range.next {
            return Err(BrokerError::Unavailable(format!(
                "no progress reading dead-letter partition {} at offset {}",
                range.partition, range.next
            )));
        }
        let messages_len = messages.len() as u64;
        Ok(Batch {
            first: range.next,
            next: offset,
            messages,
            skipped,
            messages_len,
        })
    }
}

type Headers = Vec<(String, String)>;

/// The headers and partition a dead letter is republished with, or `None` when it is not this
/// job's (another subscription's, or from another topic).
fn redriven_message(
    job: &RedriveJob,
    headers: &Headers,
    source_partitions: u32,
) -> Option<(Headers, Option<u32>)> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    };
    if header(DLQ_SUBSCRIPTION) != Some(job.subscription.as_str())
        || header(DLQ_SOURCE_TOPIC) != Some(job.source_topic.as_str())
    {
        return None;
    }
    let partition = header(DLQ_SOURCE_PARTITION)
        .and_then(|value| value.parse::<u32>().ok())
        .filter(|partition| *partition < source_partitions);
    let count = header(REDRIVE_COUNT_HEADER)
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(0);
    // A message that expired or waited for its time before it was dead-lettered is redriven
    // to be delivered now: its `deliver_at` and `expires_at` would only hold it or expire it
    // again at once.
    let mut kept: Headers = headers
        .iter()
        .filter(|(name, _)| {
            !name.starts_with(DLQ_HEADER_PREFIX)
                && name != REDRIVE_COUNT_HEADER
                && name != super::message_times::DELIVER_AT_HEADER
                && name != super::message_times::EXPIRES_AT_HEADER
        })
        .cloned()
        .collect();
    kept.push((
        REDRIVE_COUNT_HEADER.to_string(),
        count.saturating_add(1).to_string(),
    ));
    Some((kept, partition))
}

/// Errors that will not pass by trying again: the job fails with them.
fn is_permanent(error: &BrokerError) -> bool {
    matches!(
        error,
        BrokerError::TopicNotFound(_)
            | BrokerError::PartitionNotFound { .. }
            | BrokerError::InvalidRequest(_)
            | BrokerError::MessageTooLarge { .. }
            | BrokerError::IdempotencyKeyReused(_)
            | BrokerError::Internal(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_domain::redrive::RedriveState;

    fn job() -> RedriveJob {
        RedriveJob {
            id: 1,
            subscription: "s".into(),
            subscription_id: 1,
            source_topic: "orders".into(),
            dead_letter_topic: "dead".into(),
            from_offset: None,
            to_offset: None,
            max_per_second: 10,
            batch_size: 2,
            partitions: vec![],
            state: RedriveState::Running,
            reason: None,
            redriven: 0,
            skipped: 0,
            started_at_ms: 0,
            finished_at_ms: None,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn dlq_headers_go_and_the_redrive_count_counts_up() {
        let dead = headers(&[
            ("trace", "t1"),
            ("herald-expires-at", "5"),
            ("herald-deliver-at", "3"),
            ("herald-dlq-reason", "max_attempts"),
            ("herald-dlq-source-topic", "orders"),
            ("herald-dlq-source-partition", "2"),
            ("herald-dlq-subscription", "s"),
            ("herald-redrive-count", "3"),
        ]);
        let (kept, partition) = redriven_message(&job(), &dead, 4).unwrap();
        assert_eq!(
            kept,
            headers(&[("trace", "t1"), ("herald-redrive-count", "4")])
        );
        assert_eq!(partition, Some(2));
        // The partition is gone (fewer now): key or round-robin decides.
        assert_eq!(redriven_message(&job(), &dead, 2).unwrap().1, None);
        let first = headers(&[
            ("herald-dlq-source-topic", "orders"),
            ("herald-dlq-subscription", "s"),
        ]);
        assert_eq!(
            redriven_message(&job(), &first, 1).unwrap().0,
            headers(&[("herald-redrive-count", "1")])
        );
    }

    #[test]
    fn other_subscriptions_and_topics_are_skipped() {
        let other = headers(&[
            ("herald-dlq-source-topic", "orders"),
            ("herald-dlq-subscription", "other"),
        ]);
        assert!(redriven_message(&job(), &other, 1).is_none());
        let elsewhere = headers(&[
            ("herald-dlq-source-topic", "payments"),
            ("herald-dlq-subscription", "s"),
        ]);
        assert!(redriven_message(&job(), &elsewhere, 1).is_none());
        assert!(redriven_message(&job(), &headers(&[("a", "b")]), 1).is_none());
    }
}
