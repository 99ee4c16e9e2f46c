//! Herald: a replicated message log served over HTTP.
//!
//! Layout, top to bottom (layers call downward only):
//! - [`api`]: axum routers, DTOs, problem+json errors, the OpenAPI document;
//! - [`broker`]: the service layer every transport calls;
//! - [`cluster`]: metadata, placement, the partition replicas a node runs;
//! - [`raft`]: openraft groups, log store and state machines (the only user of openraft);
//! - [`storage`]: the node's RocksDB (the only user of rocksdb);
//! - [`domain`]: pure types: records, the batch layout, partitioning, names, topic config.
//!
//! Beside them: [`app`] composes a node, [`config`] types its configuration, [`cli`] and
//! [`bench`] are HTTP clients of a running node, [`telemetry`] sets up logs and metrics,
//! [`cluster_secret`] is the secret a cluster's nodes share (signing keys at rest, RPC
//! authentication without mutual TLS).

pub mod allocator;
pub mod api;
pub mod app;
pub mod bench;
pub mod broker;
pub mod cli;
pub mod cluster;
pub mod cluster_secret;
pub mod config;
pub mod domain;
pub mod raft;
pub mod rpc;
pub mod storage;
pub mod telemetry;
pub mod tls_files;
pub mod ws;
