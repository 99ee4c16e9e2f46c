//! A topic subscription on a socket: one reader per partition, sharing the subscription's
//! credit.
//!
//! Each reader long-polls its partition through [`Broker::fetch`] (the same read as
//! `GET .../partitions/{p}/messages`, forwarded to the partition's leader when this node does
//! not lead it, and woken when a batch is applied), so a partition's messages arrive in offset
//! order whichever node they were produced through. A reader takes credit before it reads and
//! gives back what the read did not use: the subscription never has more messages in flight
//! than the credit the client granted. To keep one idle partition from holding all the credit
//! in its long poll, a reader takes at most its share (the credit over the partitions read).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::frames::{parse_resume_token, FromSpec, ServerFrame, SubscribeFrame};
use super::outbox::Outbox;
use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::dto::topic::check_topic_name;
use crate::api::problem::ApiError;
use crate::broker::{Broker, ErrorCode, FetchRequest, OffsetSpec};

/// The most credit a subscription may hold: far past any useful window, and within what a
/// semaphore counts.
pub const MAX_CREDIT: u64 = 1 << 30;
/// The most messages one read asks for.
const MAX_MESSAGES_PER_READ: usize = 1_000;
/// How long one read waits for new messages before it asks again.
const LONG_POLL: Duration = Duration::from_secs(20);
/// The pause before a read refused for a passing reason (no leader yet, overloaded) retries.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// A running subscription; dropping it stops its readers.
pub struct Subscription {
    credit: Arc<Semaphore>,
    readers: Vec<JoinHandle<()>>,
}

/// A checked `subscribe`, not yet reading.
pub struct PlannedSubscription {
    id: String,
    topic: String,
    starts: Vec<(u32, OffsetSpec)>,
    credit: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        for reader in &self.readers {
            reader.abort();
        }
    }
}

impl Subscription {
    /// Grants `messages` more credit.
    pub fn grant(&self, messages: u64) -> Result<(), ApiError> {
        let available = self.credit.available_permits() as u64;
        if messages == 0 || available + messages > MAX_CREDIT {
            return Err(ApiError::invalid_request(format!(
                "credit messages must be at least 1 and keep the subscription's credit at most {MAX_CREDIT} (it has {available})"
            )));
        }
        self.credit.add_permits(messages as usize);
        Ok(())
    }
}

/// Checks a `subscribe` against the topic: it exists, the partition too, `from` fits.
pub async fn plan(
    broker: &Broker,
    frame: SubscribeFrame,
    default_credit: u64,
) -> Result<PlannedSubscription, ApiError> {
    check_topic_name(&frame.topic, true)?;
    let credit = frame.credit.unwrap_or(default_credit);
    if credit == 0 || credit > MAX_CREDIT {
        return Err(ApiError::invalid_request(format!(
            "credit must be between 1 and {MAX_CREDIT}, got {credit}"
        )));
    }
    let topic = broker.describe_topic(&frame.topic).await?;
    let count = topic.partitions.len() as u32;
    let partitions: Vec<u32> = match frame.partition {
        Some(partition) if partition >= count => {
            return Err(ApiError::new(
                ErrorCode::PartitionNotFound,
                format!(
                    "topic '{}' has partitions 0 to {}, not {partition}",
                    frame.topic,
                    count.saturating_sub(1)
                ),
            ))
        }
        Some(partition) => vec![partition],
        None => (0..count).collect(),
    };
    let starts = match frame.from {
        None => partitions
            .iter()
            .map(|p| (*p, OffsetSpec::Latest))
            .collect(),
        Some(FromSpec::Offset(offset)) => partitions
            .iter()
            .map(|p| (*p, OffsetSpec::At(offset)))
            .collect(),
        Some(FromSpec::Named(name)) => {
            let spec = match name.as_str() {
                "earliest" => OffsetSpec::Earliest,
                "latest" => OffsetSpec::Latest,
                _ => {
                    return Err(ApiError::invalid_request(format!(
                        "from must be \"earliest\", \"latest\", an offset or a list of resume tokens, got '{name}'"
                    )))
                }
            };
            partitions.iter().map(|p| (*p, spec)).collect()
        }
        Some(FromSpec::Resume(tokens)) => {
            let mut after: HashMap<u32, u64> = HashMap::new();
            for token in &tokens {
                let (partition, offset) = parse_resume_token(token)?;
                if !partitions.contains(&partition) {
                    return Err(ApiError::invalid_request(format!(
                        "resume token '{token}' names partition {partition}, which this subscription does not read"
                    )));
                }
                let offset = offset.checked_add(1).ok_or_else(|| {
                    ApiError::invalid_request(format!("resume token '{token}' is out of range"))
                })?;
                after.insert(partition, offset);
            }
            partitions
                .iter()
                .map(|p| match after.get(p) {
                    Some(offset) => (*p, OffsetSpec::At(*offset)),
                    None => (*p, OffsetSpec::Earliest),
                })
                .collect()
        }
    };
    Ok(PlannedSubscription {
        id: frame.id,
        topic: frame.topic,
        starts,
        credit,
    })
}

impl PlannedSubscription {
    /// Starts the readers; their `messages` frames go to `outbox`.
    pub fn start(self, broker: &Broker, outbox: &Outbox) -> Subscription {
        let credit = Arc::new(Semaphore::new(self.credit as usize));
        let share = self.starts.len().max(1);
        let readers = self
            .starts
            .into_iter()
            .map(|(partition, start)| {
                let reader = PartitionReader {
                    broker: broker.clone(),
                    outbox: outbox.clone(),
                    id: self.id.clone(),
                    topic: self.topic.clone(),
                    partition,
                    credit: credit.clone(),
                    share,
                };
                tokio::spawn(reader.run(start))
            })
            .collect();
        Subscription { credit, readers }
    }
}

struct PartitionReader {
    broker: Broker,
    outbox: Outbox,
    id: String,
    topic: String,
    partition: u32,
    credit: Arc<Semaphore>,
    share: usize,
}

impl PartitionReader {
    async fn run(self, mut position: OffsetSpec) {
        loop {
            let Ok(first) = self.credit.acquire().await else {
                return;
            };
            first.forget();
            let wanted =
                (self.credit.available_permits() / self.share).min(MAX_MESSAGES_PER_READ - 1);
            let extra = match self.credit.try_acquire_many(wanted as u32) {
                Ok(permits) => {
                    permits.forget();
                    wanted
                }
                Err(_) => 0,
            };
            let taken = 1 + extra;
            let request = FetchRequest {
                topic: self.topic.clone(),
                partition: self.partition,
                offset: position,
                max_messages: taken,
                max_wait: LONG_POLL,
            };
            match self.broker.fetch(request).await {
                Ok(result) => {
                    let read = result.messages.len().min(taken);
                    self.credit.add_permits(taken - read);
                    position = OffsetSpec::At(result.next_offset);
                    if read == 0 {
                        continue;
                    }
                    let messages = result
                        .messages
                        .into_iter()
                        .map(|message| {
                            ConsumedMessageDto::from_domain(&result.topic, message).into()
                        })
                        .collect();
                    let frame = ServerFrame::Messages {
                        id: self.id.clone(),
                        messages,
                    };
                    if self.outbox.send(&frame).is_err() {
                        return;
                    }
                }
                Err(error) => {
                    self.credit.add_permits(taken);
                    let error = ApiError::from(error);
                    if error.code.retry_after_seconds().is_some()
                        || error.code == ErrorCode::Timeout
                    {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    let _ = self
                        .outbox
                        .send(&ServerFrame::error(Some(self.id.clone().into()), &error));
                    return;
                }
            }
        }
    }
}
