//! Client secrets: generated here (256 random bits), shown once, stored only as an argon2id
//! hash. Hashing and verifying are deliberately slow (tens of milliseconds, 19 MiB of memory),
//! so they run a few at a time on threads of their own (`secret_checks`), never on a request's
//! async worker.

use argon2::password_hash::{Output, PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
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

/// The most memory a stored hash may make a check use, in KiB (argon2's `m`): the default is
/// 19456 (19 MiB); a hash asking for more is not checked and matches nothing.
pub const MAX_CHECK_MEMORY_KIB: u32 = 64 * 1024;

/// Whether `secret` matches `hash`; a malformed hash matches nothing. Allocates the hash's
/// memory for the one check: [`verify_secret_in`] reuses it.
pub fn verify_secret(secret: &str, hash: &str) -> bool {
    verify_secret_in(secret, hash, &mut Vec::new())
}

/// [`verify_secret`] in `memory`, which grows to the hash's memory cost (19 MiB by default)
/// once and is reused by the next checks, so checking secrets one after the other does not ask
/// the allocator for 19 MiB each time.
pub fn verify_secret_in(secret: &str, hash: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Ok(algorithm), Some(version), Ok(params), Some(salt), Some(expected)) = (
        Algorithm::try_from(parsed.algorithm),
        parsed
            .version
            .and_then(|version| Version::try_from(version).ok()),
        Params::try_from(&parsed),
        parsed.salt,
        parsed.hash,
    ) else {
        return false;
    };
    if params.m_cost() > MAX_CHECK_MEMORY_KIB {
        return false;
    }
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    if memory.len() < params.block_count() {
        memory.resize(params.block_count(), Block::new());
    }
    let mut computed = vec![0u8; expected.len()];
    let blocks = params.block_count();
    let hashed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        secret.as_bytes(),
        salt,
        &mut computed,
        &mut memory[..blocks],
    );
    // `Output`'s equality is constant-time.
    hashed.is_ok() && Output::new(&computed).is_ok_and(|computed| computed == expected)
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
        // Reusing one memory for several checks gives the same answers.
        let mut memory = Vec::new();
        assert!(verify_secret_in(&secret, &hash, &mut memory));
        assert!(!verify_secret_in("wrong", &hash, &mut memory));
        assert!(verify_secret_in(&secret, &hash, &mut memory));
        assert_eq!(memory.len(), 19 * 1024);
        // A hash asking for more memory than allowed matches nothing.
        let greedy = hash.replace("m=19456", "m=1048576");
        assert!(!verify_secret_in(&secret, &greedy, &mut memory));
        // The same secret hashes differently each time (a fresh salt).
        assert_ne!(hash, hash_secret(&secret).unwrap());
    }
}
