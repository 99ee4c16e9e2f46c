//! `[quotas]`: per-client rate limits (`docs/security.md` § Quotas). Every rate is per second;
//! 0 is unlimited, and all are unlimited by default.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;
use crate::broker::quota::{BucketLimit, ClientLimits, QuotaPolicy};

/// The limits of one client (or the defaults). A burst of 0 is one second of the rate.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientQuota {
    /// Requests per second (REST requests; WebSocket frames are not requests).
    pub requests_per_sec: u64,
    /// How many requests may come at once after a quiet spell.
    pub requests_burst: u64,
    /// Bytes per second of request bodies and WebSocket publish frames.
    pub produce_bytes_per_sec: u64,
    pub produce_burst_bytes: u64,
    /// Bytes per second of response bodies, server-sent events and WebSocket deliveries.
    pub consume_bytes_per_sec: u64,
    pub consume_burst_bytes: u64,
}

impl ClientQuota {
    fn limits(&self) -> ClientLimits {
        ClientLimits {
            requests: BucketLimit::new(self.requests_per_sec, Some(self.requests_burst)),
            produce_bytes: BucketLimit::new(
                self.produce_bytes_per_sec,
                Some(self.produce_burst_bytes),
            ),
            consume_bytes: BucketLimit::new(
                self.consume_bytes_per_sec,
                Some(self.consume_burst_bytes),
            ),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct QuotasConfig {
    /// What every client gets (an anonymous client is its IP address); the fields mean what
    /// [`ClientQuota`]'s do.
    pub requests_per_sec: u64,
    pub requests_burst: u64,
    pub produce_bytes_per_sec: u64,
    pub produce_burst_bytes: u64,
    pub consume_bytes_per_sec: u64,
    pub consume_burst_bytes: u64,
    /// Overrides by client id (a token's subject): `[quotas.clients.<client_id>]`. A client
    /// listed here gets exactly its own limits (fields left out are unlimited).
    pub clients: BTreeMap<String, ClientQuota>,
}

impl QuotasConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(id) = self.clients.keys().find(|id| id.is_empty()) {
            return Err(ConfigError::Invalid(format!(
                "quotas.clients: a client id must not be empty ('{id}')"
            )));
        }
        Ok(())
    }

    /// What the broker enforces.
    pub fn policy(&self) -> QuotaPolicy {
        QuotaPolicy {
            defaults: ClientQuota {
                requests_per_sec: self.requests_per_sec,
                requests_burst: self.requests_burst,
                produce_bytes_per_sec: self.produce_bytes_per_sec,
                produce_burst_bytes: self.produce_burst_bytes,
                consume_bytes_per_sec: self.consume_bytes_per_sec,
                consume_burst_bytes: self.consume_burst_bytes,
            }
            .limits(),
            clients: self
                .clients
                .iter()
                .map(|(id, quota)| (id.clone(), quota.limits()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_by_default() {
        let config = QuotasConfig::default();
        assert!(config.policy().defaults.is_unlimited());
        assert!(config.policy().clients.is_empty());
    }

    #[test]
    fn defaults_and_client_overrides_parse() {
        let config: QuotasConfig = toml::from_str(
            "requests_per_sec = 100\nproduce_bytes_per_sec = 1048576\n\
             [clients.ingest]\nproduce_bytes_per_sec = 10485760\nproduce_burst_bytes = 20971520\n",
        )
        .unwrap();
        config.validate().unwrap();
        let policy = config.policy();
        assert_eq!(
            policy.defaults.requests,
            BucketLimit {
                rate: 100,
                burst: 100
            }
        );
        assert_eq!(policy.defaults.consume_bytes.rate, 0);
        let ingest = policy.clients["ingest"];
        assert_eq!(
            ingest.produce_bytes,
            BucketLimit {
                rate: 10 << 20,
                burst: 20 << 20
            }
        );
        assert!(ingest.requests.is_unlimited());
        assert!(toml::from_str::<QuotasConfig>("request_per_sec = 1").is_err());
    }
}
