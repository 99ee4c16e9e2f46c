//! What each operation a client asks for needs, whichever transport carries it: the one place
//! an operation's rights are described, and the one [`Access::authorize`] every transport
//! calls (the HTTP route guard and handlers, server-sent event streams, WebSocket frames).
//!
//! Routes of the HTTP API name their own right in `api::middleware::rights` (it is also written into the
//! OpenAPI document); they come here as [`Operation::Route`]. Operations that name resources in
//! their body, query or frame (a group join's topics, a publish's topic) are described here,
//! so a `publish` frame and `POST /v1/topics/{topic}/messages` cannot drift apart.

use super::access::{Access, Denied};
use super::policy::Action;
use super::tokens::Principal;

/// An operation, by what it touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation<'a> {
    /// What a route of the HTTP API needs by its entry in `api::middleware::rights`: `action` on one
    /// resource.
    Route { action: Action, resource: String },
    /// Write messages to a topic (a WebSocket `publish`, JSON or binary).
    Produce { topic: &'a str },
    /// Read a topic's messages (a WebSocket topic `subscribe`).
    ReadTopic { topic: &'a str },
    /// Be a member of `group` reading `topics`: a REST join, a group's event stream, a
    /// WebSocket group `subscribe`.
    JoinGroup {
        group: &'a str,
        topics: &'a [String],
    },
    /// Go on reading as a member (a poll, a commit): the rights on the member's topics as they
    /// are now, not as they were at the join.
    ReadAsMember { topics: &'a [String] },
    /// Lease from a queue subscription (a WebSocket queue `subscribe`).
    Lease { subscription: &'a str },
    /// Create or change a queue subscription: it reads its topic for its consumers and writes
    /// the messages that exhaust their deliveries to its dead-letter topic.
    PutSubscription {
        topic: &'a str,
        dead_letter_topic: Option<&'a str>,
    },
    /// Register a producer name: it fences whoever held it, so a right on that name.
    NameProducer { name: &'a str },
}

impl Operation<'_> {
    /// The rights the operation needs, in the order they are checked (the first refused one
    /// is the answer).
    pub fn needs(&self) -> Vec<(Action, String)> {
        let topics = |action: Action, topics: &[String]| -> Vec<(Action, String)> {
            topics
                .iter()
                .map(|topic| (action, format!("topic:{topic}")))
                .collect()
        };
        match self {
            Operation::Route { action, resource } => vec![(*action, resource.clone())],
            Operation::Produce { topic } => vec![(Action::Produce, format!("topic:{topic}"))],
            Operation::ReadTopic { topic } => vec![(Action::Consume, format!("topic:{topic}"))],
            Operation::JoinGroup {
                group,
                topics: read,
            } => {
                let mut needs = vec![(Action::Consume, format!("group:{group}"))];
                needs.extend(topics(Action::Consume, read));
                needs
            }
            Operation::ReadAsMember { topics: read } => topics(Action::Consume, read),
            Operation::Lease { subscription } => {
                vec![(Action::Consume, format!("subscription:{subscription}"))]
            }
            Operation::PutSubscription {
                topic,
                dead_letter_topic,
            } => {
                let mut needs = vec![(Action::Consume, format!("topic:{topic}"))];
                if let Some(dead_letter) = dead_letter_topic {
                    needs.push((Action::Produce, format!("topic:{dead_letter}")));
                }
                needs
            }
            Operation::NameProducer { name } => {
                vec![(Action::Produce, format!("producer:{name}"))]
            }
        }
    }
}

/// A refusal, with the right that was missing (for an audit record).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{denied}")]
pub struct Refused {
    pub denied: Denied,
    pub action: Action,
    pub resource: String,
}

impl Access {
    /// Whether `principal` may do `operation`: every right it needs, in order; always with
    /// authentication off. The refusal names the first right missing.
    pub async fn authorize(
        &self,
        principal: Option<&Principal>,
        operation: &Operation<'_>,
    ) -> Result<(), Refused> {
        if !self.enabled() {
            return Ok(());
        }
        for (action, resource) in operation.needs() {
            if let Err(denied) = self.check(principal, action, &resource).await {
                return Err(Refused {
                    denied,
                    action,
                    resource,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_needs_the_group_then_each_topic() {
        let topics = ["orders".to_string(), "payments".to_string()];
        let join = Operation::JoinGroup {
            group: "billing",
            topics: &topics,
        };
        assert_eq!(
            join.needs(),
            vec![
                (Action::Consume, "group:billing".to_string()),
                (Action::Consume, "topic:orders".to_string()),
                (Action::Consume, "topic:payments".to_string()),
            ]
        );
    }

    #[test]
    fn a_subscription_writes_its_dead_letters() {
        let put = Operation::PutSubscription {
            topic: "orders",
            dead_letter_topic: Some("orders-dlq"),
        };
        assert_eq!(
            put.needs(),
            vec![
                (Action::Consume, "topic:orders".to_string()),
                (Action::Produce, "topic:orders-dlq".to_string()),
            ]
        );
    }
}
