//! External OIDC issuers (Keycloak, Auth0, ...): their tokens are verified with keys fetched
//! from their JWKS and cached, and speak for a principal whose roles come from a configured
//! claim. `Auth` picks an issuer by the token's `iss`.
//!
//! A token whose key is cached validates without I/O. One naming a key not known yet may wait
//! for one refetch ([`ExternalIssuer::validate`]); refetches are rate-limited per issuer.

pub mod claims;
pub mod fetch;
pub mod jwks;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::Algorithm;
use serde_json::Value;

use super::tokens::{Principal, TokenError};
use super::verified::{self, VerifiedTokens, MAX_VERIFIED_TOKENS};
use super::verify;
use fetch::{DocumentClient, FetchError};
use jwks::{KeyCache, KeySource};

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or(0)
}

/// How one external issuer is trusted (from `[[auth.external_issuers]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalIssuerSettings {
    pub issuer: String,
    pub audience: String,
    /// None: discovered from the issuer.
    pub jwks_url: Option<String>,
    pub roles_claim: String,
    pub subject_claim: String,
    /// Put before the subject claim to make the principal's subject.
    pub subject_prefix: String,
    pub algorithms: Vec<Algorithm>,
    pub ca_file: Option<PathBuf>,
    pub allow_http: bool,
    pub refresh_interval: Duration,
    pub min_refetch_interval: Duration,
    pub fetch_timeout: Duration,
    /// Clock skew tolerated for `exp` and `nbf`.
    pub leeway: Duration,
}

/// Why an external token was refused, before the answer is flattened to [`TokenError`].
#[derive(Debug, PartialEq, Eq)]
pub enum ExternalTokenError {
    /// The token names a key (`kid`) the cache does not hold: a refetch may find it.
    UnknownKey(Option<String>),
    Invalid(String),
}

impl From<ExternalTokenError> for TokenError {
    fn from(error: ExternalTokenError) -> TokenError {
        match error {
            ExternalTokenError::UnknownKey(Some(kid)) => {
                TokenError::Invalid(format!("unknown signing key '{kid}'"))
            }
            ExternalTokenError::UnknownKey(None) => {
                TokenError::Invalid("no kid in the header and no single key to use".into())
            }
            ExternalTokenError::Invalid(reason) => TokenError::Invalid(reason),
        }
    }
}

/// One trusted provider and its cached keys.
pub struct ExternalIssuer {
    settings: ExternalIssuerSettings,
    keys: KeyCache,
    /// Tokens verified, with the key set generation they were verified under.
    verified: VerifiedTokens<(u64, Principal)>,
}

impl ExternalIssuer {
    pub fn new(settings: ExternalIssuerSettings) -> Result<ExternalIssuer, FetchError> {
        let client = DocumentClient::new(settings.ca_file.as_deref(), settings.fetch_timeout)?;
        let keys = KeyCache::new(
            KeySource {
                issuer: settings.issuer.clone(),
                jwks_url: settings.jwks_url.clone(),
                client,
                allow_http: settings.allow_http,
            },
            settings.min_refetch_interval,
        );
        Ok(ExternalIssuer {
            settings,
            keys,
            verified: VerifiedTokens::new(MAX_VERIFIED_TOKENS),
        })
    }

    pub fn settings(&self) -> &ExternalIssuerSettings {
        &self.settings
    }

    pub fn keys(&self) -> &KeyCache {
        &self.keys
    }

    /// Checks a token against the cached keys only: algorithm, signature, `iss`, `aud`, `exp`
    /// and `nbf`; then reads its subject and roles.
    pub fn validate_cached(&self, token: &str) -> Result<Principal, ExternalTokenError> {
        let invalid = ExternalTokenError::Invalid;
        if token.len() > claims::MAX_TOKEN_BYTES {
            return Err(invalid("the token is too long".into()));
        }
        let now_s = now_s();
        let digest = verified::digest(token);
        let generation = self.keys.generation();
        if let Some((verified_under, principal)) = self.verified.get(&digest, now_s) {
            if verified_under == generation {
                return Ok(principal);
            }
        }
        let header =
            jsonwebtoken::decode_header(token).map_err(|error| invalid(error.to_string()))?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(invalid(format!(
                "algorithm {:?} is not accepted from issuer '{}'",
                header.alg, self.settings.issuer
            )));
        }
        let keys = self.keys.keys();
        let key = keys
            .find(header.kid.as_deref())
            .ok_or_else(|| ExternalTokenError::UnknownKey(header.kid.clone()))?;
        if key.algorithm.is_some_and(|pinned| pinned != header.alg) {
            return Err(invalid(format!(
                "the key does not sign with {:?}",
                header.alg
            )));
        }
        let (parts, signature) = super::tokens::signed_parts(token).map_err(invalid)?;
        key.key
            .verify(header.alg, parts.signed.as_bytes(), &signature)
            .map_err(invalid)?;
        // Signed by the issuer: now its claims are worth reading.
        let claims: Value = URL_SAFE_NO_PAD
            .decode(parts.claims)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .filter(Value::is_object)
            .ok_or_else(|| invalid("the payload is not a JSON object".into()))?;
        let leeway_s = i64::try_from(self.settings.leeway.as_secs()).unwrap_or(i64::MAX);
        let expires_at_ms = verify::check_claims(
            &claims,
            &verify::ClaimRules {
                issuer: &self.settings.issuer,
                audience: &self.settings.audience,
                leeway_s,
                now_s,
            },
        )
        .map_err(invalid)?;
        let subject = claims::subject(claims::claim(&claims, &self.settings.subject_claim))
            .map_err(invalid)?;
        let principal = Principal {
            subject: format!("{}{subject}", self.settings.subject_prefix),
            roles: claims::roles(claims::claim(&claims, &self.settings.roles_claim)),
            expires_at_ms,
        };
        self.verified.insert(
            digest,
            (generation, principal.clone()),
            (expires_at_ms / 1000).saturating_add(leeway_s),
            now_s,
        );
        Ok(principal)
    }

    /// As [`ExternalIssuer::validate_cached`], fetching the keys again (rate-limited, shared
    /// with concurrent callers) when the token names a key not known yet.
    pub async fn validate(&self, token: &str) -> Result<Principal, TokenError> {
        match self.validate_cached(token) {
            Err(ExternalTokenError::UnknownKey(kid)) => {
                if self.keys.may_refetch() && self.keys.refetch_for(kid.as_deref()).await {
                    Ok(self.validate_cached(token)?)
                } else {
                    Err(ExternalTokenError::UnknownKey(kid).into())
                }
            }
            result => Ok(result?),
        }
    }

    /// Starts a rate-limited refetch for an unknown key without waiting for it (for callers
    /// that cannot wait); a later token naming the key then validates.
    pub fn refetch_in_background(self: &Arc<Self>, kid: Option<String>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.keys.may_refetch() {
            return;
        }
        let issuer = self.clone();
        runtime.spawn(async move {
            issuer.keys.refetch_for(kid.as_deref()).await;
        });
    }
}

/// Every trusted external issuer, by `iss`. Cheap to clone.
#[derive(Clone, Default)]
pub struct ExternalIssuers {
    by_issuer: Arc<HashMap<String, Arc<ExternalIssuer>>>,
}

impl ExternalIssuers {
    /// Builds the issuers (their HTTP clients and trusted roots); nothing is fetched until
    /// [`ExternalIssuers::start`].
    pub fn new(settings: Vec<ExternalIssuerSettings>) -> Result<ExternalIssuers, FetchError> {
        let mut by_issuer = HashMap::new();
        for settings in settings {
            let issuer = ExternalIssuer::new(settings)?;
            by_issuer.insert(issuer.settings.issuer.clone(), Arc::new(issuer));
        }
        Ok(ExternalIssuers {
            by_issuer: Arc::new(by_issuer),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.by_issuer.is_empty()
    }

    pub fn get(&self, issuer: &str) -> Option<&Arc<ExternalIssuer>> {
        self.by_issuer.get(issuer)
    }

    /// The external issuer that verifies `token`, by its `iss` (unverified: it only picks the
    /// keys that verify the token), or None when the token is the built-in issuer's
    /// (`builtin_issuer`), or when there are no external issuers at all (the built-in
    /// validation then says what is wrong). Any other issuer is not trusted.
    pub fn route(
        &self,
        token: &str,
        builtin_issuer: &str,
    ) -> Result<Option<&Arc<ExternalIssuer>>, TokenError> {
        if self.is_empty() {
            return Ok(None);
        }
        let claimed = claims::peek_issuer(token);
        match claimed.as_deref() {
            Some(iss) if iss == builtin_issuer => Ok(None),
            Some(iss) => self
                .get(iss)
                .map(Some)
                .ok_or_else(|| TokenError::Invalid(format!("issuer '{iss}' is not trusted"))),
            None => Err(TokenError::Invalid(
                "the token is malformed or names no issuer".into(),
            )),
        }
    }

    /// Fetches every issuer's keys in the background now and on its refresh interval; a
    /// failed fetch is retried sooner (from the minimum refetch interval, doubling up to the
    /// refresh interval). The tasks end when the issuers are dropped.
    pub fn start(&self) {
        for issuer in self.by_issuer.values() {
            spawn_refresher(issuer);
        }
    }
}

fn spawn_refresher(issuer: &Arc<ExternalIssuer>) {
    let weak = Arc::downgrade(issuer);
    tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            let wait = {
                let Some(issuer) = weak.upgrade() else {
                    return;
                };
                let settings = &issuer.settings;
                if issuer.keys.refresh().await.is_ok() {
                    failures = 0;
                    settings.refresh_interval
                } else {
                    failures = failures.saturating_add(1);
                    settings
                        .min_refetch_interval
                        .saturating_mul(1 << failures.min(16).saturating_sub(1))
                        .min(settings.refresh_interval)
                }
            };
            tokio::time::sleep(wait).await;
        }
    });
}
