//! Who may do what, replicated in the metadata group: OAuth2 clients (their hashed secrets and
//! roles), the keys tokens are signed with, and the authorization policy.
//!
//! Applying is deterministic like every metadata command: secrets are hashed, keys generated and
//! clocks read by the proposer, and carried in the command. A client's secret is never stored,
//! only its argon2 hash (a PHC string; secrets are 256 random bits, so the hash gives nothing to
//! guess from). Signing keys are stored whole so that any node can issue and validate tokens,
//! their private half sealed under the cluster secret (`broker::auth::sealing`): they live where
//! the metadata lives (the raft log and its snapshots on each node's disk), which a backup or
//! another local user may read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::names::validate_name;

/// The roles every cluster has, with rights the policy grants them (see `docs/security.md`).
pub const BUILT_IN_ROLES: [&str; 4] = ["admin", "producer", "consumer", "viewer"];

/// The most clients a cluster holds: their records live in every node's metadata.
pub const MAX_CLIENTS: usize = 10_000;
/// The most rules a policy holds.
pub const MAX_POLICY_RULES: usize = 10_000;
/// The most roles one client has.
pub const MAX_ROLES_PER_CLIENT: usize = 64;
/// The most signing keys kept (the current one and those still validating older tokens).
pub const MAX_SIGNING_KEYS: usize = 8;

/// An OAuth2 client (RFC 6749 client credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// The argon2id hash of the client's secret, as a PHC string.
    pub secret_hash: String,
    pub roles: Vec<String>,
    pub created_at_ms: i64,
    pub secret_rotated_at_ms: i64,
}

/// An ES256 key tokens are signed with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningKeyRecord {
    /// The key id, in every token's header (`kid`) and in the JWKS.
    pub kid: String,
    /// The private key (PKCS#8 DER) sealed under the cluster secret: never in plaintext here,
    /// in the raft log or on disk (`broker::auth::sealing`).
    pub sealed_private: Vec<u8>,
    /// The public point's coordinates (32 bytes each), as the JWKS publishes them.
    pub public_x: Vec<u8>,
    pub public_y: Vec<u8>,
    pub created_at_ms: i64,
    /// When a newer key took over signing. A retired key still validates the tokens it signed
    /// until they expire, then the rotation drops it.
    pub retired_at_ms: Option<i64>,
}

/// One authorization rule: `role` may do `action` on resources matching `resource`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PolicyRule {
    pub role: String,
    /// `kind:pattern`, e.g. `topic:orders-*`, `group:*`, `subscription:billing`, `cluster:*`.
    pub resource: String,
    /// e.g. `produce`, `consume`, `admin`, `view`; `*` for any.
    pub action: String,
}

/// The authorization half of the metadata state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthState {
    pub clients: BTreeMap<String, ClientRecord>,
    /// Oldest first; the last one not retired signs new tokens.
    pub signing_keys: Vec<SigningKeyRecord>,
    /// `None` until a policy is first set: the built-in policy applies.
    pub policy: Option<Vec<PolicyRule>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthCommand {
    CreateClient {
        client_id: String,
        secret_hash: String,
        roles: Vec<String>,
        created_at_ms: i64,
    },
    RotateClientSecret {
        client_id: String,
        secret_hash: String,
        rotated_at_ms: i64,
    },
    DeleteClient {
        client_id: String,
    },
    /// `key` signs from now on; the key signing until now is retired at `key.created_at_ms`.
    AddSigningKey {
        key: SigningKeyRecord,
    },
    /// Drops a retired key whose tokens have all expired.
    DropSigningKey {
        kid: String,
    },
    SetPolicy {
        rules: Vec<PolicyRule>,
    },
}

impl std::fmt::Display for AuthCommand {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthCommand::CreateClient { client_id, .. } => {
                write!(formatter, "create client {client_id}")
            }
            AuthCommand::RotateClientSecret { client_id, .. } => {
                write!(formatter, "rotate the secret of client {client_id}")
            }
            AuthCommand::DeleteClient { client_id } => {
                write!(formatter, "delete client {client_id}")
            }
            AuthCommand::AddSigningKey { key } => write!(formatter, "add signing key {}", key.kid),
            AuthCommand::DropSigningKey { kid } => write!(formatter, "drop signing key {kid}"),
            AuthCommand::SetPolicy { rules } => {
                write!(formatter, "set the policy ({} rules)", rules.len())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthOutcome {
    Done,
    ClientExists,
    ClientNotFound,
    KeyNotFound,
    Invalid(String),
}

/// Checks a role name: built-in or custom, named like topics.
pub fn validate_role(role: &str) -> Result<(), String> {
    validate_name("role", role)
}

impl AuthState {
    /// The key that signs new tokens.
    pub fn current_signing_key(&self) -> Option<&SigningKeyRecord> {
        self.signing_keys
            .iter()
            .rev()
            .find(|key| key.retired_at_ms.is_none())
    }

    pub fn signing_key(&self, kid: &str) -> Option<&SigningKeyRecord> {
        self.signing_keys.iter().find(|key| key.kid == kid)
    }

    pub fn apply(&mut self, command: &AuthCommand) -> AuthOutcome {
        match command {
            AuthCommand::CreateClient {
                client_id,
                secret_hash,
                roles,
                created_at_ms,
            } => {
                if let Err(reason) = validate_name("client id", client_id)
                    .and_then(|()| roles.iter().try_for_each(|role| validate_role(role)))
                {
                    return AuthOutcome::Invalid(reason);
                }
                if roles.len() > MAX_ROLES_PER_CLIENT {
                    return AuthOutcome::Invalid(format!(
                        "a client has at most {MAX_ROLES_PER_CLIENT} roles, got {}",
                        roles.len()
                    ));
                }
                if self.clients.contains_key(client_id) {
                    return AuthOutcome::ClientExists;
                }
                if self.clients.len() >= MAX_CLIENTS {
                    return AuthOutcome::Invalid(format!(
                        "the cluster has its maximum of {MAX_CLIENTS} clients"
                    ));
                }
                self.clients.insert(
                    client_id.clone(),
                    ClientRecord {
                        secret_hash: secret_hash.clone(),
                        roles: roles.clone(),
                        created_at_ms: *created_at_ms,
                        secret_rotated_at_ms: *created_at_ms,
                    },
                );
                AuthOutcome::Done
            }
            AuthCommand::RotateClientSecret {
                client_id,
                secret_hash,
                rotated_at_ms,
            } => match self.clients.get_mut(client_id) {
                Some(client) => {
                    client.secret_hash = secret_hash.clone();
                    client.secret_rotated_at_ms = *rotated_at_ms;
                    AuthOutcome::Done
                }
                None => AuthOutcome::ClientNotFound,
            },
            AuthCommand::DeleteClient { client_id } => match self.clients.remove(client_id) {
                Some(_) => AuthOutcome::Done,
                None => AuthOutcome::ClientNotFound,
            },
            AuthCommand::AddSigningKey { key } => {
                if self.signing_key(&key.kid).is_some() {
                    return AuthOutcome::Invalid(format!("signing key {} exists", key.kid));
                }
                if self.signing_keys.len() >= MAX_SIGNING_KEYS {
                    return AuthOutcome::Invalid(format!(
                        "{MAX_SIGNING_KEYS} signing keys are kept at most: drop retired ones first"
                    ));
                }
                for previous in &mut self.signing_keys {
                    previous.retired_at_ms.get_or_insert(key.created_at_ms);
                }
                let mut key = key.clone();
                key.retired_at_ms = None;
                self.signing_keys.push(key);
                AuthOutcome::Done
            }
            AuthCommand::DropSigningKey { kid } => {
                let Some(position) = self.signing_keys.iter().position(|key| &key.kid == kid)
                else {
                    return AuthOutcome::KeyNotFound;
                };
                if self.signing_keys[position].retired_at_ms.is_none() {
                    return AuthOutcome::Invalid(format!(
                        "signing key {kid} is the current one; add a new key first"
                    ));
                }
                self.signing_keys.remove(position);
                AuthOutcome::Done
            }
            AuthCommand::SetPolicy { rules } => {
                if rules.len() > MAX_POLICY_RULES {
                    return AuthOutcome::Invalid(format!(
                        "a policy holds at most {MAX_POLICY_RULES} rules, got {}",
                        rules.len()
                    ));
                }
                if let Err(reason) = rules.iter().try_for_each(|rule| validate_role(&rule.role)) {
                    return AuthOutcome::Invalid(reason);
                }
                let mut rules = rules.clone();
                rules.sort();
                rules.dedup();
                self.policy = Some(rules);
                AuthOutcome::Done
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kid: &str, at: i64) -> SigningKeyRecord {
        SigningKeyRecord {
            kid: kid.into(),
            sealed_private: vec![1],
            public_x: vec![2],
            public_y: vec![3],
            created_at_ms: at,
            retired_at_ms: None,
        }
    }

    #[test]
    fn clients_are_created_rotated_and_deleted_once() {
        let mut state = AuthState::default();
        let create = AuthCommand::CreateClient {
            client_id: "billing".into(),
            secret_hash: "$argon2id$a".into(),
            roles: vec!["producer".into()],
            created_at_ms: 10,
        };
        assert_eq!(state.apply(&create), AuthOutcome::Done);
        assert_eq!(state.apply(&create), AuthOutcome::ClientExists);
        let rotate = AuthCommand::RotateClientSecret {
            client_id: "billing".into(),
            secret_hash: "$argon2id$b".into(),
            rotated_at_ms: 20,
        };
        assert_eq!(state.apply(&rotate), AuthOutcome::Done);
        assert_eq!(state.clients["billing"].secret_hash, "$argon2id$b");
        assert_eq!(state.clients["billing"].created_at_ms, 10);
        let delete = AuthCommand::DeleteClient {
            client_id: "billing".into(),
        };
        assert_eq!(state.apply(&delete), AuthOutcome::Done);
        assert_eq!(state.apply(&delete), AuthOutcome::ClientNotFound);
        let bad = AuthCommand::CreateClient {
            client_id: "no spaces".into(),
            secret_hash: String::new(),
            roles: vec![],
            created_at_ms: 0,
        };
        assert!(matches!(state.apply(&bad), AuthOutcome::Invalid(_)));
    }

    #[test]
    fn a_new_key_retires_the_old_which_validates_until_dropped() {
        let mut state = AuthState::default();
        assert_eq!(
            state.apply(&AuthCommand::AddSigningKey {
                key: key("k1", 100)
            }),
            AuthOutcome::Done
        );
        assert_eq!(state.current_signing_key().unwrap().kid, "k1");
        state.apply(&AuthCommand::AddSigningKey {
            key: key("k2", 200),
        });
        assert_eq!(state.current_signing_key().unwrap().kid, "k2");
        assert_eq!(state.signing_key("k1").unwrap().retired_at_ms, Some(200));
        let drop_current = AuthCommand::DropSigningKey { kid: "k2".into() };
        assert!(matches!(
            state.apply(&drop_current),
            AuthOutcome::Invalid(_)
        ));
        let drop_old = AuthCommand::DropSigningKey { kid: "k1".into() };
        assert_eq!(state.apply(&drop_old), AuthOutcome::Done);
        assert_eq!(state.apply(&drop_old), AuthOutcome::KeyNotFound);
        assert_eq!(state.signing_keys.len(), 1);
    }

    #[test]
    fn policies_are_kept_sorted_without_duplicates() {
        let mut state = AuthState::default();
        assert!(state.policy.is_none());
        let rule = |role: &str, resource: &str| PolicyRule {
            role: role.into(),
            resource: resource.into(),
            action: "produce".into(),
        };
        let command = AuthCommand::SetPolicy {
            rules: vec![
                rule("b", "topic:*"),
                rule("a", "topic:x"),
                rule("b", "topic:*"),
            ],
        };
        assert_eq!(state.apply(&command), AuthOutcome::Done);
        assert_eq!(
            state.policy.as_deref().unwrap(),
            &[rule("a", "topic:x"), rule("b", "topic:*")]
        );
    }
}
