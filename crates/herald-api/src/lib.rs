//! Herald's transports: HTTP ([`api`]: axum routers, DTOs, problem+json errors, the OpenAPI
//! and AsyncAPI documents, server-sent events, the web console, the listener and TLS) and
//! WebSocket ([`ws`]: frames over the same DTOs and problems). Both translate only: they share
//! one core in `api` (extraction, problems, authorization through the broker's
//! `auth::Operation`, quotas, audit) and make one call into `herald-broker` per operation.
//!
//! The crates below are named by their layer (`crate::broker`, `crate::domain`, ...), as in
//! the `herald` crate that composes a node from this one.

pub mod api;
pub mod ws;

pub(crate) use herald_broker as broker;
pub(crate) use herald_domain as domain;
pub(crate) use herald_rpc::tls_files;
pub(crate) use herald_telemetry as telemetry;
