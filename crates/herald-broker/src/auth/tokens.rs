//! Access tokens: ES256 JWTs signed with the cluster's current key (its `kid` in the header),
//! validated by any node against the replicated keys.
//!
//! A token names its client (`sub`); its rights are the client's roles as the metadata holds
//! them when the token is used, so deleting a client or changing its roles takes effect at once,
//! not when its tokens expire. It also names the credential it was issued under (`cred`: a
//! digest of the client's secret hash, which is new at every creation and rotation), so it is
//! valid only for that incarnation of its client and that secret: a client deleted and created
//! again does not revive its old tokens, and a rotated secret ends every token issued with the
//! old one, in whatever millisecond either happened.
//!
//! Signatures are normalised to low `s` when signing and only low-`s` ones are accepted
//! (`low_s`), so each token has exactly one valid text.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, Header};
use serde::{Deserialize, Serialize};

use super::keys::Signer;
use super::low_s::{is_low_s_p256, normalize_p256};
use super::verified::VerifiedTokens;
use super::verify::{check_claims, ClaimRules, PublicKey};
use herald_domain::auth::{AuthState, ClientRecord};

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
    /// The client credential the token was issued under ([`credential_id`]); a token is valid
    /// only while its client still has it.
    #[serde(default)]
    pub cred: String,
}

/// Identifies one incarnation of a client with one secret: a digest of its secret's hash (a PHC
/// string with a fresh random salt at every creation and rotation). It says nothing about the
/// secret, and changes exactly when tokens issued before must stop being valid.
pub fn credential_id(client: &ClientRecord) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(b"herald client credential\0");
    context.update(client.secret_hash.as_bytes());
    URL_SAFE_NO_PAD.encode(&context.finish().as_ref()[..16])
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

/// A new token for `subject`, issued under its credential `cred` ([`credential_id`]), and how
/// many seconds it lasts. `auth_time_s` is when the client presented its secret: now for the
/// client-credentials grant, the renewed token's for a renewal.
pub fn issue(
    key: &Signer,
    settings: &TokenSettings,
    subject: &str,
    cred: &str,
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
        cred: cred.to_string(),
    };
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    let token = jsonwebtoken::encode(&header, &claims, &key.key)
        .map_err(|error| TokenError::Sign(error.to_string()))?;
    Ok((with_low_s(token)?, lifetime))
}

/// `token` with its signature in the low-`s` form (the signer may pick either).
fn with_low_s(token: String) -> Result<String, TokenError> {
    let (signed, signature) = token
        .rsplit_once('.')
        .ok_or_else(|| TokenError::Sign("the signed token has no signature".into()))?;
    let mut signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|error| TokenError::Sign(error.to_string()))?;
    if is_low_s_p256(&signature) {
        return Ok(token);
    }
    normalize_p256(&mut signature);
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
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

/// What a renewal of `token` carries over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    pub subject: String,
    /// The credential the session began under (still the client's: the token is valid).
    pub cred: String,
    /// When the client presented its secret (seconds).
    pub auth_time_s: i64,
}

/// What a renewal of `token` carries over: its client, its credential and when that client
/// presented its secret. Refused unless the token is valid now (signature, times, client and
/// credential still there: a rotated secret ends the sessions begun with the old one) and the
/// session it belongs to is younger than `max_session`.
pub fn renewal(
    token: &str,
    state: &AuthState,
    settings: &TokenSettings,
) -> Result<Renewal, TokenError> {
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
    Ok(Renewal {
        subject: principal.subject,
        cred: verified.claims.cred,
        auth_time_s: auth_time,
    })
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
    // Its twin `(r, n - s)` verifies too; only the form the issuer signs is taken.
    if !is_low_s_p256(&signature) {
        return Err(invalid(
            "the signature is not in its low-s form (the issuer signs no other)".into(),
        ));
    }
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
    if claims.cred != credential_id(client) {
        return Err(invalid(format!(
            "client '{}' was re-created or its secret rotated since this token was issued: get a token with its current secret",
            claims.sub
        )));
    }
    Ok(Principal {
        subject: claims.sub.clone(),
        roles: client.roles.clone(),
        expires_at_ms: claims.exp * 1000,
    })
}
