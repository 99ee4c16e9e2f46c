//! The resources of the HTTP API, one router each: handlers extract, validate, make one call on
//! the broker and map its answer to a DTO; server-sent event streams and the console and
//! example pages served from the binary.

pub mod audit;
pub mod auth_clients;
pub mod auth_policies;
pub mod backups;
pub mod cluster;
pub mod console;
pub mod events;
pub mod examples;
pub mod group_events;
pub mod groups;
pub mod health;
pub mod messages;
pub mod node_metrics;
pub mod oauth;
pub mod offsets;
pub(crate) mod process_metrics;
pub mod produce_call;
pub mod producers;
pub mod redrive;
pub mod requests;
pub mod schema_registry;
pub mod stream_token;
pub mod subscription_events;
pub mod subscriptions;
pub mod topics;
