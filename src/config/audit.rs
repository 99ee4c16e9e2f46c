//! `[audit]`: the audit log (`docs/security.md` § Audit log).

use std::net::IpAddr;

use serde::Deserialize;

use super::ConfigError;

/// 30 days: the default `audit.retention_ms`.
pub const DEFAULT_AUDIT_RETENTION_MS: i64 = 30 * 24 * 3_600_000;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// How long the `__audit` topic keeps events, in ms; -1 keeps them forever.
    pub retention_ms: i64,
    /// How many bytes the `__audit` topic keeps; -1 is unlimited.
    pub retention_bytes: i64,
    /// How many replicas the `__audit` topic gets when it is created (capped at the nodes
    /// there are then).
    pub replication_factor: u16,
    /// The most events waiting to be written; past it a new event is dropped and counted
    /// (`herald_audit_dropped_total`) rather than slowing the request it records.
    pub queue_capacity: usize,
    /// The most events written in one produce.
    pub max_batch: usize,
    /// Proxies whose `X-Forwarded-For` is believed: a request from one of these addresses is
    /// audited with the last address the header names that is not itself a trusted proxy.
    /// From any other peer the header is ignored.
    pub trusted_proxies: Vec<IpAddr>,
    /// Requests refused for want of a valid token (401) are recorded per client address and
    /// window of this length: the first one in full at once, the rest of the window as one
    /// event with their `count` when it ends. At least 100.
    pub refusal_window_ms: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            retention_ms: DEFAULT_AUDIT_RETENTION_MS,
            retention_bytes: -1,
            replication_factor: 3,
            queue_capacity: 10_000,
            max_batch: 500,
            trusted_proxies: Vec::new(),
            refusal_window_ms: 60_000,
        }
    }
}

impl AuditConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.retention_ms == 0 || self.retention_ms < -1 {
            return Err(ConfigError::Invalid(
                "audit.retention_ms must be -1 (forever) or a positive number of ms".into(),
            ));
        }
        if self.retention_bytes == 0 || self.retention_bytes < -1 {
            return Err(ConfigError::Invalid(
                "audit.retention_bytes must be -1 (unlimited) or a positive number of bytes".into(),
            ));
        }
        if self.replication_factor == 0 || self.queue_capacity == 0 || self.max_batch == 0 {
            return Err(ConfigError::Invalid(
                "audit.replication_factor, audit.queue_capacity and audit.max_batch must be at least 1"
                    .into(),
            ));
        }
        if self.refusal_window_ms < 100 {
            return Err(ConfigError::Invalid(
                "audit.refusal_window_ms must be at least 100".into(),
            ));
        }
        Ok(())
    }
}
