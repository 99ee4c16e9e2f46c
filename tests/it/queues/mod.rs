//! Queue subscriptions on one node: settings, semantics, scale, metrics, delays, redrive.

mod queue_delays;
mod redrive;
mod subscription_semantics;
mod subscriptions;
mod subscriptions_many;
mod subscriptions_metrics;
