//! Signing keys at rest: the built-in issuer's private keys are replicated through the
//! metadata group, so they are written to every node's raft log, snapshots, RocksDB
//! write-ahead log and table files. They are sealed before they are proposed, with AES-256-GCM
//! (ring) under a key derived from the cluster secret (`herald_rpc::cluster_secret`), and opened only
//! in memory, to sign. A copy of a data directory without the secret holds no usable key.
//!
//! Layout of a sealed key: `HSK1` | the sealing key's 8-byte fingerprint | 12-byte random
//! nonce | ciphertext and tag. The associated data binds it to its key id (a sealed key moved
//! to another record does not open) and to the fingerprint. The fingerprint lets a node whose
//! cluster secret differs say so, instead of failing with a bare authentication error.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use herald_rpc::cluster_secret::{ClusterSecret, KeyPurpose};

const MAGIC: &[u8; 4] = b"HSK1";
const FINGERPRINT_BYTES: usize = 8;
const HEADER_BYTES: usize = MAGIC.len() + FINGERPRINT_BYTES + NONCE_LEN;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error(
        "the signing key was sealed under another cluster secret (fingerprint {sealed_with}; this node's is \
         {this_node}): every node of a cluster needs the same cluster secret"
    )]
    OtherSecret {
        sealed_with: String,
        this_node: String,
    },
    #[error("a sealed signing key is malformed")]
    Malformed,
    #[error("a sealed signing key does not open: it was altered, or belongs to another key")]
    Tampered,
    #[error("the system's random source failed")]
    Random,
}

/// The key signing keys are sealed under; the same on every node of a cluster.
pub struct SealingKey {
    key: LessSafeKey,
    fingerprint: [u8; FINGERPRINT_BYTES],
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SealingKey")
            .field("fingerprint", &hex(&self.fingerprint))
            .finish()
    }
}

impl SealingKey {
    /// The sealing key of a cluster secret.
    pub fn of(secret: &ClusterSecret) -> SealingKey {
        let mut fingerprint = [0u8; FINGERPRINT_BYTES];
        fingerprint.copy_from_slice(&secret.derive(KeyPurpose::Fingerprint)[..FINGERPRINT_BYTES]);
        SealingKey::new(&secret.derive(KeyPurpose::SigningKeysAtRest), fingerprint)
    }

    fn new(key: &[u8; 32], fingerprint: [u8; FINGERPRINT_BYTES]) -> SealingKey {
        // A 32-byte key is always a valid AES-256 key.
        let unbound = UnboundKey::new(&AES_256_GCM, key).unwrap_or_else(|_| unreachable!());
        SealingKey {
            key: LessSafeKey::new(unbound),
            fingerprint,
        }
    }

    /// A key for tests: the same bytes make the same key.
    #[cfg(test)]
    pub fn for_tests(byte: u8) -> SealingKey {
        SealingKey::new(&[byte; 32], [byte; FINGERPRINT_BYTES])
    }

    fn aad(&self, kid: &str) -> Vec<u8> {
        let mut aad = Vec::with_capacity(MAGIC.len() + FINGERPRINT_BYTES + kid.len());
        aad.extend_from_slice(MAGIC);
        aad.extend_from_slice(&self.fingerprint);
        aad.extend_from_slice(kid.as_bytes());
        aad
    }

    /// Seals the private key of the signing key `kid`.
    pub fn seal(&self, kid: &str, private_key: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut sealed = Vec::with_capacity(HEADER_BYTES + private_key.len() + 16);
        sealed.extend_from_slice(MAGIC);
        sealed.extend_from_slice(&self.fingerprint);
        sealed.extend_from_slice(&nonce);
        let mut body = private_key.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.aad(kid)),
                &mut body,
            )
            .map_err(|_| SealError::Tampered)?;
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// Opens the sealed private key of the signing key `kid`.
    pub fn open(&self, kid: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < HEADER_BYTES + AES_256_GCM.tag_len() || &sealed[..MAGIC.len()] != MAGIC {
            return Err(SealError::Malformed);
        }
        let fingerprint = &sealed[MAGIC.len()..MAGIC.len() + FINGERPRINT_BYTES];
        if fingerprint != self.fingerprint {
            return Err(SealError::OtherSecret {
                sealed_with: hex(fingerprint),
                this_node: hex(&self.fingerprint),
            });
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&sealed[MAGIC.len() + FINGERPRINT_BYTES..HEADER_BYTES]);
        let mut body = sealed[HEADER_BYTES..].to_vec();
        let opened = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.aad(kid)),
                &mut body,
            )
            .map_err(|_| SealError::Tampered)?;
        Ok(opened.to_vec())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_key_opens_only_with_its_key_and_its_kid() {
        let sealing = SealingKey::for_tests(1);
        let private = b"a private key, PKCS#8 in real life".to_vec();
        let sealed = sealing.seal("kid-1", &private).unwrap();
        assert!(
            !sealed
                .windows(private.len())
                .any(|window| window == private),
            "the plaintext shows in the sealed form"
        );
        assert_eq!(sealing.open("kid-1", &sealed).unwrap(), private);
        // Sealed twice, two different forms (a fresh nonce each time).
        assert_ne!(sealing.seal("kid-1", &private).unwrap(), sealed);

        assert_eq!(sealing.open("kid-2", &sealed), Err(SealError::Tampered));
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(sealing.open("kid-1", &altered), Err(SealError::Tampered));
        assert_eq!(
            sealing.open("kid-1", &sealed[..10]),
            Err(SealError::Malformed)
        );
        assert!(matches!(
            SealingKey::for_tests(2).open("kid-1", &sealed),
            Err(SealError::OtherSecret { .. })
        ));
    }

    #[test]
    fn the_same_cluster_secret_opens_what_another_node_sealed() {
        use herald_rpc::cluster_secret::SecretSource;
        let text = "the-same-secret-on-every-node-of-the-cluster";
        let node_1 =
            SealingKey::of(&ClusterSecret::from_text(text, SecretSource::Environment).unwrap());
        let node_2 =
            SealingKey::of(&ClusterSecret::from_text(text, SecretSource::Environment).unwrap());
        let sealed = node_1.seal("k", b"private").unwrap();
        assert_eq!(node_2.open("k", &sealed).unwrap(), b"private");
        let stranger = SealingKey::of(
            &ClusterSecret::from_text(
                "another-secret-of-another-cluster-entirely",
                SecretSource::Environment,
            )
            .unwrap(),
        );
        let error = stranger.open("k", &sealed).unwrap_err().to_string();
        assert!(error.contains("another cluster secret"), "{error}");
    }
}
