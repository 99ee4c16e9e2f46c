//! Nodes without mutual TLS prove they hold the cluster secret in the hello, both ways, and
//! never send it.
//!
//! 1. The client's hello carries a fresh 32-byte nonce.
//! 2. The server answers a challenge: its own fresh nonce and its proof, an HMAC-SHA256 under
//!    the key derived from the cluster secret (`crate::cluster_secret`) over a label, the hello
//!    as sent and its nonce.
//! 3. The client checks the server's proof (a stranger listening on a peer's address is not
//!    talked to) and answers its own: the HMAC over another label and the same bytes.
//! 4. The server checks it and acknowledges the hello, or refuses it (logged and counted).
//!
//! Both nonces are in what each proof covers, so a proof recorded from one handshake is
//! worthless in another, and the labels keep a server's proof from being replayed as a
//! client's. The hello's node ids are covered too: a proof is for one claimed identity. What it
//! does not give is what TLS gives: the connection is not encrypted, and someone who can
//! rewrite packets between two nodes could take over one after its handshake. Use mutual TLS
//! between nodes on a network you do not trust; the secret is for loopback and private
//! networks, where the threat is a process that can merely connect.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::frame::NONCE_BYTES;

const SERVER_LABEL: &[u8] = b"herald rpc hello: server proof\0";
const CLIENT_LABEL: &[u8] = b"herald rpc hello: client proof\0";
/// Bytes of a proof (HMAC-SHA256).
pub(crate) const PROOF_BYTES: usize = 32;

/// The key nodes prove the cluster secret with; the same on every node of a cluster.
#[derive(Clone)]
pub struct HelloKey(hmac::Key);

impl std::fmt::Debug for HelloKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("HelloKey(..)")
    }
}

impl HelloKey {
    /// A key from 32 bytes derived from the cluster secret.
    pub fn new(bytes: &[u8; 32]) -> HelloKey {
        HelloKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    fn proof(&self, label: &[u8], hello: &[u8], server_nonce: &[u8]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.0);
        context.update(label);
        context.update(hello);
        context.update(server_nonce);
        context.sign()
    }

    fn verify(&self, label: &[u8], hello: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
        let mut message = Vec::with_capacity(label.len() + hello.len() + server_nonce.len());
        message.extend_from_slice(label);
        message.extend_from_slice(hello);
        message.extend_from_slice(server_nonce);
        // Constant-time comparison.
        hmac::verify(&self.0, &message, proof).is_ok()
    }
}

/// A fresh random nonce.
pub(crate) fn nonce() -> Result<[u8; NONCE_BYTES], String> {
    let mut nonce = [0u8; NONCE_BYTES];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(nonce)
}

/// The server's answer to a hello: its nonce and its proof of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub(crate) nonce: [u8; NONCE_BYTES],
    pub(crate) proof: [u8; PROOF_BYTES],
}

impl Challenge {
    /// The server's challenge to the hello whose frame body is `hello`.
    pub(crate) fn new(key: &HelloKey, hello: &[u8]) -> Result<Challenge, String> {
        let nonce = nonce()?;
        let mut proof = [0u8; PROOF_BYTES];
        proof.copy_from_slice(key.proof(SERVER_LABEL, hello, &nonce).as_ref());
        Ok(Challenge { nonce, proof })
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(NONCE_BYTES + PROOF_BYTES);
        body.extend_from_slice(&self.nonce);
        body.extend_from_slice(&self.proof);
        body
    }

    pub(crate) fn decode(body: &[u8]) -> Result<Challenge, String> {
        if body.len() != NONCE_BYTES + PROOF_BYTES {
            return Err(format!("malformed challenge of {} bytes", body.len()));
        }
        let mut challenge = Challenge {
            nonce: [0; NONCE_BYTES],
            proof: [0; PROOF_BYTES],
        };
        challenge.nonce.copy_from_slice(&body[..NONCE_BYTES]);
        challenge.proof.copy_from_slice(&body[NONCE_BYTES..]);
        Ok(challenge)
    }

    /// Whether the server that sent this knows the secret (the client checks).
    pub(crate) fn proves_server(&self, key: &HelloKey, hello: &[u8]) -> bool {
        key.verify(SERVER_LABEL, hello, &self.nonce, &self.proof)
    }

    /// The client's proof, answering this challenge.
    pub(crate) fn client_proof(&self, key: &HelloKey, hello: &[u8]) -> [u8; PROOF_BYTES] {
        let mut proof = [0u8; PROOF_BYTES];
        proof.copy_from_slice(key.proof(CLIENT_LABEL, hello, &self.nonce).as_ref());
        proof
    }

    /// Whether the client's `proof` answers this challenge (the server checks).
    pub(crate) fn proves_client(&self, key: &HelloKey, hello: &[u8], proof: &[u8]) -> bool {
        key.verify(CLIENT_LABEL, hello, &self.nonce, proof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_hold_for_the_same_key_and_bytes_only() {
        let key = HelloKey::new(&[1; 32]);
        let other = HelloKey::new(&[2; 32]);
        let hello = b"a hello as sent, with its nonce";
        let challenge = Challenge::new(&key, hello).unwrap();
        assert_eq!(
            Challenge::decode(&challenge.encode()),
            Ok(challenge.clone())
        );
        assert!(challenge.proves_server(&key, hello));
        assert!(!challenge.proves_server(&other, hello));
        assert!(!challenge.proves_server(&key, b"another hello"));

        let proof = challenge.client_proof(&key, hello);
        assert!(challenge.proves_client(&key, hello, &proof));
        assert!(!challenge.proves_client(&key, hello, &challenge.client_proof(&other, hello)));
        assert!(!challenge.proves_client(&key, hello, &[]));
        // A server's proof is not a client's, and a proof is for one challenge only.
        assert!(!challenge.proves_client(&key, hello, &challenge.proof));
        let next = Challenge::new(&key, hello).unwrap();
        assert_ne!(next.nonce, challenge.nonce);
        assert!(!next.proves_client(&key, hello, &proof));
        assert!(Challenge::decode(&[0; 10]).is_err());
    }
}
