//! An external issuer's signing keys: parsed from its JWKS, kept in memory, fetched again on a
//! timer and when a token names a key not known yet, at a bounded rate: concurrent misses share
//! one fetch, and a fetch that fails keeps the keys already known.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::Algorithm;
use parking_lot::RwLock;
use serde::Deserialize;

use super::fetch::{DocumentClient, FetchError};
use crate::auth::verify::PublicKey;

/// Counts JWKS fetches by issuer and outcome (`ok`, `error`).
pub const JWKS_FETCHES_TOTAL: &str = "herald_auth_jwks_fetches_total";

/// The most keys kept from one JWKS (providers publish a handful).
pub const MAX_KEYS: usize = 64;

/// One usable verification key.
#[derive(Clone, PartialEq, Eq)]
pub struct VerificationKey {
    pub key: PublicKey,
    /// The algorithm the JWKS pins the key to, if it does.
    pub algorithm: Option<Algorithm>,
}

/// The keys of one fetch.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    by_kid: HashMap<String, VerificationKey>,
    /// Keys published without a `kid`; used only by tokens without one.
    unnamed: Vec<VerificationKey>,
}

impl KeySet {
    /// The keys of a JWKS document; keys that are not for signatures, symmetric ones and
    /// those this node cannot use are left out.
    pub fn parse(document: &JwksDocument) -> KeySet {
        let mut keys = KeySet::default();
        for value in document.keys.iter().take(MAX_KEYS) {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else {
                continue;
            };
            if matches!(jwk.common.public_key_use, Some(ref usage) if *usage != PublicKeyUse::Signature)
                || matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_))
            {
                continue;
            }
            let algorithm = match jwk.common.key_algorithm {
                None => None,
                Some(algorithm) => match signature_algorithm(algorithm) {
                    Some(algorithm) => Some(algorithm),
                    None => continue,
                },
            };
            let Some(key) = PublicKey::of(&jwk) else {
                continue;
            };
            let key = VerificationKey { key, algorithm };
            match jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid, key);
                }
                None => keys.unnamed.push(key),
            }
        }
        keys
    }

    pub fn len(&self) -> usize {
        self.by_kid.len() + self.unnamed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key a token's header names; a token without a `kid` may use the only unnamed key.
    pub fn find(&self, kid: Option<&str>) -> Option<&VerificationKey> {
        match kid {
            Some(kid) => self.by_kid.get(kid),
            None if self.unnamed.len() == 1 => self.unnamed.first(),
            None => None,
        }
    }
}

fn signature_algorithm(algorithm: KeyAlgorithm) -> Option<Algorithm> {
    Some(match algorithm {
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

/// A JWKS as fetched: each key is parsed on its own, so one exotic key does not hide the rest.
#[derive(Debug, Deserialize)]
pub struct JwksDocument {
    pub keys: Vec<serde_json::Value>,
}

/// The part of an OpenID Provider's discovery document used here.
#[derive(Debug, Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

/// Where the keys are and how to fetch them.
pub struct KeySource {
    pub issuer: String,
    /// None: discovered from the issuer.
    pub jwks_url: Option<String>,
    pub client: DocumentClient,
    /// Allows a discovered `jwks_uri` on plain http off loopback.
    pub allow_http: bool,
}

/// What the fetch lock guards.
struct FetchState {
    discovered_jwks_url: Option<String>,
    last_fetch: Option<Instant>,
}

/// The cached keys of one issuer.
pub struct KeyCache {
    source: KeySource,
    keys: RwLock<Arc<KeySet>>,
    fetch: tokio::sync::Mutex<FetchState>,
    min_refetch_interval: Duration,
    fetches: AtomicU64,
    /// Counts changes of the key set, so what was verified with older keys is verified again.
    generation: AtomicU64,
}

impl KeyCache {
    pub fn new(source: KeySource, min_refetch_interval: Duration) -> KeyCache {
        KeyCache {
            source,
            keys: RwLock::new(Arc::new(KeySet::default())),
            fetch: tokio::sync::Mutex::new(FetchState {
                discovered_jwks_url: None,
                last_fetch: None,
            }),
            min_refetch_interval,
            fetches: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    /// The keys known now.
    pub fn keys(&self) -> Arc<KeySet> {
        self.keys.read().clone()
    }

    /// Which key set is current; read it before [`KeyCache::keys`], so a verification
    /// remembered under a generation never used older keys than that generation's.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// How many fetches were tried (for tests and logs).
    pub fn fetch_count(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Fetches the keys now, whatever the last fetch was (the refresh timer).
    pub async fn refresh(&self) -> Result<(), FetchError> {
        let mut state = self.fetch.lock().await;
        self.fetch_locked(&mut state).await
    }

    /// Fetches the keys because a token names `kid`, unless another caller has just fetched
    /// (then its answer is used) or the last fetch is more recent than the minimum interval.
    /// Answers whether the key is known afterwards.
    pub async fn refetch_for(&self, kid: Option<&str>) -> bool {
        let mut state = self.fetch.lock().await;
        if self.keys().find(kid).is_some() {
            return true;
        }
        if state
            .last_fetch
            .is_some_and(|last| last.elapsed() < self.min_refetch_interval)
        {
            return false;
        }
        // Failures are logged and counted inside; the old keys stay.
        let _ = self.fetch_locked(&mut state).await;
        self.keys().find(kid).is_some()
    }

    /// Whether a refetch for an unknown key could happen now (cheap, without the lock), so
    /// a flood of tokens naming unknown keys does not queue on it.
    pub fn may_refetch(&self) -> bool {
        match self.fetch.try_lock() {
            Ok(state) => state
                .last_fetch
                .is_none_or(|last| last.elapsed() >= self.min_refetch_interval),
            // A fetch is running: waiting for it may bring the key.
            Err(_) => true,
        }
    }

    async fn fetch_locked(&self, state: &mut FetchState) -> Result<(), FetchError> {
        state.last_fetch = Some(Instant::now());
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let result = self.fetch_keys(state).await;
        let outcome = match &result {
            Ok(keys) => {
                tracing::debug!(issuer = %self.source.issuer, keys = keys.len(), "fetched the JWKS");
                let changed = **self.keys.read() != *keys;
                if changed {
                    *self.keys.write() = Arc::new(keys.clone());
                    self.generation.fetch_add(1, Ordering::SeqCst);
                }
                "ok"
            }
            Err(error) => {
                tracing::warn!(issuer = %self.source.issuer, %error, "fetching the JWKS failed; keeping the keys known");
                // The provider may have moved its keys: discover again next time.
                state.discovered_jwks_url = None;
                "error"
            }
        };
        metrics::counter!(JWKS_FETCHES_TOTAL, "issuer" => self.source.issuer.clone(), "outcome" => outcome)
            .increment(1);
        result.map(|_| ())
    }

    async fn fetch_keys(&self, state: &mut FetchState) -> Result<KeySet, FetchError> {
        let url = match (&self.source.jwks_url, &state.discovered_jwks_url) {
            (Some(url), _) | (None, Some(url)) => url.clone(),
            (None, None) => {
                let url = self.discover().await?;
                state.discovered_jwks_url = Some(url.clone());
                url
            }
        };
        let document: JwksDocument = self.source.client.get_json(&url).await?;
        let keys = KeySet::parse(&document);
        if keys.is_empty() {
            return Err(FetchError::Body {
                url,
                reason: "the JWKS holds no usable signing key".into(),
            });
        }
        Ok(keys)
    }

    async fn discover(&self) -> Result<String, FetchError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.source.issuer.trim_end_matches('/')
        );
        let discovery: Discovery = self.source.client.get_json(&url).await?;
        // OpenID Connect Discovery § 4.3: the document must name the issuer it was fetched for.
        if discovery.issuer != self.source.issuer {
            return Err(FetchError::Body {
                url,
                reason: format!(
                    "it names issuer '{}', not '{}'",
                    discovery.issuer, self.source.issuer
                ),
            });
        }
        herald_domain::urls::check_key_url(&discovery.jwks_uri, self.source.allow_http).map_err(
            |reason| FetchError::Body {
                url,
                reason: format!("its jwks_uri {reason}"),
            },
        )?;
        Ok(discovery.jwks_uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_usable_signature_keys_are_kept() {
        let ec = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "ec",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
        });
        let unnamed = json!({
            "kty": "EC", "crv": "P-256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
        });
        let document = JwksDocument {
            keys: vec![
                ec.clone(),
                // Keycloak's encryption key: not for signatures.
                json!({"kty": "RSA", "use": "enc", "alg": "RSA-OAEP", "kid": "enc", "n": "sXch", "e": "AQAB"}),
                // A shared secret has no place in a public key set.
                json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}),
                json!({"kty": "EC", "kid": "broken"}),
                json!("not a key"),
                unnamed,
            ],
        };
        let keys = KeySet::parse(&document);
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys.find(Some("ec")).unwrap().algorithm,
            Some(Algorithm::ES256)
        );
        for kid in ["enc", "hmac", "broken"] {
            assert!(keys.find(Some(kid)).is_none(), "{kid}");
        }
        // A token without a kid may use the only key published without one.
        assert!(keys.find(None).is_some());
        let two_unnamed = JwksDocument {
            keys: vec![document.keys[5].clone(), document.keys[5].clone()],
        };
        assert!(KeySet::parse(&two_unnamed).find(None).is_none());
    }
}
