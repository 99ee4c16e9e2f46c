//! Access tokens: ES256 JWTs signed with the cluster's current key (its `kid` in the header),
//! validated by any node against the replicated keys.
//!
//! A token names its client (`sub`); its rights are the client's roles as the metadata holds
//! them when the token is used, so deleting a client or changing its roles takes effect at once,
//! not when its tokens expire.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, Header};
use serde::{Deserialize, Serialize};

use super::keys::Signer;
use super::verified::VerifiedTokens;
use super::verify::{check_claims, ClaimRules, PublicKey};
use crate::domain::auth::AuthState;

/// What every token says and how long it lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSettings {
    /// `iss`: the issuer URL clients discover the JWKS from.
    pub issuer: String,
    /// `aud`: who the token is for.
    pub audience: String,
    pub lifetime: Duration,
    /// How long after a client presented its secret its tokens may still be renewed.
    pub max_session: Duration,
    /// Clock skew tolerated between nodes (and clients), for `exp` and `nbf`.
    pub leeway: Duration,
    /// Whether the built-in issuer issues tokens and its tokens are accepted (false when only
    /// external issuers are trusted).
    pub builtin_enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: String,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    pub jti: String,
    /// When the client last presented its secret (seconds), kept by every renewal: bounds
    /// how long a token can be renewed without it. Absent in tokens issued before renewal
    /// existed, whose `iat` stands for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_time: Option<i64>,
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub subject: String,
    pub roles: Vec<String>,
    /// When the token stops being valid (a socket authenticated with it closes then).
    pub expires_at_ms: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the cluster has no signing key yet")]
    NoSigningKey,
    #[error("signing the token failed: {0}")]
    Sign(String),
    #[error("the token is not valid: {0}")]
    Invalid(String),
}

/// A new token for `subject`, and how many seconds it lasts. `auth_time_s` is when the client
/// presented its secret: now for the client-credentials grant, the renewed token's for a
/// renewal.
pub fn issue(
    key: &Signer,
    settings: &TokenSettings,
    subject: &str,
    now_ms: i64,
    auth_time_s: Option<i64>,
) -> Result<(String, u64), TokenError> {
    let now = now_ms / 1000;
    let lifetime = settings.lifetime.as_secs().max(1);
    let mut jti = [0u8; 12];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut jti)
        .map_err(|_| TokenError::Sign("the random source failed".into()))?;
    let claims = Claims {
        iss: settings.issuer.clone(),
        sub: subject.to_string(),
        aud: settings.audience.clone(),
        iat: now,
        nbf: now,
        exp: now + lifetime as i64,
        jti: URL_SAFE_NO_PAD.encode(jti),
        auth_time: Some(auth_time_s.unwrap_or(now)),
    };
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    let token = jsonwebtoken::encode(&header, &claims, &key.key)
        .map_err(|error| TokenError::Sign(error.to_string()))?;
    Ok((token, lifetime))
}

/// What a JWT's signature covers (`header.payload`), its payload part, apart.
pub struct SignedParts<'a> {
    pub signed: &'a str,
    pub claims: &'a str,
}

/// Splits a JWT into what is signed and the decoded signature; a JWT has exactly three parts.
pub fn signed_parts(token: &str) -> Result<(SignedParts<'_>, Vec<u8>), String> {
    let mut parts = token.split('.');
    let (Some(_), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a JWT has three parts".into());
    };
    let signed = &token[..token.len() - signature.len() - 1];
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| "the signature is not base64url".to_string())?;
    Ok((SignedParts { signed, claims }, signature))
}

/// A built-in token whose signature and times were checked, as a [`VerifiedTokens`] cache
/// remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    pub kid: String,
    pub claims: Claims,
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or(0)
}

/// What a renewal of `token` carries over: its client and when that client presented its
/// secret. Refused unless the token is valid now (signature, times, client still there) and
/// the session it belongs to is younger than `max_session`.
pub fn renewal(
    token: &str,
    state: &AuthState,
    settings: &TokenSettings,
) -> Result<(String, i64), TokenError> {
    let now_s = now_s();
    let verified = verify(token, state, settings, now_s)?;
    let principal = principal(&verified, state, settings)?;
    let auth_time = verified.claims.auth_time.unwrap_or(verified.claims.iat);
    let max_session_s = i64::try_from(settings.max_session.as_secs()).unwrap_or(i64::MAX);
    if now_s.saturating_sub(auth_time) > max_session_s {
        return Err(TokenError::Invalid(format!(
            "the session began {}s ago, past max_session ({max_session_s}s): get a token with the client's secret",
            now_s - auth_time
        )));
    }
    // A rotated secret ends the sessions begun with the old one: rotating a leaked secret
    // must also stop whoever holds a token from renewing it.
    let rotated_at_ms = state
        .clients
        .get(&principal.subject)
        .map_or(0, |client| client.secret_rotated_at_ms);
    // `auth_time` is whole seconds: a session that began in an earlier second than the
    // rotation began with the old secret.
    if auth_time < rotated_at_ms / 1000 {
        return Err(TokenError::Invalid(
            "the client's secret was rotated after this session began: get a token with the new secret".into(),
        ));
    }
    Ok((principal.subject, auth_time))
}

/// Checks a token of the built-in issuer: signature by a key the cluster holds, issuer,
/// audience, time, and a client that still exists.
pub fn validate(
    token: &str,
    state: &AuthState,
    settings: &TokenSettings,
) -> Result<Principal, TokenError> {
    principal(&verify(token, state, settings, now_s())?, state, settings)
}

/// As [`validate`], checking each token's signature once: `verified` remembers it (until it
/// expires). The key still being held, its retirement and the client are checked on every use,
/// so dropping a key or deleting a client takes effect at once all the same.
pub fn validate_cached(
    token: &str,
    state: &AuthState,
    settings: &TokenSettings,
    verified: &VerifiedTokens<VerifiedToken>,
) -> Result<Principal, TokenError> {
    let now_s = now_s();
    let digest = super::verified::digest(token);
    let token = match verified.get(&digest, now_s) {
        Some(token) => token,
        None => {
            let token = verify(token, state, settings, now_s)?;
            let leeway_s = i64::try_from(settings.leeway.as_secs()).unwrap_or(i64::MAX);
            verified.insert(
                digest,
                token.clone(),
                token.claims.exp.saturating_add(leeway_s),
                now_s,
            );
            token
        }
    };
    principal(&token, state, settings)
}

/// The signature, by a key the cluster holds, and the registered claims.
fn verify(
    token: &str,
    state: &AuthState,
    settings: &TokenSettings,
    now_s: i64,
) -> Result<VerifiedToken, TokenError> {
    let invalid = |reason: String| TokenError::Invalid(reason);
    let header = jsonwebtoken::decode_header(token).map_err(|error| invalid(error.to_string()))?;
    if header.alg != Algorithm::ES256 {
        return Err(invalid(format!("algorithm {:?} is not ES256", header.alg)));
    }
    let kid = header
        .kid
        .ok_or_else(|| invalid("no kid in the header".into()))?;
    let key = state
        .signing_key(&kid)
        .ok_or_else(|| invalid(format!("unknown signing key '{kid}'")))?;
    let (payload, signature) = signed_parts(token).map_err(invalid)?;
    let mut point = Vec::with_capacity(65);
    point.push(4);
    point.extend_from_slice(&key.public_x);
    point.extend_from_slice(&key.public_y);
    PublicKey::P256(point)
        .verify(Algorithm::ES256, payload.signed.as_bytes(), &signature)
        .map_err(invalid)?;
    let claims: serde_json::Value = URL_SAFE_NO_PAD
        .decode(payload.claims)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| invalid("the payload is not JSON".into()))?;
    check_claims(
        &claims,
        &ClaimRules {
            issuer: &settings.issuer,
            audience: &settings.audience,
            leeway_s: i64::try_from(settings.leeway.as_secs()).unwrap_or(i64::MAX),
            now_s,
        },
    )
    .map_err(invalid)?;
    let claims: Claims =
        serde_json::from_value(claims).map_err(|error| invalid(error.to_string()))?;
    Ok(VerifiedToken { kid, claims })
}

/// Who a verified token speaks for now: its key still held (and not retired before the token
/// was signed) and its client still there, with the client's current roles.
fn principal(
    token: &VerifiedToken,
    state: &AuthState,
    settings: &TokenSettings,
) -> Result<Principal, TokenError> {
    let invalid = |reason: String| TokenError::Invalid(reason);
    let VerifiedToken { kid, claims } = token;
    let key = state
        .signing_key(kid)
        .ok_or_else(|| invalid(format!("unknown signing key '{kid}'")))?;
    // A retired key signs nothing after its retirement.
    if let Some(retired_at_ms) = key.retired_at_ms {
        if claims.iat * 1000 > retired_at_ms + settings.leeway.as_millis() as i64 {
            return Err(invalid(format!(
                "signed by key '{kid}' after it was retired"
            )));
        }
    }
    let client = state
        .clients
        .get(&claims.sub)
        .ok_or_else(|| invalid(format!("client '{}' does not exist", claims.sub)))?;
    Ok(Principal {
        subject: claims.sub.clone(),
        roles: client.roles.clone(),
        expires_at_ms: claims.exp * 1000,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::auth::keys::generate_signing_key;
    use crate::broker::auth::sealing::SealingKey;
    use crate::domain::auth::{AuthCommand, AuthOutcome, SigningKeyRecord};

    fn sealing() -> SealingKey {
        SealingKey::for_tests(3)
    }

    fn new_key(now_ms: i64) -> SigningKeyRecord {
        generate_signing_key(now_ms, &sealing()).unwrap()
    }

    /// The current key of `state`, opened to sign with.
    fn current(state: &AuthState) -> Signer {
        Signer::open(state.current_signing_key().unwrap(), &sealing()).unwrap()
    }

    fn settings() -> TokenSettings {
        TokenSettings {
            issuer: "http://127.0.0.1:8080".into(),
            audience: "herald".into(),
            lifetime: Duration::from_secs(3600),
            max_session: Duration::from_secs(12 * 3600),
            leeway: Duration::from_secs(5),
            builtin_enabled: true,
        }
    }

    fn now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }

    fn state_with_client() -> AuthState {
        let mut state = AuthState::default();
        let outcome = state.apply(&AuthCommand::CreateClient {
            client_id: "billing".into(),
            secret_hash: "$argon2id$x".into(),
            roles: vec!["producer".into()],
            created_at_ms: 0,
        });
        assert_eq!(outcome, AuthOutcome::Done);
        state.apply(&AuthCommand::AddSigningKey {
            key: new_key(now_ms() - 60_000),
        });
        state
    }

    #[test]
    fn issued_tokens_validate_with_the_clients_current_roles() {
        let mut state = state_with_client();
        let key = current(&state);
        let (token, lasts) = issue(&key, &settings(), "billing", now_ms(), None).unwrap();
        assert_eq!(lasts, 3600);
        let principal = validate(&token, &state, &settings()).unwrap();
        assert_eq!(principal.subject, "billing");
        assert_eq!(principal.roles, vec!["producer".to_string()]);

        // A deleted client's tokens stop working at once.
        state.apply(&AuthCommand::DeleteClient {
            client_id: "billing".into(),
        });
        assert!(validate(&token, &state, &settings()).is_err());
    }

    #[test]
    fn a_renewal_keeps_the_session_start_and_ends_with_the_session_or_the_secret() {
        let mut state = state_with_client();
        let key = current(&state);
        let began_ms = now_ms() - 3_600_000;
        let (token, _) = issue(&key, &settings(), "billing", began_ms, None).unwrap();
        let (subject, auth_time) = renewal(&token, &state, &settings()).unwrap();
        assert_eq!((subject.as_str(), auth_time), ("billing", began_ms / 1000));
        // The successor carries the same session start, so renewing it again is bounded too.
        let (next, _) = issue(&key, &settings(), &subject, now_ms(), Some(auth_time)).unwrap();
        assert_eq!(
            renewal(&next, &state, &settings()).unwrap().1,
            began_ms / 1000
        );

        // Past max_session, a valid token is no longer renewed.
        let short = TokenSettings {
            max_session: Duration::from_secs(1800),
            ..settings()
        };
        assert!(validate(&next, &state, &short).is_ok());
        let error = renewal(&next, &state, &short).unwrap_err();
        assert!(error.to_string().contains("max_session"), "{error}");

        // A secret rotated after the session began ends it.
        state.apply(&AuthCommand::RotateClientSecret {
            client_id: "billing".into(),
            secret_hash: "$argon2id$y".into(),
            rotated_at_ms: now_ms(),
        });
        let error = renewal(&next, &state, &settings()).unwrap_err();
        assert!(error.to_string().contains("rotated"), "{error}");

        // A deleted client's token is not renewed.
        state.apply(&AuthCommand::DeleteClient {
            client_id: "billing".into(),
        });
        let (fresh, _) = issue(&key, &settings(), "billing", now_ms(), None).unwrap();
        assert!(renewal(&fresh, &state, &settings()).is_err());
    }

    #[test]
    fn tampered_foreign_and_expired_tokens_are_refused() {
        let state = state_with_client();
        let key = current(&state);
        let (token, _) = issue(&key, &settings(), "billing", now_ms(), None).unwrap();
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(
            br#"{"iss":"http://127.0.0.1:8080","sub":"billing","aud":"herald","iat":1,"nbf":1,"exp":99999999999,"jti":"x"}"#,
        );
        assert!(validate(&parts.join("."), &state, &settings()).is_err());

        // Signed by a key the cluster does not hold.
        let stranger = Signer::open(&new_key(0), &sealing()).unwrap();
        let (foreign, _) = issue(&stranger, &settings(), "billing", now_ms(), None).unwrap();
        let error = validate(&foreign, &state, &settings()).unwrap_err();
        assert!(error.to_string().contains("unknown signing key"), "{error}");

        // Long expired.
        let (old, _) = issue(
            &key,
            &settings(),
            "billing",
            now_ms() - 10 * 3_600_000,
            None,
        )
        .unwrap();
        assert!(validate(&old, &state, &settings()).is_err());

        // Another audience.
        let other = TokenSettings {
            audience: "elsewhere".into(),
            ..settings()
        };
        let (elsewhere, _) = issue(&key, &other, "billing", now_ms(), None).unwrap();
        assert!(validate(&elsewhere, &state, &settings()).is_err());
    }

    #[test]
    fn remembered_tokens_still_need_their_key_and_client() {
        let mut state = state_with_client();
        let key = current(&state);
        let verified = VerifiedTokens::new(16);
        let (token, _) = issue(&key, &settings(), "billing", now_ms(), None).unwrap();
        assert!(validate_cached(&token, &state, &settings(), &verified).is_ok());
        assert_eq!(verified.len(), 1);
        // A remembered token answers the client's current roles...
        state.apply(&AuthCommand::DeleteClient {
            client_id: "billing".into(),
        });
        assert!(validate_cached(&token, &state, &settings(), &verified).is_err());
        // ...and stops validating once its key is dropped.
        let mut state = state_with_client();
        let key = current(&state);
        let (token, _) = issue(&key, &settings(), "billing", now_ms(), None).unwrap();
        assert!(validate_cached(&token, &state, &settings(), &verified).is_ok());
        state.apply(&AuthCommand::AddSigningKey {
            key: new_key(now_ms()),
        });
        state.apply(&AuthCommand::DropSigningKey { kid: key.kid });
        assert!(validate_cached(&token, &state, &settings(), &verified).is_err());
        // Tampered tokens are other tokens: never taken for a remembered one.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[1].push('A');
        assert!(validate_cached(&parts.join("."), &state, &settings(), &verified).is_err());
    }

    #[test]
    fn a_retired_key_validates_its_tokens_until_it_is_dropped() {
        let mut state = state_with_client();
        let old_key = current(&state);
        let (token, _) = issue(&old_key, &settings(), "billing", now_ms() - 1000, None).unwrap();
        state.apply(&AuthCommand::AddSigningKey {
            key: new_key(now_ms()),
        });
        assert!(validate(&token, &state, &settings()).is_ok());
        state.apply(&AuthCommand::DropSigningKey {
            kid: old_key.kid.clone(),
        });
        assert!(validate(&token, &state, &settings()).is_err());
    }
}
