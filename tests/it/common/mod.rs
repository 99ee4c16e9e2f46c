//! Black-box test harness: starts the real `herald` binary on free loopback ports with a
//! temporary data directory and talks to it over HTTP, exactly as a client would.
//!
//! Every wait has a deadline, and every failure prints the tail of the server's log, so a test
//! that fails says why instead of hanging. All traffic stays on loopback: 127.0.0.1 for a
//! single node, an address per node for a cluster (`loopback`).
//!
//! This file only names the parts of the harness and re-exports the single-node ones, so a test
//! writes `common::Server` or `common::PROBLEM_JSON` whichever file holds the item:
//! - `server`: one `herald serve` process: ports, start, restart, signals, logs;
//! - `http`: plain requests to a node and the checks of their answers (problem+json);
//! - `topics`: creating and describing topics on a single node, waiting for their leaders;
//! - `messages`: produce, fetch and read-back helpers and the parsed shapes of their answers;
//! - `gauges`: a node's own metrics (per-replica gauges, counters);
//! - `groups`: consumer groups: join, heartbeat, poll, commit, describe; `group_flow`: the
//!   steps group tests share (ids produced over partitions, consuming and committing them);
//! - `queues`: subscriptions: create, pull, ack/nack/extend/seek, describe;
//! - `poll`: waiting on a condition with a deadline;
//! - `cluster` (with the `cluster_*` files): several nodes formed into one cluster;
//! - `loopback` and `nft`: the nodes' own addresses, and the packet filter that cuts links
//!   between them (`cluster_partitions`);
//! - `book`: what a cluster test sent and what was acknowledged;
//! - `fault_consumer`: a consumer group member that survives faults and records what it saw;
//!   `fault_queue`: queue pullers that survive faults, and the checker of what they saw;
//!   `fault_streams`: WebSocket and event stream connections that never panic and abandon a
//!   silent node; `fault_stream_queue`, `fault_stream_group`, `fault_stream_topic`: queue,
//!   group and topic stream clients on them that resume on another node, and what they saw;
//! - `sse`: server-sent event streams, read as `EventSource` would;
//! - `ws`: WebSocket clients of `GET /v1/ws`; `ws_streams`: its group and queue subscriptions;
//! - `tls`: a test certificate authority and raw HTTPS requests;
//! - `browser`: the playwright scripts in `tests/js`, run against a node;
//! - `process`: an outside program (script, code generator, generated client) as a test step;
//! - `fixture_nodes`: nodes started on data directories a release wrote before (`migrations/`).

pub mod auth;
pub mod book;
pub mod browser;
pub mod cluster;
mod cluster_leaders;
mod cluster_members;
mod cluster_partitions;
mod cluster_produce;
mod cluster_reads;
mod cluster_topics;
pub mod failure;
pub mod fault_consumer;
pub mod fault_queue;
pub mod fault_stream_group;
pub mod fault_stream_queue;
pub mod fault_stream_topic;
pub mod fault_streams;
pub mod fixture_nodes;
mod gauges;
pub mod group_flow;
mod groups;
pub mod http;
mod loopback;
mod messages;
mod nft;
mod poll;
pub mod process;
pub mod queues;
mod server;
pub mod sse;
pub mod tls;
mod topics;
pub mod ws;
pub mod ws_streams;

pub use groups::{Member, Polled};
pub use http::{client, PROBLEM_JSON, REQUEST_TIMEOUT};
pub use messages::{b64, now_ms, parse_offsets, FetchAnswer, RawMessage};
pub use poll::poll;
pub use server::{free_ports_on, Server, StartError, Wait, READY_DEADLINE};
pub use topics::LEADER_DEADLINE;
