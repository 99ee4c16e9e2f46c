//! Pulling: lease deliverable messages over the topic's partitions, read them, and hand them
//! out with their ack ids; messages past their attempts go to the dead-letter topic on the
//! way. A pull with nothing to lease waits (up to `max_wait`) for what can change that: a new
//! message (the partition's watermark), an applied queue command, or the next retry time.

use herald_domain::RaftGroupId;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{select_all, BoxFuture};
use tokio::sync::watch;
use tokio::time::Instant;

use super::ack_id::AckId;
use super::facts::messages_in_batches;
use super::SubscriptionService;
use crate::fetch::MAX_WAIT;
use crate::topics::now_ms;
use crate::{
    Acks, BrokerError, BrokerResult, ConsumedMessage, FetchRequest, Idempotence, OffsetSpec,
    ProduceMessage,
};
use herald_domain::subscriptions::{Ordering as DeliveryOrdering, StartPosition, SubscriptionMeta};
use herald_raft::{
    DeadLetter, DeliveryCommand, DeliveryOutcome, LeaseFacts, LeaseRef, PartitionReplica,
};

/// The most messages one pull answers.
pub const MAX_PULL_MESSAGES: u32 = 1_000;
/// When a partition's leader could not be asked to wait (none yet, or a node of an older
/// version), how long a waiting pull pauses before asking for a lease again.
const REMOTE_RECHECK: Duration = Duration::from_millis(250);
/// How many reads gathering one lease's messages may take.
const MAX_READS_PER_LEASE: usize = 64;

/// Spreads pulls over the partitions: each pull starts at the next one.
static ROTATION: AtomicUsize = AtomicUsize::new(0);

/// One delivery of one message.
#[derive(Debug, Clone)]
pub struct PulledMessage {
    pub ack_id: String,
    pub delivery_attempt: u32,
    pub topic: String,
    pub message: ConsumedMessage,
}

/// A partition of the subscription's topic.
#[derive(Clone, Copy)]
pub(super) struct Part {
    pub(super) partition: u32,
    pub(super) group: RaftGroupId,
}

impl SubscriptionService {
    pub async fn pull(
        &self,
        name: &str,
        max_messages: u32,
        max_wait: Duration,
    ) -> BrokerResult<Vec<PulledMessage>> {
        if !(1..=MAX_PULL_MESSAGES).contains(&max_messages) {
            return Err(BrokerError::InvalidRequest(format!(
                "max_messages must be between 1 and {MAX_PULL_MESSAGES}"
            )));
        }
        if max_wait > MAX_WAIT {
            return Err(BrokerError::InvalidRequest(format!(
                "max_wait_ms must be at most {}",
                MAX_WAIT.as_millis()
            )));
        }
        let meta = self.get(name)?;
        let deadline = Instant::now() + max_wait;
        loop {
            let parts = self.parts(&meta)?;
            // Taken before looking, so a change while leasing still wakes the wait below.
            let mut changes = self.change_watches(&meta, &parts, deadline);
            let mut pulled = Vec::new();
            let mut failure = None;
            let start = ROTATION.fetch_add(1, Ordering::Relaxed);
            for index in 0..parts.len() {
                let part = parts[(start + index) % parts.len()];
                let want = max_messages as usize - pulled.len();
                if want == 0 {
                    break;
                }
                if !self.worth_leasing(&meta, part) {
                    continue;
                }
                match self.lease_partition(&meta, part, want as u32).await {
                    Ok(messages) => pulled.extend(messages),
                    Err(error) => {
                        tracing::debug!(subscription = name, partition = part.partition, %error, "lease failed");
                        failure = Some(error);
                    }
                }
            }
            if !pulled.is_empty() {
                return Ok(pulled);
            }
            if let Some(error) = failure {
                return Err(error);
            }
            if Instant::now() >= deadline {
                return Ok(pulled);
            }
            let wake = self.next_wake(&meta, &parts, deadline);
            wait_for_change(&mut changes, wake).await;
        }
    }

    fn parts(&self, meta: &SubscriptionMeta) -> BrokerResult<Vec<Part>> {
        let metadata = self.core.cluster().metadata().current();
        let topic = metadata
            .topics
            .get(&meta.config.topic)
            .ok_or_else(|| BrokerError::TopicNotFound(meta.config.topic.clone()))?;
        Ok(topic
            .partitions
            .iter()
            .enumerate()
            .map(|(partition, assignment)| Part {
                partition: partition as u32,
                group: assignment.group_id,
            })
            .collect())
    }

    fn local(&self, part: Part) -> Option<Arc<PartitionReplica>> {
        self.core.cluster().replicas().get(part.group)
    }

    /// Whether a lease could get anything, as this node's replica knows (the leader's may be
    /// a little ahead; a miss is corrected by the wake-up its apply causes here). Without a
    /// replica here, or without state yet (the first lease sets the start), the leader decides.
    fn worth_leasing(&self, meta: &SubscriptionMeta, part: Part) -> bool {
        let Some(replica) = self.local(part) else {
            return true;
        };
        let high_watermark = replica.watermarks().high_watermark;
        let now = now_ms();
        replica
            .delivery_view()
            .read(|states| match states.get(&meta.id) {
                None => true,
                Some(state) => state
                    .next_deliverable(now, high_watermark, &meta.config.retry_policy)
                    .is_some_and(|at| at <= now),
            })
    }

    /// When the earliest retry or lease expiry here comes due, within the deadline (partitions
    /// without a replica here are waited for on their leader: see [`Self::change_watches`]).
    fn next_wake(&self, meta: &SubscriptionMeta, parts: &[Part], deadline: Instant) -> Instant {
        let now = now_ms();
        let mut wake = deadline;
        for part in parts {
            let Some(replica) = self.local(*part) else {
                continue;
            };
            let high_watermark = replica.watermarks().high_watermark;
            let due = replica.delivery_view().read(|states| {
                states.get(&meta.id).and_then(|state| {
                    state.next_deliverable(now, high_watermark, &meta.config.retry_policy)
                })
            });
            if let Some(due) = due {
                let after = Duration::from_millis(due.saturating_sub(now).max(1) as u64);
                wake = wake.min(Instant::now() + after);
            }
        }
        wake
    }

    /// What can wake a waiting pull: the watermarks and applied queue commands of each
    /// partition with a replica here, and for each without one, a wait on its leader (started
    /// when the pull waits, lasting up to its deadline; it answers when a lease there could get
    /// something).
    fn change_watches(
        &self,
        meta: &SubscriptionMeta,
        parts: &[Part],
        deadline: Instant,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for part in parts {
            if let Some(replica) = self.local(*part) {
                let mut marks = replica.subscribe();
                marks.borrow_and_update();
                changes.push(Change::Marks(marks));
                let mut queues = replica.delivery_view().changes();
                queues.borrow_and_update();
                changes.push(Change::Queues(queues));
            } else {
                let queues = self.clone();
                let (subscription, retry) = (meta.id, meta.config.retry_policy);
                let group = part.group;
                changes.push(Change::Remote(Some(Box::pin(async move {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    let waited = queues
                        .wait_on_leader(group, subscription, retry, wait)
                        .await;
                    if let Err(error) = waited {
                        tracing::debug!(group = group.get(), %error, "waiting on a partition leader");
                        tokio::time::sleep(REMOTE_RECHECK.min(wait)).await;
                    }
                }))));
            }
        }
        changes
    }

    /// Where the subscription starts on a partition it never read.
    async fn start_offset(&self, meta: &SubscriptionMeta, part: Part) -> BrokerResult<u64> {
        match meta.config.start {
            StartPosition::Earliest => Ok(0),
            StartPosition::Latest => self.fetch.find_offset(part.group, meta.created_at_ms).await,
        }
    }

    async fn lease_partition(
        &self,
        meta: &SubscriptionMeta,
        part: Part,
        want: u32,
    ) -> BrokerResult<Vec<PulledMessage>> {
        let known_here = self.local(part).is_some_and(|replica| {
            replica
                .delivery_view()
                .read(|states| states.contains_key(&meta.id))
        });
        let start_offset = if known_here {
            0
        } else {
            self.start_offset(meta, part).await?
        };
        let command = DeliveryCommand::Lease {
            subscription: meta.id,
            now_ms: now_ms(),
            max_messages: want,
            ack_deadline_ms: meta.config.ack_deadline_ms,
            start_offset,
            retry: meta.config.retry_policy,
            max_attempts: meta
                .config
                .dead_letter_policy
                .as_ref()
                .map(|policy| policy.max_delivery_attempts),
            key_ordering: meta.config.ordering == DeliveryOrdering::Key,
            // The leader reads them (`Broker::lease_facts`): it knows the read position.
            facts: LeaseFacts::default(),
        };
        let (outcome, batches) = self.lease_on_leader(part.group, command).await?;
        let DeliveryOutcome::Leased {
            deliveries,
            dead_letters,
            token,
            ..
        } = outcome
        else {
            return Err(BrokerError::Internal(format!(
                "a lease was answered {outcome:?}"
            )));
        };
        if !dead_letters.is_empty() {
            if let Err(error) = self.dead_letter(meta, part, &dead_letters, token).await {
                // They stay leased and come back when the lease expires: never lost.
                tracing::warn!(subscription = meta.name, partition = part.partition, %error, "dead-lettering failed; will retry");
            }
        }
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let offsets: BTreeSet<u64> = deliveries.iter().map(|(offset, _)| *offset).collect();
        // New messages usually come from what the leader (this node) read for the facts.
        let (mut messages, unread) = messages_in_batches(&batches, part.partition, &offsets)?;
        let mut missing = BTreeSet::new();
        if !unread.is_empty() {
            let (read, gone) = self.read_offsets(meta, part, &unread).await?;
            messages.extend(read);
            messages.sort_by_key(|message| message.offset);
            missing = gone;
        }
        if !missing.is_empty() {
            // Gone from the log (retention or compaction): nothing to deliver, ever.
            let leases = deliveries
                .iter()
                .filter(|(offset, _)| missing.contains(offset))
                .map(|(offset, attempt)| LeaseRef {
                    offset: *offset,
                    attempt: *attempt,
                    token,
                })
                .collect();
            let command = DeliveryCommand::Ack {
                subscription: meta.id,
                now_ms: now_ms(),
                leases,
            };
            if let Err(error) = self.apply_on_leader(part.group, command).await {
                tracing::debug!(subscription = meta.name, %error, "settling offsets gone from the log");
            }
        }
        let attempts: std::collections::BTreeMap<u64, u32> = deliveries.into_iter().collect();
        Ok(messages
            .into_iter()
            .map(|message| {
                let attempt = attempts.get(&message.offset).copied().unwrap_or(1);
                let ack_id = AckId {
                    subscription: meta.id,
                    partition: part.partition,
                    lease: LeaseRef {
                        offset: message.offset,
                        attempt,
                        token,
                    },
                };
                PulledMessage {
                    ack_id: ack_id.encode(),
                    delivery_attempt: attempt,
                    topic: meta.config.topic.clone(),
                    message,
                }
            })
            .collect())
    }

    /// Reads the messages at `offsets`; answers them and the offsets the log does not hold.
    async fn read_offsets(
        &self,
        meta: &SubscriptionMeta,
        part: Part,
        offsets: &BTreeSet<u64>,
    ) -> BrokerResult<(Vec<ConsumedMessage>, BTreeSet<u64>)> {
        let mut remaining = offsets.clone();
        let mut found = Vec::with_capacity(offsets.len());
        let mut missing = BTreeSet::new();
        for _ in 0..MAX_READS_PER_LEASE {
            let (Some(&first), Some(&last)) = (remaining.first(), remaining.last()) else {
                break;
            };
            let request = FetchRequest {
                topic: meta.config.topic.clone(),
                partition: part.partition,
                offset: OffsetSpec::At(first),
                max_messages: (last - first + 1) as usize,
                max_wait: Duration::ZERO,
            };
            let read = match self.fetch.fetch(request).await {
                Ok(read) => read,
                Err(BrokerError::OffsetOutOfRange {
                    log_start_offset, ..
                }) if first < log_start_offset => {
                    let kept = remaining.split_off(&log_start_offset);
                    missing.extend(std::mem::replace(&mut remaining, kept));
                    continue;
                }
                Err(error) => return Err(error),
            };
            for message in read.messages {
                if remaining.remove(&message.offset) {
                    found.push(message);
                }
            }
            let beyond = remaining.split_off(&read.next_offset.max(first + 1));
            missing.extend(std::mem::replace(&mut remaining, beyond));
        }
        // Not read within the reads allowed: left leased, they come back after the deadline.
        found.sort_by_key(|message| message.offset);
        Ok((found, missing))
    }

    /// Publishes messages leased for dead-lettering (past their attempts, expired, or nacked
    /// to it) to the dead-letter topic, then marks them done.
    pub(super) async fn dead_letter(
        &self,
        meta: &SubscriptionMeta,
        part: Part,
        dead_letters: &[DeadLetter],
        token: u64,
    ) -> BrokerResult<()> {
        let Some(policy) = &meta.config.dead_letter_policy else {
            return Ok(());
        };
        let offsets: BTreeSet<u64> = dead_letters.iter().map(|dead| dead.offset).collect();
        let (messages, missing) = self.read_offsets(meta, part, &offsets).await?;
        let by_offset: std::collections::BTreeMap<u64, DeadLetter> = dead_letters
            .iter()
            .map(|dead| (dead.offset, *dead))
            .collect();
        let produced: Vec<ProduceMessage> = messages
            .iter()
            .filter_map(|message| {
                let dead = by_offset.get(&message.offset)?;
                let mut headers = message.headers.clone();
                headers.extend([
                    (
                        "herald-dlq-reason".to_string(),
                        dead.reason.as_str().to_string(),
                    ),
                    (
                        "herald-dlq-source-topic".to_string(),
                        meta.config.topic.clone(),
                    ),
                    (
                        "herald-dlq-source-partition".to_string(),
                        part.partition.to_string(),
                    ),
                    (
                        "herald-dlq-source-offset".to_string(),
                        message.offset.to_string(),
                    ),
                    ("herald-dlq-attempts".to_string(), dead.attempt.to_string()),
                    ("herald-dlq-subscription".to_string(), meta.name.clone()),
                ]);
                Some(ProduceMessage {
                    key: message.key.clone(),
                    value: message.value.clone(),
                    headers,
                    partition: None,
                    timestamp: Some(message.timestamp),
                })
            })
            .collect();
        if !produced.is_empty() {
            let answer = self
                .produce
                .produce(&policy.topic, produced, Acks::All, Idempotence::default())
                .await?;
            if !answer.failed.is_empty() || answer.offsets.iter().any(|o| o.offset.is_none()) {
                return Err(BrokerError::Unavailable(
                    "part of a dead-letter publish failed".into(),
                ));
            }
        }
        // Only now, with every message in the dead-letter topic (or gone from the log), do
        // they leave the subscription.
        let leases = dead_letters
            .iter()
            .filter(|dead| {
                missing.contains(&dead.offset)
                    || messages.iter().any(|message| message.offset == dead.offset)
            })
            .map(|dead| LeaseRef {
                offset: dead.offset,
                attempt: dead.attempt,
                token,
            })
            .collect();
        let command = DeliveryCommand::DeadLettered {
            subscription: meta.id,
            now_ms: now_ms(),
            leases,
        };
        self.apply_on_leader(part.group, command).await?;
        metrics::counter!("herald_subscription_dead_lettered_total", "subscription" => meta.name.clone())
            .increment(dead_letters.len() as u64);
        Ok(())
    }
}

/// A watch whose change may make a lease worth trying.
enum Change {
    Marks(watch::Receiver<herald_raft::Watermarks>),
    Queues(watch::Receiver<u64>),
    /// A forwarded wait on a partition's leader; `None` once it answered.
    Remote(Option<BoxFuture<'static, ()>>),
}

impl Change {
    async fn changed(&mut self) {
        let open = match self {
            Change::Marks(receiver) => receiver.changed().await.is_ok(),
            Change::Queues(receiver) => receiver.changed().await.is_ok(),
            Change::Remote(wait) => match wait.as_mut() {
                Some(pending) => {
                    pending.await;
                    *wait = None;
                    true
                }
                None => false,
            },
        };
        if !open {
            // The replica closed, or the leader's wait already answered: never wakes again
            // from here.
            std::future::pending::<()>().await;
        }
    }
}

async fn wait_for_change(changes: &mut [Change], wake: Instant) {
    if changes.is_empty() {
        tokio::time::sleep_until(wake).await;
        return;
    }
    let futures = changes.iter_mut().map(|change| Box::pin(change.changed()));
    tokio::select! {
        _ = select_all(futures) => {}
        _ = tokio::time::sleep_until(wake) => {}
    }
}
