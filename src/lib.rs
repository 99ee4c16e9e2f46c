//! Herald: a replicated message log served over HTTP.
//!
//! The workspace has one crate per layer; layers call downward only, and the crate graph makes
//! the compiler enforce it (`tests/it/architecture.rs` checks what a crate edge cannot):
//! - this crate: [`app`] (composes a node from the crates below), [`config`] (typed
//!   configuration: one section per layer), [`format`] (the data directory's on-disk format and
//!   its migrations), the binary (`serve`, the CLI, `herald bench`);
//! - `herald-api` ([`api`], [`ws`]): the transports: axum routers, DTOs, problem+json errors,
//!   the OpenAPI and AsyncAPI documents, server-sent events, WebSocket;
//! - `herald-broker` ([`broker`]): the service layer every transport calls;
//! - `herald-cluster` ([`cluster`]): metadata, placement, the partition replicas a node runs;
//! - `herald-raft` ([`raft`]): openraft groups, log store and state machines (the only crate that
//!   names openraft);
//! - `herald-rpc` ([`rpc`]): the node-to-node transport, with [`cluster_secret`] (the secret a
//!   cluster's nodes share) and [`tls_files`];
//! - `herald-storage` ([`storage`]): the node's RocksDB (the only crate that names rocksdb);
//! - `herald-domain` ([`domain`]): pure types: records, the batch layout, partitioning, names,
//!   topic config;
//! - `herald-telemetry` ([`telemetry`]): logs, spans, trace context, the metrics recorder.
//!
//! `herald-client` (the CLI and `herald bench`) is an HTTP client of a running node and depends
//! on `herald-domain` only; the binary (`src/main.rs`) links it, this library does not.
//!
//! The lower crates are re-exported under their layer names, so `crate::broker::...` reads the
//! same in every module above (and `herald::api::...` in the tests).

pub mod allocator;
pub mod app;
pub mod config;
pub mod format;
pub mod restore;

pub use herald_api::{api, ws};

pub use herald_broker as broker;
pub use herald_cluster as cluster;
pub use herald_domain as domain;
pub use herald_raft as raft;
pub use herald_rpc as rpc;
pub use herald_rpc::{cluster_secret, tls_files};
pub use herald_storage as storage;
pub use herald_telemetry as telemetry;
