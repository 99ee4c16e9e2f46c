//! The subscriptions of one socket, by the kind of `subscribe` that made them.

use super::group_subscription::GroupSubscription;
use super::queue_subscription::QueueSubscription;
use super::subscription::Subscription;
use crate::api::problem::ApiError;

/// A subscription running on a socket; dropping it stops it (a group member leaves, a queue
/// subscription nacks the leases it holds).
pub enum Running {
    Topic(Subscription),
    Group(GroupSubscription),
    Queue(QueueSubscription),
}

impl Running {
    /// A `credit` frame: more messages in flight (for a queue subscription: a wider window of
    /// un-settled leases).
    pub fn grant(&self, messages: u64) -> Result<(), ApiError> {
        match self {
            Running::Topic(subscription) => subscription.grant(messages),
            Running::Group(subscription) => subscription.grant(messages),
            Running::Queue(subscription) => subscription.grant(messages),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Running::Topic(_) => "a topic subscription",
            Running::Group(_) => "a group subscription",
            Running::Queue(_) => "a queue subscription",
        }
    }
}
