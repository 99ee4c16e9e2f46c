//! Subscriptions: named queue cursors over one topic (see `docs/queues.md`).
//!
//! Their configuration is replicated in the metadata group (it changes rarely and every node
//! needs it to serve any puller); the per-message delivery state lives in each partition's
//! own raft group. A subscription gets a fresh `id` each time it is created, and partition
//! state is keyed by that id, so a subscription deleted and created again under the same name
//! never inherits the old one's acks and leases.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::names::{validate_name, validate_public_topic_name};

/// Limits of a subscription's settings, declared in the OpenAPI document too.
pub const MIN_ACK_DEADLINE_MS: u64 = 100;
pub const MAX_ACK_DEADLINE_MS: u64 = 600_000;
pub const DEFAULT_ACK_DEADLINE_MS: u64 = 30_000;
/// Backoff may reach a day: a retry policy for an outage of a downstream service.
pub const MAX_BACKOFF_MS: u64 = 24 * 60 * 60 * 1000;
pub const DEFAULT_MIN_BACKOFF_MS: u64 = 1_000;
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 60_000;
pub const MIN_DELIVERY_ATTEMPTS: u32 = 1;
pub const MAX_DELIVERY_ATTEMPTS: u32 = 1_000;
pub const DEFAULT_DELIVERY_ATTEMPTS: u32 = 5;
/// How many subscriptions the cluster holds.
pub const MAX_SUBSCRIPTIONS: usize = 10_000;

/// Where a new subscription starts reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum StartPosition {
    /// At each partition's log start: every stored message is delivered.
    #[default]
    Earliest,
    /// At each partition's end when the subscription is created: only newer messages.
    Latest,
}

/// Whether a key's messages are delivered one at a time, in offset order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Ordering {
    /// Any pending message may be leased: the most parallelism.
    #[default]
    None,
    /// A key's next message is not leased while an earlier one of the same key is pending
    /// (leased, or waiting for its retry). Unkeyed messages are unordered.
    Key,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    pub min_backoff_ms: u64,
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            min_backoff_ms: DEFAULT_MIN_BACKOFF_MS,
            max_backoff_ms: DEFAULT_MAX_BACKOFF_MS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterPolicy {
    pub topic: String,
    pub max_delivery_attempts: u32,
}

/// What a client sets with `PUT /v1/subscriptions/{sub}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionConfig {
    pub topic: String,
    pub ack_deadline_ms: u64,
    pub retry_policy: RetryPolicy,
    pub dead_letter_policy: Option<DeadLetterPolicy>,
    pub start: StartPosition,
    pub ordering: Ordering,
}

impl SubscriptionConfig {
    /// Checks what does not depend on the cluster's state (names and ranges); the metadata
    /// applier checks that the topics exist.
    pub fn validate(&self) -> Result<(), String> {
        // Internal topics are the node's own: a subscription reading one would hand out the
        // audit log, one dead-lettering into one would forge it.
        validate_public_topic_name("topic name", &self.topic)?;
        if !(MIN_ACK_DEADLINE_MS..=MAX_ACK_DEADLINE_MS).contains(&self.ack_deadline_ms) {
            return Err(format!(
                "ack_deadline_ms must be between {MIN_ACK_DEADLINE_MS} and {MAX_ACK_DEADLINE_MS}, got {}",
                self.ack_deadline_ms
            ));
        }
        let retry = &self.retry_policy;
        if retry.max_backoff_ms > MAX_BACKOFF_MS {
            return Err(format!(
                "retry_policy.max_backoff_ms must be at most {MAX_BACKOFF_MS}, got {}",
                retry.max_backoff_ms
            ));
        }
        if retry.min_backoff_ms > retry.max_backoff_ms {
            return Err(format!(
                "retry_policy.min_backoff_ms ({}) must not exceed max_backoff_ms ({})",
                retry.min_backoff_ms, retry.max_backoff_ms
            ));
        }
        if let Some(dead_letter) = &self.dead_letter_policy {
            validate_public_topic_name("dead_letter_policy.topic", &dead_letter.topic)?;
            if dead_letter.topic == self.topic {
                return Err(format!(
                    "dead_letter_policy.topic must not be the subscription's own topic '{}': dead letters would be delivered again",
                    self.topic
                ));
            }
            if !(MIN_DELIVERY_ATTEMPTS..=MAX_DELIVERY_ATTEMPTS)
                .contains(&dead_letter.max_delivery_attempts)
            {
                return Err(format!(
                    "dead_letter_policy.max_delivery_attempts must be between {MIN_DELIVERY_ATTEMPTS} and {MAX_DELIVERY_ATTEMPTS}, got {}",
                    dead_letter.max_delivery_attempts
                ));
            }
        }
        Ok(())
    }
}

/// A subscription as the metadata replicates it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionMeta {
    pub name: String,
    /// Unique over the cluster's life: partition state is keyed by it.
    pub id: u64,
    pub config: SubscriptionConfig,
    /// The proposer's clock at creation; `start: latest` counts from here.
    pub created_at_ms: i64,
}

/// The subscriptions of the cluster, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscriptions {
    pub by_name: BTreeMap<String, SubscriptionMeta>,
    pub next_id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubscriptionCommand {
    /// Creates the subscription or changes its settings; the topic and start are fixed at
    /// creation.
    Put {
        name: String,
        config: SubscriptionConfig,
        now_ms: i64,
    },
    Delete {
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubscriptionOutcome {
    Created(SubscriptionMeta),
    Updated(SubscriptionMeta),
    Unchanged(SubscriptionMeta),
    Deleted,
    NotFound,
    TopicNotFound(String),
    /// A change of what is fixed at creation (the topic, the start).
    Conflict(String),
    Invalid(String),
}

impl Subscriptions {
    /// Applies a command; `topic_exists` answers from the same metadata state, so every
    /// replica decides alike.
    pub fn apply(
        &mut self,
        command: &SubscriptionCommand,
        topic_exists: impl Fn(&str) -> bool,
    ) -> SubscriptionOutcome {
        match command {
            SubscriptionCommand::Put {
                name,
                config,
                now_ms,
            } => {
                if let Err(reason) =
                    validate_name("subscription name", name).and_then(|()| config.validate())
                {
                    return SubscriptionOutcome::Invalid(reason);
                }
                if !topic_exists(&config.topic) {
                    return SubscriptionOutcome::TopicNotFound(config.topic.clone());
                }
                if let Some(dead_letter) = &config.dead_letter_policy {
                    if !topic_exists(&dead_letter.topic) {
                        return SubscriptionOutcome::TopicNotFound(dead_letter.topic.clone());
                    }
                }
                match self.by_name.get_mut(name) {
                    Some(existing) => {
                        if existing.config.topic != config.topic {
                            return SubscriptionOutcome::Conflict(format!(
                                "subscription '{name}' reads topic '{}'; its topic cannot change (delete it and create it again)",
                                existing.config.topic
                            ));
                        }
                        if existing.config.start != config.start {
                            return SubscriptionOutcome::Conflict(format!(
                                "subscription '{name}' exists; its start position applies at creation and cannot change"
                            ));
                        }
                        if existing.config == *config {
                            return SubscriptionOutcome::Unchanged(existing.clone());
                        }
                        existing.config = config.clone();
                        SubscriptionOutcome::Updated(existing.clone())
                    }
                    None => {
                        if self.by_name.len() >= MAX_SUBSCRIPTIONS {
                            return SubscriptionOutcome::Invalid(format!(
                                "the cluster holds at most {MAX_SUBSCRIPTIONS} subscriptions"
                            ));
                        }
                        self.next_id += 1;
                        let meta = SubscriptionMeta {
                            name: name.clone(),
                            id: self.next_id,
                            config: config.clone(),
                            created_at_ms: *now_ms,
                        };
                        self.by_name.insert(name.clone(), meta.clone());
                        SubscriptionOutcome::Created(meta)
                    }
                }
            }
            SubscriptionCommand::Delete { name } => match self.by_name.remove(name) {
                Some(_) => SubscriptionOutcome::Deleted,
                None => SubscriptionOutcome::NotFound,
            },
        }
    }

    /// Drops the subscriptions that read a deleted topic.
    pub fn topic_deleted(&mut self, topic: &str) {
        self.by_name
            .retain(|_, subscription| subscription.config.topic != topic);
    }

    pub fn get(&self, name: &str) -> Option<&SubscriptionMeta> {
        self.by_name.get(name)
    }
}

impl std::fmt::Display for SubscriptionCommand {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubscriptionCommand::Put { name, .. } => write!(formatter, "put subscription {name}"),
            SubscriptionCommand::Delete { name } => {
                write!(formatter, "delete subscription {name}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(topic: &str) -> SubscriptionConfig {
        SubscriptionConfig {
            topic: topic.into(),
            ack_deadline_ms: DEFAULT_ACK_DEADLINE_MS,
            retry_policy: RetryPolicy::default(),
            dead_letter_policy: None,
            start: StartPosition::Earliest,
            ordering: Ordering::None,
        }
    }

    fn put(
        subscriptions: &mut Subscriptions,
        name: &str,
        config: SubscriptionConfig,
    ) -> SubscriptionOutcome {
        subscriptions.apply(
            &SubscriptionCommand::Put {
                name: name.into(),
                config,
                now_ms: 7,
            },
            |topic| topic == "orders" || topic == "dead",
        )
    }

    #[test]
    fn put_creates_then_is_unchanged_then_updates_and_ids_are_never_reused() {
        let mut subscriptions = Subscriptions::default();
        let SubscriptionOutcome::Created(first) = put(&mut subscriptions, "s", config("orders"))
        else {
            panic!("not created")
        };
        assert!(matches!(
            put(&mut subscriptions, "s", config("orders")),
            SubscriptionOutcome::Unchanged(_)
        ));
        let mut changed = config("orders");
        changed.ack_deadline_ms = 5_000;
        assert!(matches!(
            put(&mut subscriptions, "s", changed),
            SubscriptionOutcome::Updated(meta) if meta.config.ack_deadline_ms == 5_000
        ));
        let delete = SubscriptionCommand::Delete { name: "s".into() };
        assert_eq!(
            subscriptions.apply(&delete, |_| true),
            SubscriptionOutcome::Deleted
        );
        assert_eq!(
            subscriptions.apply(&delete, |_| true),
            SubscriptionOutcome::NotFound
        );
        let SubscriptionOutcome::Created(again) = put(&mut subscriptions, "s", config("orders"))
        else {
            panic!("not created")
        };
        assert!(again.id > first.id);
    }

    #[test]
    fn invalid_settings_and_fixed_fields_are_refused_without_change() {
        let mut subscriptions = Subscriptions::default();
        assert!(matches!(
            put(&mut subscriptions, "s", config("missing")),
            SubscriptionOutcome::TopicNotFound(_)
        ));
        let mut own_dead_letters = config("orders");
        own_dead_letters.dead_letter_policy = Some(DeadLetterPolicy {
            topic: "orders".into(),
            max_delivery_attempts: 3,
        });
        assert!(matches!(
            put(&mut subscriptions, "s", own_dead_letters),
            SubscriptionOutcome::Invalid(_)
        ));
        // Internal topics are refused where the metadata applies settings, whoever proposed
        // them: the audit log is neither read nor dead-lettered into by a subscription.
        let mut into_the_audit_log = config("orders");
        into_the_audit_log.dead_letter_policy = Some(DeadLetterPolicy {
            topic: "__audit".into(),
            max_delivery_attempts: 3,
        });
        for internal in [into_the_audit_log, config("__audit")] {
            assert!(matches!(
                subscriptions.apply(
                    &SubscriptionCommand::Put {
                        name: "s".into(),
                        config: internal,
                        now_ms: 7,
                    },
                    |_| true,
                ),
                SubscriptionOutcome::Invalid(_)
            ));
        }
        let mut backwards = config("orders");
        backwards.retry_policy.min_backoff_ms = 10;
        backwards.retry_policy.max_backoff_ms = 5;
        assert!(matches!(
            put(&mut subscriptions, "s", backwards),
            SubscriptionOutcome::Invalid(_)
        ));
        assert!(subscriptions.by_name.is_empty());
        put(&mut subscriptions, "s", config("orders"));
        assert!(matches!(
            put(&mut subscriptions, "s", config("dead")),
            SubscriptionOutcome::Conflict(_)
        ));
        let mut latest = config("orders");
        latest.start = StartPosition::Latest;
        assert!(matches!(
            put(&mut subscriptions, "s", latest),
            SubscriptionOutcome::Conflict(_)
        ));
    }
}
