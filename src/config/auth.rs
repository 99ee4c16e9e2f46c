//! `[auth]`: the built-in OAuth2 issuer's tokens (`docs/security.md`).

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Every client request needs a valid bearer token and the right its route names
    /// (`docs/security.md`); off, everything is allowed to everyone, as on a laptop.
    pub enabled: bool,
    /// `/metrics` answers without a token even when `enabled` (Prometheus scrapers rarely
    /// carry one); false: it needs `view` on `cluster:metrics`.
    pub public_metrics: bool,
    /// The issuer (`iss`) tokens name and clients discover the keys from, a URL every node's
    /// clients reach the cluster at. None: this node's own address (`http://` or `https://`
    /// `http_addr`), which suits one node; set it to the cluster's address with several.
    pub issuer: Option<String>,
    /// The audience (`aud`) tokens are for.
    pub audience: String,
    /// How long an issued token lasts. 1000 to 86400000; below a minute is for tests of
    /// token expiry, since clients then fetch tokens all the time.
    pub token_lifetime_ms: u64,
    /// The clock skew tolerated between nodes and clients when checking a token's times.
    pub clock_leeway_ms: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            public_metrics: true,
            issuer: None,
            audience: "herald".into(),
            token_lifetime_ms: 3_600_000,
            clock_leeway_ms: 5_000,
        }
    }
}

impl AuthConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1_000..=86_400_000).contains(&self.token_lifetime_ms) {
            return Err(ConfigError::Invalid(
                "auth.token_lifetime_ms must be 1000 (a second) to 86400000 (a day)".into(),
            ));
        }
        if self.audience.is_empty() || self.issuer.as_deref() == Some("") {
            return Err(ConfigError::Invalid(
                "auth.audience and auth.issuer must not be empty".into(),
            ));
        }
        Ok(())
    }
}
