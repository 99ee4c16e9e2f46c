//! Subscription DTOs: the wire form of `/v1/subscriptions...`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::subscriptions::{
    DeadLetterPolicy, RetryPolicy, StartPosition, SubscriptionConfig, SubscriptionMeta,
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
    #[schema(min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")]
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
    "start": "earliest"
}))]
pub struct PutSubscriptionRequest {
    /// The topic to read; fixed at creation.
    #[schema(min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")]
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
    /// When it was created, epoch ms.
    pub created_at_ms: i64,
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
            created_at_ms: meta.created_at_ms,
        }
    }
}

/// Answer of `GET /v1/subscriptions`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionListDto {
    pub subscriptions: Vec<SubscriptionDto>,
}
