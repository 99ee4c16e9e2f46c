//! Tokens already verified. A service sends the same token with every request for the token's
//! lifetime, so its signature (~100 µs of CPU) is checked once and later requests only hash it
//! (~1 µs) and look it up. Only what cannot change is remembered: whatever a token's validity
//! also depends on (its key still trusted, its client still existing) is checked on every use by
//! the caller.

use std::collections::HashMap;

use parking_lot::RwLock;

/// The most tokens remembered per cache; past it the expired ones are dropped, and if all are
/// live the cache starts over (a bound, not an eviction policy: it holds far more tokens than
/// a cluster's clients use at once).
pub const MAX_VERIFIED_TOKENS: usize = 10_000;

/// A token's identity: SHA-256 of all of it (header, payload and signature), so a changed
/// payload under a valid signature is a different token.
pub type TokenDigest = [u8; 32];

pub fn digest(token: &str) -> TokenDigest {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut bytes = [0u8; 32];
    bytes.copy_from_slice(digest.as_ref());
    bytes
}

struct Entry<V> {
    value: V,
    /// The last second the token is valid in (its `exp` plus the leeway).
    valid_until_s: i64,
}

/// Verified tokens and what verifying them found.
pub struct VerifiedTokens<V> {
    entries: RwLock<HashMap<TokenDigest, Entry<V>>>,
    capacity: usize,
}

impl<V: Clone> VerifiedTokens<V> {
    pub fn new(capacity: usize) -> VerifiedTokens<V> {
        VerifiedTokens {
            entries: RwLock::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// What verifying the token found, while it is still valid at `now_s`.
    pub fn get(&self, digest: &TokenDigest, now_s: i64) -> Option<V> {
        self.entries
            .read()
            .get(digest)
            .filter(|entry| entry.valid_until_s >= now_s)
            .map(|entry| entry.value.clone())
    }

    pub fn insert(&self, digest: TokenDigest, value: V, valid_until_s: i64, now_s: i64) {
        let mut entries = self.entries.write();
        if entries.len() >= self.capacity {
            entries.retain(|_, entry| entry.valid_until_s >= now_s);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(
            digest,
            Entry {
                value,
                valid_until_s,
            },
        );
    }

    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_remembered_until_they_expire_within_a_bound() {
        let cache = VerifiedTokens::new(2);
        let (a, b, c) = (digest("a.b.c"), digest("a.b.d"), digest("a.x.c"));
        assert_ne!(a, b);
        cache.insert(a, "alice", 100, 0);
        assert_eq!(cache.get(&a, 100), Some("alice"));
        assert_eq!(cache.get(&a, 101), None);
        assert_eq!(cache.get(&b, 0), None);
        cache.insert(b, "bob", 10, 0);
        // Full: the expired entry makes room.
        cache.insert(c, "carol", 100, 50);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&b, 5), None);
        assert_eq!(cache.get(&c, 50), Some("carol"));
        // Full of live entries: it starts over.
        cache.insert(b, "bob", 100, 50);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&b, 50), Some("bob"));
    }
}
