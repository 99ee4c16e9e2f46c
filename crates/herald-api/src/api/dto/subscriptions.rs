//! Subscription DTOs: the wire form of `/v1/subscriptions...`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::consume::ConsumedMessageDto;
use super::redrive::RedriveDto;
use crate::api::problem::ApiError;
use crate::broker::subscriptions::{PulledMessage, SeekTarget, Settle, Sought, SubscriptionStats};
use crate::domain::redrive::RedriveJob;
use crate::domain::subscriptions::{
    DeadLetterPolicy, Ordering, RetryPolicy, StartPosition, SubscriptionConfig, SubscriptionMeta,
    DEFAULT_ACK_DEADLINE_MS, DEFAULT_MAX_BACKOFF_MS, DEFAULT_MIN_BACKOFF_MS,
};

/// Where a new subscription starts reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum StartPositionDto {
    /// Every message still stored (the default).
    #[default]
    Earliest,
    /// Only messages produced after the subscription is created.
    Latest,
}

/// Whether a key's messages are delivered one at a time, in offset order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum OrderingDto {
    /// Any message may be leased while others are pending (the default).
    #[default]
    None,
    /// A key's next message is not leased while an earlier one of the same key is pending
    /// (leased, or waiting for its retry). Unkeyed messages are unordered.
    Key,
}

impl From<OrderingDto> for Ordering {
    fn from(dto: OrderingDto) -> Self {
        match dto {
            OrderingDto::None => Ordering::None,
            OrderingDto::Key => Ordering::Key,
        }
    }
}

impl From<Ordering> for OrderingDto {
    fn from(ordering: Ordering) -> Self {
        match ordering {
            Ordering::None => OrderingDto::None,
            Ordering::Key => OrderingDto::Key,
        }
    }
}

/// How soon a message that was not acked in time, or was nacked, is delivered again:
/// `min_backoff_ms` after the first failed attempt, doubling per attempt up to
/// `max_backoff_ms`, with up to a fifth taken off as jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicyDto {
    #[serde(default = "default_min_backoff")]
    #[schema(minimum = 0, maximum = 86400000, default = 1000)]
    pub min_backoff_ms: u64,
    #[serde(default = "default_max_backoff")]
    #[schema(minimum = 0, maximum = 86400000, default = 60000)]
    pub max_backoff_ms: u64,
}

fn default_min_backoff() -> u64 {
    DEFAULT_MIN_BACKOFF_MS
}

fn default_max_backoff() -> u64 {
    DEFAULT_MAX_BACKOFF_MS
}

fn default_ack_deadline() -> u64 {
    DEFAULT_ACK_DEADLINE_MS
}

impl Default for RetryPolicyDto {
    fn default() -> Self {
        RetryPolicyDto {
            min_backoff_ms: DEFAULT_MIN_BACKOFF_MS,
            max_backoff_ms: DEFAULT_MAX_BACKOFF_MS,
        }
    }
}

/// After `max_delivery_attempts` deliveries without an ack, the message is published to
/// `topic` (another topic than the subscription's) and leaves the subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterPolicyDto {
    #[schema(schema_with = crate::api::openapi::rules::public_name_schema)]
    pub topic: String,
    #[schema(minimum = 1, maximum = 1000)]
    pub max_delivery_attempts: u32,
}

/// Body of `PUT /v1/subscriptions/{sub}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "topic": "orders", "ack_deadline_ms": 30000,
    "retry_policy": {"min_backoff_ms": 1000, "max_backoff_ms": 60000},
    "dead_letter_policy": {"topic": "orders-dlq", "max_delivery_attempts": 5},
    "start": "earliest", "ordering": "none"
}))]
pub struct PutSubscriptionRequest {
    /// The topic to read; fixed at creation.
    #[schema(schema_with = crate::api::openapi::rules::subscription_topic_schema)]
    pub topic: String,
    /// How long a puller holds a message before it is delivered again. Default 30000.
    #[serde(default = "default_ack_deadline")]
    #[schema(minimum = 100, maximum = 600000, default = 30000)]
    pub ack_deadline_ms: u64,
    #[serde(default, deserialize_with = "super::object_only")]
    pub retry_policy: RetryPolicyDto,
    /// Without one, a message is delivered until it is acked.
    #[serde(default, deserialize_with = "optional_object")]
    pub dead_letter_policy: Option<DeadLetterPolicyDto>,
    /// Fixed at creation. Default `earliest`.
    #[serde(default)]
    pub start: StartPositionDto,
    /// Default `none`; may change later (it applies from the next pull).
    #[serde(default)]
    pub ordering: OrderingDto,
}

fn optional_object<'de, D>(deserializer: D) -> Result<Option<DeadLetterPolicyDto>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    super::object_only(deserializer).map(Some)
}

impl PutSubscriptionRequest {
    pub fn into_domain(self) -> SubscriptionConfig {
        SubscriptionConfig {
            topic: self.topic,
            ack_deadline_ms: self.ack_deadline_ms,
            retry_policy: RetryPolicy {
                min_backoff_ms: self.retry_policy.min_backoff_ms,
                max_backoff_ms: self.retry_policy.max_backoff_ms,
            },
            dead_letter_policy: self.dead_letter_policy.map(|policy| DeadLetterPolicy {
                topic: policy.topic,
                max_delivery_attempts: policy.max_delivery_attempts,
            }),
            start: match self.start {
                StartPositionDto::Earliest => StartPosition::Earliest,
                StartPositionDto::Latest => StartPosition::Latest,
            },
            ordering: self.ordering.into(),
        }
    }
}

/// A subscription's settings.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionDto {
    pub name: String,
    pub topic: String,
    pub ack_deadline_ms: u64,
    pub retry_policy: RetryPolicyDto,
    /// Absent when messages are delivered until acked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_policy: Option<DeadLetterPolicyDto>,
    pub start: StartPositionDto,
    pub ordering: OrderingDto,
    /// When it was created, epoch ms.
    pub created_at_ms: i64,
    /// `GET` of one subscription only: messages not done yet (never delivered, or delivered
    /// and not acked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u64>,
    /// `GET` of one subscription only: messages leased to a puller now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    /// `GET` of one subscription only: messages waiting for a time: their retry, a nack's
    /// delay, or their `deliver_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed: Option<u64>,
    /// `GET` of one subscription only: messages moved to the dead-letter topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_lettered: Option<u64>,
    /// `GET` of one subscription only: how long ago (now minus its stored timestamp, in
    /// seconds, to the millisecond) the oldest message not done was produced, over the
    /// partitions; 0 when every message is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub oldest_unacked_age_seconds: Option<f64>,
    /// `GET` of one subscription only: its latest redrive, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive: Option<RedriveDto>,
}

impl SubscriptionDto {
    pub fn with_stats(mut self, stats: SubscriptionStats) -> Self {
        let counts = stats.counts;
        self.oldest_unacked_age_seconds =
            Some(stats.oldest_unacked_age_ms.unwrap_or(0) as f64 / 1000.0);
        self.backlog = Some(counts.backlog);
        self.in_flight = Some(counts.in_flight);
        self.delayed = Some(counts.delayed);
        self.dead_lettered = Some(counts.dead_lettered);
        self
    }

    pub fn with_redrive(mut self, job: Option<RedriveJob>) -> Self {
        self.redrive = job.map(Into::into);
        self
    }
}

impl From<SubscriptionMeta> for SubscriptionDto {
    fn from(meta: SubscriptionMeta) -> Self {
        let config = meta.config;
        SubscriptionDto {
            name: meta.name,
            topic: config.topic,
            ack_deadline_ms: config.ack_deadline_ms,
            retry_policy: RetryPolicyDto {
                min_backoff_ms: config.retry_policy.min_backoff_ms,
                max_backoff_ms: config.retry_policy.max_backoff_ms,
            },
            dead_letter_policy: config.dead_letter_policy.map(|policy| DeadLetterPolicyDto {
                topic: policy.topic,
                max_delivery_attempts: policy.max_delivery_attempts,
            }),
            start: match config.start {
                StartPosition::Earliest => StartPositionDto::Earliest,
                StartPosition::Latest => StartPositionDto::Latest,
            },
            ordering: config.ordering.into(),
            created_at_ms: meta.created_at_ms,
            backlog: None,
            in_flight: None,
            delayed: None,
            dead_lettered: None,
            oldest_unacked_age_seconds: None,
            redrive: None,
        }
    }
}

/// Answer of `GET /v1/subscriptions`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionListDto {
    pub subscriptions: Vec<SubscriptionDto>,
}

/// Body of `POST /v1/subscriptions/{sub}/pull`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"max_messages": 10, "max_wait_ms": 1000}))]
pub struct PullRequest {
    /// The most messages to lease (1 to 1000). Default 10.
    #[serde(default = "default_max_messages")]
    #[schema(minimum = 1, maximum = 1000, default = 10)]
    pub max_messages: u32,
    /// With nothing to deliver, wait up to this long for a message (0 to 60000). Default 0.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 60000, default = 0)]
    pub max_wait_ms: u64,
    /// `json`: values (and keys) in the Confluent wire format come back decoded as JSON, with
    /// the schema beside them.
    #[serde(default)]
    pub decode: Option<super::consume::DecodeMode>,
}

fn default_max_messages() -> u32 {
    10
}

/// One delivery: ack it with `ack_id` before the subscription's ack deadline.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PulledMessageDto {
    /// Names this delivery; opaque.
    pub ack_id: String,
    /// 1 on the first delivery, counting up on each redelivery.
    pub delivery_attempt: u32,
    pub message: ConsumedMessageDto,
}

impl From<PulledMessage> for PulledMessageDto {
    fn from(pulled: PulledMessage) -> Self {
        PulledMessageDto {
            ack_id: pulled.ack_id,
            delivery_attempt: pulled.delivery_attempt,
            message: ConsumedMessageDto::from_domain(&pulled.topic, pulled.message),
        }
    }
}

impl PullResponse {
    /// The answer with values in the Confluent wire format decoded (`decode: "json"`).
    pub async fn decoded(broker: &crate::broker::Broker, pulled: Vec<PulledMessage>) -> Self {
        let mut decoder = super::decoded::ReadDecoder::new(broker);
        let mut messages = Vec::with_capacity(pulled.len());
        for pulled in pulled {
            messages.push(PulledMessageDto {
                ack_id: pulled.ack_id,
                delivery_attempt: pulled.delivery_attempt,
                message: decoder.message(&pulled.topic, pulled.message).await,
            });
        }
        PullResponse { messages }
    }
}

/// Answer of a pull: the leased messages (none when nothing came within `max_wait_ms`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PullResponse {
    pub messages: Vec<PulledMessageDto>,
}

/// Body of `POST /v1/subscriptions/{sub}/ack`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    /// Ack ids as pulls answered them (1 to 1000).
    #[schema(min_items = 1, max_items = 1000, inline)]
    pub ack_ids: Vec<AckIdText>,
}

/// An ack id as a pull answered it.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[schema(
    min_length = 9,
    max_length = 84,
    pattern = "^[0-9a-f]{1,16}\\.[0-9a-f]{1,8}\\.[0-9a-f]{1,16}\\.[0-9a-f]{1,8}\\.[0-9a-f]{1,16}$"
)]
pub struct AckIdText(pub String);

fn texts(ack_ids: Vec<AckIdText>) -> Vec<String> {
    ack_ids.into_iter().map(|id| id.0).collect()
}

impl AckRequest {
    pub fn ack_ids(self) -> Vec<String> {
        texts(self.ack_ids)
    }
}

/// Body of `POST /v1/subscriptions/{sub}/nack`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NackRequest {
    #[schema(min_items = 1, max_items = 1000, inline)]
    pub ack_ids: Vec<AckIdText>,
    /// Deliver again after this long (0 to 86400000); without it, after the retry policy's
    /// backoff.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 86400000)]
    pub delay_ms: Option<u64>,
    /// `true`: do not deliver them again; publish them to the subscription's dead-letter
    /// topic with `herald-dlq-reason: nacked` (400 without a dead-letter policy, or with
    /// `delay_ms`). Default `false`.
    #[serde(default)]
    pub dead_letter: bool,
}

impl NackRequest {
    pub fn into_parts(self) -> (Vec<String>, Settle) {
        let settle = match self.dead_letter {
            true => Settle::DeadLetter {
                with_delay: self.delay_ms.is_some(),
            },
            false => Settle::Nack {
                delay_ms: self.delay_ms,
            },
        };
        (texts(self.ack_ids), settle)
    }
}

/// Body of `POST /v1/subscriptions/{sub}/extend`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    #[schema(min_items = 1, max_items = 1000, inline)]
    pub ack_ids: Vec<AckIdText>,
    /// The leases' new deadline, from now (100 to 600000).
    #[schema(minimum = 100, maximum = 600000)]
    pub ack_deadline_ms: u64,
}

impl ExtendRequest {
    pub fn into_parts(self) -> (Vec<String>, Settle) {
        (
            texts(self.ack_ids),
            Settle::Extend {
                ack_deadline_ms: self.ack_deadline_ms,
            },
        )
    }
}

/// Answer of an ack: which ids were acked, and which had expired (their lease ran out or the
/// message was delivered again; nothing changed for them), in request order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AckResponse {
    pub acked: Vec<String>,
    pub expired: Vec<String>,
}

/// Answer of a nack.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NackResponse {
    pub nacked: Vec<String>,
    pub expired: Vec<String>,
}

/// Answer of an extend.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ExtendResponse {
    pub extended: Vec<String>,
    pub expired: Vec<String>,
}

/// Body of `POST /v1/subscriptions/{sub}/seek`: exactly one of `offset` and `timestamp`.
/// The subscription restarts there on each partition (or on `partition` only, with
/// `offset`): everything before counts as done, every lease and ack at or after it is dropped,
/// and messages from it are delivered again.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"timestamp": 1767225600000i64}))]
pub struct SeekRequest {
    /// Restart at this offset (clamped to each partition's log).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub offset: Option<u64>,
    /// Restart at each partition's first message at or after this time (epoch ms).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub timestamp: Option<u64>,
    /// With `offset`: seek this partition only.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub partition: Option<u32>,
}

impl SeekRequest {
    pub fn into_target(self) -> Result<SeekTarget, ApiError> {
        match (self.offset, self.timestamp, self.partition) {
            (Some(offset), None, partition) => Ok(SeekTarget::Offset { offset, partition }),
            (None, Some(timestamp), None) => Ok(SeekTarget::Timestamp {
                timestamp: i64::try_from(timestamp).map_err(|_| {
                    ApiError::invalid_request(format!("timestamp {timestamp} is out of range"))
                })?,
            }),
            (None, Some(_), Some(_)) => Err(ApiError::invalid_request(
                "partition goes with offset; a timestamp seeks every partition",
            )),
            (Some(_), Some(_), _) => Err(ApiError::invalid_request(
                "send exactly one of offset and timestamp, not both",
            )),
            (None, None, _) => Err(ApiError::invalid_request(
                "send exactly one of offset and timestamp",
            )),
        }
    }
}

/// Where the subscription restarts on one partition.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeekPartitionDto {
    pub partition: u32,
    pub offset: u64,
}

/// Answer of a seek.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeekResponse {
    pub partitions: Vec<SeekPartitionDto>,
}

impl From<Vec<Sought>> for SeekResponse {
    fn from(sought: Vec<Sought>) -> Self {
        SeekResponse {
            partitions: sought
                .into_iter()
                .map(|sought| SeekPartitionDto {
                    partition: sought.partition,
                    offset: sought.offset,
                })
                .collect(),
        }
    }
}
