//! Client secrets: generated here (256 random bits), shown once, stored only as an argon2id
//! hash. Hashing and verifying are deliberately slow (tens of milliseconds), so they run on the
//! blocking pool, never on a request's async worker.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

/// Random bytes of a new secret: 256 bits.
const SECRET_BYTES: usize = 32;
/// Random bytes of a hash's salt.
const SALT_BYTES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the system's random source failed")]
    Random,
    #[error("hashing failed: {0}")]
    Hash(String),
}

fn random_bytes<const N: usize>() -> Result<[u8; N], SecretError> {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SecretError::Random)?;
    Ok(bytes)
}

/// A new secret, URL-safe base64 (43 characters).
pub fn generate_secret() -> Result<String, SecretError> {
    Ok(URL_SAFE_NO_PAD.encode(random_bytes::<SECRET_BYTES>()?))
}

/// The argon2id hash of `secret` as a PHC string, with a random salt.
pub fn hash_secret(secret: &str) -> Result<String, SecretError> {
    let salt = SaltString::encode_b64(&random_bytes::<SALT_BYTES>()?)
        .map_err(|error| SecretError::Hash(error.to_string()))?;
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| SecretError::Hash(error.to_string()))
}

/// Whether `secret` matches `hash`; a malformed hash matches nothing.
pub fn verify_secret(secret: &str, hash: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    Argon2::default()
        .verify_password(secret.as_bytes(), &parsed)
        .is_ok()
}

/// [`hash_secret`] on the blocking pool.
pub async fn hash_secret_blocking(secret: String) -> Result<String, SecretError> {
    tokio::task::spawn_blocking(move || hash_secret(&secret))
        .await
        .map_err(|error| SecretError::Hash(error.to_string()))?
}

/// [`verify_secret`] on the blocking pool.
pub async fn verify_secret_blocking(secret: String, hash: String) -> bool {
    tokio::task::spawn_blocking(move || verify_secret(&secret, &hash))
        .await
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_verify_only_against_their_hash() {
        let secret = generate_secret().unwrap();
        assert_eq!(secret.len(), 43);
        assert_ne!(secret, generate_secret().unwrap());
        let hash = hash_secret(&secret).unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(!hash.contains(&secret));
        assert!(verify_secret(&secret, &hash));
        assert!(!verify_secret("wrong", &hash));
        assert!(!verify_secret(&secret, "not a hash"));
        // The same secret hashes differently each time (a fresh salt).
        assert_ne!(hash, hash_secret(&secret).unwrap());
    }
}
