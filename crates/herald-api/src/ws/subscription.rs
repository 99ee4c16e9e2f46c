//! A topic subscription on a socket: the broker's live reader of the topic ([`Tail`], the same
//! reader server-sent event streams use, with the same resume tokens) and the subscription's
//! credit in front of it.
//!
//! The tail follows each partition through the broker's fetch long poll (forwarded to the
//! partition's leader, woken when a batch is applied), so a partition's messages arrive in
//! offset order whichever node they were produced through. Its read-ahead is bounded; this
//! task sends only within the credit the client granted, and while it has none it stops
//! taking batches, which stops the tail's readers: nothing piles up for a client that does not
//! grant more. The same happens while the socket's outbound queue is full (a client reading
//! slower than its credit allows): the subscription waits for the client to drain it.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::binary;
use super::frames::{DeliveredMessage, FrameFormat, FromSpec, ServerFrame, SubscribeFrame};
use super::outbox::Outbox;
use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::dto::decoded::decoded_message;
use crate::api::dto::topic::check_topic_name;
use crate::api::problem::ApiError;
use crate::broker::schemas::MessageDecoder;
use crate::broker::stream::{StartFrom, Tail, TailItem};
use crate::broker::{Broker, BrokerError};

/// The most credit a subscription may hold: far past any useful window, and within what a
/// semaphore counts.
pub const MAX_CREDIT: u64 = 1 << 30;

/// A running subscription; dropping it stops its reader.
pub struct Subscription {
    credit: Arc<Semaphore>,
    task: JoinHandle<()>,
}

/// A checked `subscribe` whose tail is open, not yet sending.
pub struct PlannedSubscription {
    id: String,
    tail: Tail,
    credit: u64,
    format: FrameFormat,
    /// `decode: "json"`: decodes wire-format values.
    decoder: Option<MessageDecoder>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Subscription {
    /// Grants `messages` more credit.
    pub fn grant(&self, messages: u64) -> Result<(), ApiError> {
        grant_credit(&self.credit, messages)
    }
}

/// Adds `messages` to a subscription's credit, within [`MAX_CREDIT`].
pub fn grant_credit(credit: &Semaphore, messages: u64) -> Result<(), ApiError> {
    let available = credit.available_permits() as u64;
    if messages == 0 || available + messages > MAX_CREDIT {
        return Err(ApiError::invalid_request(format!(
            "credit messages must be at least 1 and keep the subscription's credit at most {MAX_CREDIT} (it has {available})"
        )));
    }
    credit.add_permits(messages as usize);
    Ok(())
}

/// Ends a subscription with the lasting error its stream handed over: its `error` frame is
/// the last the client gets of it.
pub fn end_with(outbox: &Outbox, id: String, error: BrokerError) {
    let _ = outbox.send(&ServerFrame::error(Some(id.into()), &ApiError::from(error)));
}

/// A `subscribe`'s starting credit, checked.
pub fn check_credit(credit: u64) -> Result<u64, ApiError> {
    if credit == 0 || credit > MAX_CREDIT {
        return Err(ApiError::invalid_request(format!(
            "credit must be between 1 and {MAX_CREDIT}, got {credit}"
        )));
    }
    Ok(credit)
}

/// Checks a `subscribe` and opens its tail: the topic and partition exist, `from` parses and
/// a resume token names only partitions the subscription reads.
pub async fn plan(
    broker: &Broker,
    frame: SubscribeFrame,
    default_credit: u64,
) -> Result<PlannedSubscription, ApiError> {
    check_topic_name(&frame.topic)?;
    let credit = check_credit(frame.credit.unwrap_or(default_credit))?;
    let from = match frame.from {
        None => StartFrom::Latest,
        Some(FromSpec::Offset(offset)) => StartFrom::Offset(offset),
        Some(FromSpec::Text(text)) => StartFrom::parse(&text)?,
    };
    let tail = broker
        .streams()
        .open_tail(&frame.topic, frame.partition, from)
        .await?;
    let decoder = frame.decode.map(|_| broker.schemas().decoder(&frame.topic));
    Ok(PlannedSubscription {
        id: frame.id,
        tail,
        credit,
        format: frame.format,
        decoder,
    })
}

impl PlannedSubscription {
    /// Starts sending; its `messages` frames go to `outbox`.
    pub fn start(self, outbox: &Outbox) -> Subscription {
        let credit = Arc::new(Semaphore::new(self.credit as usize));
        let task = tokio::spawn(send_within_credit(
            self.id,
            self.tail,
            credit.clone(),
            outbox.clone(),
            self.format,
            self.decoder,
        ));
        Subscription { credit, task }
    }
}

async fn send_within_credit(
    id: String,
    mut tail: Tail,
    credit: Arc<Semaphore>,
    outbox: Outbox,
    format: FrameFormat,
    mut decoder: Option<MessageDecoder>,
) {
    let topic = tail.topic().to_string();
    loop {
        // Backpressure: nothing more is taken from the tail while the socket's queue is full
        // (the tail's readers then stop on their bounded channel).
        outbox.room().await;
        let Some(batch) = tail.next_batch().await else {
            return;
        };
        let items = match batch {
            Ok(items) => items,
            // A lasting refusal (the topic was deleted): the subscription ends with it.
            Err(error) => return end_with(&outbox, id, error),
        };
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            outbox.room().await;
            outbox.quota_pause().await;
            let Ok(first) = credit.acquire().await else {
                return;
            };
            first.forget();
            let wanted = credit.available_permits().min(items.len() - 1);
            let more = match credit.try_acquire_many(wanted as u32) {
                Ok(permits) => {
                    permits.forget();
                    wanted
                }
                Err(_) => 0,
            };
            let taken = items.by_ref().take(1 + more);
            let sent = match (format, decoder.as_mut()) {
                (FrameFormat::Json, Some(decoder)) => {
                    let mut messages = Vec::with_capacity(1 + more);
                    for item in taken {
                        messages.push(DeliveredMessage {
                            resume: item.resume,
                            message: decoded_message(decoder, &topic, item.message).await,
                        });
                    }
                    outbox.deliver(&ServerFrame::Messages {
                        id: id.clone(),
                        messages,
                    })
                }
                (FrameFormat::Json, None) => outbox.deliver(&ServerFrame::Messages {
                    id: id.clone(),
                    messages: taken.map(|item| delivered(&topic, item)).collect(),
                }),
                (FrameFormat::Binary, _) => {
                    match binary::encode_messages(&topic, &id, taken.collect()) {
                        Ok(frame) => outbox.deliver_binary("messages", frame),
                        Err(error) => {
                            tracing::error!(detail = %error.detail, "a binary frame could not be encoded");
                            return;
                        }
                    }
                }
            };
            if sent.is_err() {
                return;
            }
        }
    }
}

fn delivered(topic: &str, item: TailItem) -> DeliveredMessage {
    DeliveredMessage {
        resume: item.resume,
        message: ConsumedMessageDto::from_domain(topic, item.message),
    }
}
