//! `[auth]`: the built-in OAuth2 issuer's tokens and the external OIDC issuers whose tokens are
//! accepted beside (or instead of) them (`docs/security.md`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use crate::domain::urls::{check_key_url, parse_http_url};

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
    /// How long a token can be renewed for without the client's secret: a token exchange
    /// (`grant_type=urn:ietf:params:oauth:grant-type:token-exchange`, what the web console
    /// uses) gives a valid token a successor until this long after the secret was last
    /// presented. 60000 (a minute) to 604800000 (a week); default 12 hours.
    pub max_session_ms: u64,
    /// The clock skew tolerated between nodes and clients when checking a token's times.
    pub clock_leeway_ms: u64,
    /// On a cluster's first start, create the OAuth2 client `admin` (role `admin`), print its
    /// secret once and write it to `<data_dir>/admin-credentials` (mode 0600).
    pub bootstrap_admin: bool,
    /// Whether the built-in issuer issues tokens (`POST /oauth/token`) and its tokens are
    /// accepted. False: only external issuers' tokens are (at least one must be configured).
    pub builtin_issuer_enabled: bool,
    /// OIDC providers (Keycloak, Auth0, ...) whose tokens are accepted.
    pub external_issuers: Vec<ExternalIssuerConfig>,
    /// The most client secrets checked (argon2id, 19 MiB of memory each) at once by the token
    /// endpoint and client management. 0: the number of CPU cores; at most 4 either way, so
    /// they take at most 76 MiB, within the memory budget's process reserve.
    pub max_concurrent_secret_checks: usize,
    /// The most secret checks waiting for one of those; past it a token request answers 503
    /// `temporarily_unavailable` with `Retry-After` at once, having checked nothing.
    pub secret_check_queue: usize,
    /// Failed token requests (a wrong secret, an unknown client) one client id may cause per
    /// minute on this node; past it the token endpoint answers 429 before checking any secret
    /// for that client id. 0: unlimited.
    pub failed_token_requests_per_client_per_min: u32,
    /// Failed token requests one client address may cause per minute on this node (429 past
    /// it). 0: unlimited.
    pub failed_token_requests_per_address_per_min: u32,
}

/// The most secret checks that run at once when `max_concurrent_secret_checks` is 0 (auto).
pub const AUTO_SECRET_CHECKS_MAX: usize = 4;

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            public_metrics: true,
            issuer: None,
            audience: "herald".into(),
            token_lifetime_ms: 3_600_000,
            max_session_ms: 43_200_000,
            clock_leeway_ms: 5_000,
            bootstrap_admin: true,
            builtin_issuer_enabled: true,
            external_issuers: Vec::new(),
            max_concurrent_secret_checks: 0,
            secret_check_queue: 32,
            failed_token_requests_per_client_per_min: 20,
            failed_token_requests_per_address_per_min: 60,
        }
    }
}

impl AuthConfig {
    /// The secret checks that run at once: the configured number, or the cores (at most
    /// [`AUTO_SECRET_CHECKS_MAX`]).
    pub fn effective_secret_checks(&self) -> usize {
        match self.max_concurrent_secret_checks {
            0 => std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(1)
                .clamp(1, AUTO_SECRET_CHECKS_MAX),
            configured => configured,
        }
    }
}

/// The signature algorithms an external issuer may use; `none` and the HMAC ones (a shared
/// secret, which a JWKS cannot publish) never.
pub const EXTERNAL_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The most external issuers a node trusts.
pub const MAX_EXTERNAL_ISSUERS: usize = 16;

/// One `[[auth.external_issuers]]`: an OIDC provider whose tokens are accepted.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ExternalIssuerConfig {
    /// The issuer URL; a token is this issuer's when its `iss` equals it exactly.
    pub issuer: String,
    /// The audience (`aud`) its tokens must name.
    pub audience: String,
    /// Where its keys are. None: discovered from `{issuer}/.well-known/openid-configuration`.
    pub jwks_url: Option<String>,
    /// The claim holding the token's roles, a name or a dotted path (`realm_access.roles`);
    /// a string or an array of strings. Names that are not valid role names are ignored.
    pub roles_claim: String,
    /// The claim naming who the token is for.
    pub subject_claim: String,
    /// What the subject claim is prefixed with to make the principal's subject (the audit log
    /// and quotas key on it). None: `ext:<issuer host>:`. Must contain `:`, which client ids
    /// cannot, so an external subject never passes for a built-in client.
    pub subject_prefix: Option<String>,
    /// The signature algorithms accepted, from [`EXTERNAL_ALGORITHMS`].
    pub algorithms: Vec<String>,
    /// A PEM file of the CA certificates the JWKS (and discovery) server is checked against,
    /// instead of the system's roots, for a provider with a private CA.
    pub ca_file: Option<PathBuf>,
    /// Allows `http://` JWKS and discovery URLs on hosts that are not loopback (keys fetched
    /// without TLS can be replaced on the way).
    pub allow_http: bool,
    /// How often the keys are fetched again.
    pub jwks_refresh_interval_ms: u64,
    /// The shortest time between two fetches caused by tokens naming a key (`kid`) that is not
    /// known, so forged tokens cannot make the node hammer the provider.
    pub jwks_min_refetch_interval_ms: u64,
    /// How long one fetch (connection, request and body) may take.
    pub fetch_timeout_ms: u64,
}

impl Default for ExternalIssuerConfig {
    fn default() -> Self {
        ExternalIssuerConfig {
            issuer: String::new(),
            audience: String::new(),
            jwks_url: None,
            roles_claim: "roles".into(),
            subject_claim: "sub".into(),
            subject_prefix: None,
            algorithms: vec!["RS256".into(), "ES256".into()],
            ca_file: None,
            allow_http: false,
            jwks_refresh_interval_ms: 300_000,
            jwks_min_refetch_interval_ms: 10_000,
            fetch_timeout_ms: 5_000,
        }
    }
}

impl ExternalIssuerConfig {
    /// The prefix of its principals' subjects.
    pub fn effective_subject_prefix(&self) -> String {
        if let Some(prefix) = &self.subject_prefix {
            return prefix.clone();
        }
        let host = parse_http_url(&self.issuer)
            .ok()
            .and_then(|uri| uri.authority().map(|authority| authority.to_string()))
            .unwrap_or_else(|| self.issuer.clone());
        format!("ext:{host}:")
    }

    fn validate(&self, index: usize) -> Result<(), ConfigError> {
        let invalid = |reason: String| {
            ConfigError::Invalid(format!("auth.external_issuers[{index}]: {reason}"))
        };
        if self.issuer.is_empty() || self.audience.is_empty() {
            return Err(invalid("issuer and audience are required".into()));
        }
        parse_http_url(&self.issuer).map_err(|reason| invalid(format!("issuer {reason}")))?;
        if let Some(jwks_url) = &self.jwks_url {
            check_key_url(jwks_url, self.allow_http)
                .map_err(|reason| invalid(format!("jwks_url {reason}")))?;
        } else {
            check_key_url(&self.issuer, self.allow_http).map_err(|reason| {
                invalid(format!(
                    "issuer {reason} (its keys are discovered from it; or set jwks_url)"
                ))
            })?;
        }
        if self.roles_claim.is_empty()
            || self.roles_claim.split('.').any(str::is_empty)
            || self.subject_claim.is_empty()
        {
            return Err(invalid(
                "roles_claim and subject_claim must be claim names or dotted paths".into(),
            ));
        }
        if !self.effective_subject_prefix().contains(':') {
            return Err(invalid(
                "subject_prefix must contain ':' so external subjects never look like client ids"
                    .into(),
            ));
        }
        if self.algorithms.is_empty() {
            return Err(invalid("algorithms must not be empty".into()));
        }
        if let Some(bad) = self
            .algorithms
            .iter()
            .find(|algorithm| !EXTERNAL_ALGORITHMS.contains(&algorithm.as_str()))
        {
            return Err(invalid(format!(
                "algorithm '{bad}' is not accepted; use {}",
                EXTERNAL_ALGORITHMS.join(", ")
            )));
        }
        if self.jwks_refresh_interval_ms < 1_000
            || self.jwks_min_refetch_interval_ms < 100
            || self.jwks_min_refetch_interval_ms > self.jwks_refresh_interval_ms
        {
            return Err(invalid(
                "jwks_refresh_interval_ms must be at least 1000 and jwks_min_refetch_interval_ms 100 to jwks_refresh_interval_ms".into(),
            ));
        }
        if !(100..=60_000).contains(&self.fetch_timeout_ms) {
            return Err(invalid("fetch_timeout_ms must be 100 to 60000".into()));
        }
        if let Some(ca_file) = &self.ca_file {
            if !ca_file.is_file() {
                return Err(invalid(format!(
                    "ca_file {} is not a file",
                    ca_file.display()
                )));
            }
        }
        Ok(())
    }
}

impl AuthConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_concurrent_secret_checks > AUTO_SECRET_CHECKS_MAX {
            return Err(ConfigError::Invalid(format!(
                "auth.max_concurrent_secret_checks must be 0 (the cores, at most {AUTO_SECRET_CHECKS_MAX}) to \
                 {AUTO_SECRET_CHECKS_MAX}: each takes 19 MiB of the memory budget's 128 MiB process reserve"
            )));
        }
        if self.secret_check_queue > 100_000 {
            return Err(ConfigError::Invalid(
                "auth.secret_check_queue must be 0 to 100000".into(),
            ));
        }
        if !(1_000..=86_400_000).contains(&self.token_lifetime_ms) {
            return Err(ConfigError::Invalid(
                "auth.token_lifetime_ms must be 1000 (a second) to 86400000 (a day)".into(),
            ));
        }
        if !(60_000..=604_800_000).contains(&self.max_session_ms) {
            return Err(ConfigError::Invalid(
                "auth.max_session_ms must be 60000 (a minute) to 604800000 (a week)".into(),
            ));
        }
        if self.audience.is_empty() || self.issuer.as_deref() == Some("") {
            return Err(ConfigError::Invalid(
                "auth.audience and auth.issuer must not be empty".into(),
            ));
        }
        if !self.builtin_issuer_enabled && self.external_issuers.is_empty() {
            return Err(ConfigError::Invalid(
                "auth.builtin_issuer_enabled = false needs at least one [[auth.external_issuers]]: no token could be valid".into(),
            ));
        }
        if self.external_issuers.len() > MAX_EXTERNAL_ISSUERS {
            return Err(ConfigError::Invalid(format!(
                "auth.external_issuers holds at most {MAX_EXTERNAL_ISSUERS} issuers"
            )));
        }
        let mut issuers = BTreeSet::new();
        let mut prefixes = BTreeSet::new();
        for (index, external) in self.external_issuers.iter().enumerate() {
            external.validate(index)?;
            if self.issuer.as_deref() == Some(external.issuer.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "auth.external_issuers[{index}] is the built-in issuer '{}'",
                    external.issuer
                )));
            }
            if !issuers.insert(external.issuer.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "auth.external_issuers lists '{}' twice",
                    external.issuer
                )));
            }
            if !prefixes.insert(external.effective_subject_prefix()) {
                return Err(ConfigError::Invalid(format!(
                    "auth.external_issuers[{index}]: another issuer's subjects start with '{}' too; give one a subject_prefix",
                    external.effective_subject_prefix()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keycloak() -> ExternalIssuerConfig {
        ExternalIssuerConfig {
            issuer: "https://sso.example.com/realms/prod".into(),
            audience: "herald".into(),
            roles_claim: "realm_access.roles".into(),
            ..ExternalIssuerConfig::default()
        }
    }

    fn with(externals: Vec<ExternalIssuerConfig>) -> AuthConfig {
        AuthConfig {
            external_issuers: externals,
            ..AuthConfig::default()
        }
    }

    #[test]
    fn external_issuers_parse_with_defaults() {
        let config: AuthConfig = toml::from_str(
            r#"
            builtin_issuer_enabled = false
            [[external_issuers]]
            issuer = "https://sso.example.com/realms/prod"
            audience = "herald"
            roles_claim = "realm_access.roles"
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        let external = &config.external_issuers[0];
        assert_eq!(external.algorithms, ["RS256", "ES256"]);
        assert_eq!(external.subject_claim, "sub");
        assert_eq!(external.jwks_min_refetch_interval_ms, 10_000);
        assert_eq!(external.effective_subject_prefix(), "ext:sso.example.com:");
    }

    #[test]
    fn unsafe_or_ambiguous_external_issuers_are_refused() {
        let refused = |external: ExternalIssuerConfig, expected: &str| {
            let error = with(vec![external]).validate().unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        };
        refused(
            ExternalIssuerConfig {
                algorithms: vec!["HS256".into()],
                ..keycloak()
            },
            "HS256",
        );
        refused(
            ExternalIssuerConfig {
                algorithms: vec!["none".into()],
                ..keycloak()
            },
            "'none'",
        );
        refused(
            ExternalIssuerConfig {
                audience: String::new(),
                ..keycloak()
            },
            "audience",
        );
        refused(
            ExternalIssuerConfig {
                jwks_url: Some("http://sso.example.com/certs".into()),
                ..keycloak()
            },
            "plain http",
        );
        refused(
            ExternalIssuerConfig {
                roles_claim: "realm_access..roles".into(),
                ..keycloak()
            },
            "roles_claim",
        );
        refused(
            ExternalIssuerConfig {
                subject_prefix: Some("kc-".into()),
                ..keycloak()
            },
            "':'",
        );
        // Loopback over http is fine (a local provider), and so is http where allowed.
        with(vec![ExternalIssuerConfig {
            issuer: "http://127.0.0.1:8081".into(),
            ..keycloak()
        }])
        .validate()
        .unwrap();
        with(vec![ExternalIssuerConfig {
            issuer: "http://keycloak:8080/realms/x".into(),
            allow_http: true,
            ..keycloak()
        }])
        .validate()
        .unwrap();

        // Two realms of one host need their own prefixes.
        let other_realm = ExternalIssuerConfig {
            issuer: "https://sso.example.com/realms/test".into(),
            ..keycloak()
        };
        let error = with(vec![keycloak(), other_realm.clone()])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("subject_prefix"), "{error}");
        with(vec![
            keycloak(),
            ExternalIssuerConfig {
                subject_prefix: Some("kc-test:".into()),
                ..other_realm
            },
        ])
        .validate()
        .unwrap();

        let error = AuthConfig {
            builtin_issuer_enabled: false,
            ..AuthConfig::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(error.contains("at least one"), "{error}");
    }
}
