//! What the transports call for authentication: managing clients (their secrets are shown once,
//! at creation and at rotation), issuing tokens for client credentials, validating tokens, and
//! the public keys for a JWKS. Clients and keys change through the metadata group, so every node
//! issues and validates alike.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::external::{ExternalIssuers, ExternalTokenError};
use super::failed_requests::{FailedRequests, FailureBudgets};
use super::keys::{generate_signing_key, Jwk, Signer};
use super::policy::validate_rules;
use super::sealing::SealingKey;
use super::secret_checks::{CheckError, SecretChecks};
use super::secrets::generate_secret;
use super::tokens::{self, Principal, TokenSettings};
use super::verified::{VerifiedTokens, MAX_VERIFIED_TOKENS};
use crate::broker_core::Core;
use crate::{Broker, BrokerError, BrokerResult, ErrorCode};
use herald_domain::auth::{AuthCommand, AuthOutcome, ClientRecord, PolicyRule, SigningKeyRecord};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};

/// A client as listed: never its secret or hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub roles: Vec<String>,
    pub created_at_ms: i64,
    pub secret_rotated_at_ms: i64,
}

impl ClientInfo {
    fn of(client_id: &str, record: &ClientRecord) -> ClientInfo {
        ClientInfo {
            client_id: client_id.to_string(),
            roles: record.roles.clone(),
            created_at_ms: record.created_at_ms,
            secret_rotated_at_ms: record.secret_rotated_at_ms,
        }
    }
}

/// A token answered to a client-credentials grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub access_token: String,
    pub expires_in_s: u64,
}

/// Why client credentials were refused; the token endpoint answers these in RFC 6749's terms.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// Unknown client or wrong secret (the same answer for both, so ids cannot be probed).
    #[error("the client id or secret is wrong")]
    InvalidClient,
    /// A renewal's token is not one this cluster would renew (expired, its client gone, its
    /// session too old or begun before the secret's rotation).
    #[error("{0}")]
    InvalidGrant(String),
    /// `[auth] builtin_issuer_enabled = false`: tokens come from an external issuer.
    #[error("the built-in issuer is disabled")]
    IssuerDisabled,
    /// Every secret check is taken: nothing was checked, retry in a moment.
    #[error("the node is checking as many secrets as it can; retry in a moment")]
    Busy,
    /// The client id or the address failed too often lately: nothing was checked.
    #[error("too many failed token requests for this client or from this address; retry in {} s", .retry_after.as_secs())]
    TooManyFailures { retry_after: Duration },
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

fn client_not_found(client_id: &str) -> BrokerError {
    BrokerError::NotFound {
        code: ErrorCode::ClientNotFound,
        message: format!("no OAuth2 client '{client_id}'"),
    }
}

/// What the authentication service is made of besides the broker.
pub struct AuthSetup {
    /// What issued tokens say and how long they last.
    pub settings: Arc<TokenSettings>,
    /// The key signing keys are sealed under (from the cluster secret).
    pub sealing: Arc<SealingKey>,
    /// Where client secrets are checked and hashed, a few at a time.
    pub secret_checks: SecretChecks,
    /// Failed token requests allowed per client id and per address.
    pub failure_budgets: FailureBudgets,
}

/// The authentication service of a broker. Make one per node and clone it: its clones share
/// the secret check threads, the failure limits and the opened signing key.
#[derive(Clone)]
pub struct Auth {
    core: Arc<Core>,
    settings: Arc<TokenSettings>,
    external: ExternalIssuers,
    /// Built-in tokens whose signature was checked (shared by the clones of this service).
    verified: Arc<VerifiedTokens<tokens::VerifiedToken>>,
    sealing: Arc<SealingKey>,
    /// The current signing key, opened: unsealed once, not per token.
    signer: Arc<Mutex<Option<Arc<Signer>>>>,
    secret_checks: SecretChecks,
    failures: Arc<FailedRequests>,
}

impl Broker {
    /// The authentication service.
    pub fn auth(&self, setup: AuthSetup) -> Auth {
        Auth {
            core: self.inner.core.clone(),
            settings: setup.settings,
            external: ExternalIssuers::default(),
            verified: Arc::new(VerifiedTokens::new(MAX_VERIFIED_TOKENS)),
            sealing: setup.sealing,
            signer: Arc::new(Mutex::new(None)),
            secret_checks: setup.secret_checks,
            failures: Arc::new(FailedRequests::new(setup.failure_budgets)),
        }
    }
}

fn hash_failed(error: CheckError) -> BrokerError {
    BrokerError::Internal(format!("hashing a new secret failed: {error}"))
}

impl Auth {
    pub fn settings(&self) -> &TokenSettings {
        &self.settings
    }

    /// Also accepts the tokens of these external issuers.
    pub fn with_external_issuers(mut self, external: ExternalIssuers) -> Auth {
        self.external = external;
        self
    }

    pub fn external_issuers(&self) -> &ExternalIssuers {
        &self.external
    }

    /// Creates a client; answers it with its secret, which is not kept and cannot be shown
    /// again.
    pub async fn create_client(
        &self,
        client_id: &str,
        roles: Vec<String>,
    ) -> BrokerResult<(ClientInfo, String)> {
        let secret = generate_secret().map_err(|error| BrokerError::Internal(error.to_string()))?;
        let secret_hash = self
            .secret_checks
            .hash(&secret)
            .await
            .map_err(hash_failed)?;
        let created_at_ms = now_ms();
        let outcome = self
            .propose(AuthCommand::CreateClient {
                client_id: client_id.to_string(),
                secret_hash,
                roles: roles.clone(),
                created_at_ms,
            })
            .await?;
        match outcome {
            AuthOutcome::Done => Ok((
                ClientInfo {
                    client_id: client_id.to_string(),
                    roles,
                    created_at_ms,
                    secret_rotated_at_ms: created_at_ms,
                },
                secret,
            )),
            AuthOutcome::ClientExists => Err(BrokerError::Conflict {
                code: ErrorCode::ClientExists,
                message: format!(
                    "an OAuth2 client '{client_id}' exists; rotate its secret instead"
                ),
            }),
            other => Err(refusal(client_id, other)),
        }
    }

    /// Gives a client a new secret; the old one stops working at once, and so do the tokens
    /// issued with it (and what they opened: sockets, event streams).
    pub async fn rotate_client_secret(
        &self,
        client_id: &str,
    ) -> BrokerResult<(ClientInfo, String)> {
        let secret = generate_secret().map_err(|error| BrokerError::Internal(error.to_string()))?;
        let secret_hash = self
            .secret_checks
            .hash(&secret)
            .await
            .map_err(hash_failed)?;
        let outcome = self
            .propose(AuthCommand::RotateClientSecret {
                client_id: client_id.to_string(),
                secret_hash,
                rotated_at_ms: now_ms(),
            })
            .await?;
        match outcome {
            AuthOutcome::Done => {
                let client = self.client(client_id)?;
                Ok((client, secret))
            }
            other => Err(refusal(client_id, other)),
        }
    }

    pub async fn delete_client(&self, client_id: &str) -> BrokerResult<()> {
        match self
            .propose(AuthCommand::DeleteClient {
                client_id: client_id.to_string(),
            })
            .await?
        {
            AuthOutcome::Done => Ok(()),
            other => Err(refusal(client_id, other)),
        }
    }

    pub fn client(&self, client_id: &str) -> BrokerResult<ClientInfo> {
        let metadata = self.core.cluster().metadata().current();
        metadata
            .auth
            .clients
            .get(client_id)
            .map(|record| ClientInfo::of(client_id, record))
            .ok_or_else(|| client_not_found(client_id))
    }

    pub fn clients(&self) -> Vec<ClientInfo> {
        let metadata = self.core.cluster().metadata().current();
        metadata
            .auth
            .clients
            .iter()
            .map(|(client_id, record)| ClientInfo::of(client_id, record))
            .collect()
    }

    /// The client-credentials grant: a token for a client whose secret matches, asked from
    /// `address`. Refused before any secret is checked when the client id or the address
    /// failed too often lately, or when every secret check is taken.
    pub async fn issue_token(
        &self,
        client_id: &str,
        secret: &str,
        address: Option<IpAddr>,
    ) -> Result<IssuedToken, GrantError> {
        if !self.settings.builtin_enabled {
            return Err(GrantError::IssuerDisabled);
        }
        if let Err(retry_after) = self.failures.admit(client_id, address) {
            return Err(GrantError::TooManyFailures { retry_after });
        }
        let client = {
            let metadata = self.core.cluster().metadata().current();
            metadata.auth.clients.get(client_id).cloned()
        };
        // An unknown client costs a verification too, so timing does not tell ids apart.
        let hash = client.as_ref().map_or_else(
            || UNKNOWN_CLIENT_HASH.to_string(),
            |client| client.secret_hash.clone(),
        );
        let verified = match self.secret_checks.verify(secret, &hash).await {
            Ok(matches) => matches,
            Err(CheckError::Busy) => return Err(GrantError::Busy),
            Err(error) => return Err(BrokerError::Internal(error.to_string()).into()),
        };
        let Some(client) = client.filter(|_| verified) else {
            self.failures.failed(client_id, address);
            return Err(GrantError::InvalidClient);
        };
        let key = self.signer().await?;
        // Bound to the secret just verified: should it be rotated meanwhile, the token is
        // refused like every other one issued with the old secret.
        let cred = tokens::credential_id(&client);
        let (access_token, expires_in_s) =
            tokens::issue(&key, &self.settings, client_id, &cred, now_ms(), None)
                .map_err(|error| BrokerError::Internal(error.to_string()))?;
        Ok(IssuedToken {
            access_token,
            expires_in_s,
        })
    }

    /// The token-exchange grant: a successor for a valid token of the built-in issuer, for the
    /// same client and the same session (so the web console stays signed in holding a token,
    /// never a secret), until `max_session` after the client presented its secret.
    pub async fn renew_token(&self, token: &str) -> Result<IssuedToken, GrantError> {
        if !self.settings.builtin_enabled {
            return Err(GrantError::IssuerDisabled);
        }
        let renewal = {
            let metadata = self.core.cluster().metadata().current();
            tokens::renewal(token, &metadata.auth, &self.settings)
                .map_err(|error| GrantError::InvalidGrant(error.to_string()))?
        };
        let key = self.signer().await?;
        let (access_token, expires_in_s) = tokens::issue(
            &key,
            &self.settings,
            &renewal.subject,
            &renewal.cred,
            now_ms(),
            Some(renewal.auth_time_s),
        )
        .map_err(|error| BrokerError::Internal(error.to_string()))?;
        Ok(IssuedToken {
            access_token,
            expires_in_s,
        })
    }

    /// Who a token speaks for, if it is valid, without waiting: the built-in issuer's tokens,
    /// and external ones whose key is cached. An external token naming a key not known yet is
    /// refused, and starts a (rate-limited) refetch so the key is known soon; prefer
    /// [`Auth::authenticate`], which waits for that refetch.
    pub fn validate(&self, token: &str) -> Result<Principal, tokens::TokenError> {
        match self.issuer_of(token)? {
            Some(issuer) => match issuer.validate_cached(token) {
                Err(ExternalTokenError::UnknownKey(kid)) => {
                    issuer.refetch_in_background(kid.clone());
                    Err(ExternalTokenError::UnknownKey(kid).into())
                }
                result => Ok(result?),
            },
            None => self.validate_builtin(token),
        }
    }

    /// Who a token speaks for, if it is valid: what transports call. The same as
    /// [`Auth::validate`], except that an external token naming a key not known yet waits for
    /// one refetch of its issuer's keys (shared with concurrent callers, at most one per
    /// `jwks_min_refetch_interval_ms`), so a provider's key rotation costs no refusal.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, tokens::TokenError> {
        match self.issuer_of(token)? {
            Some(issuer) => issuer.validate(token).await,
            None => self.validate_builtin(token),
        }
    }

    /// The external issuer a token claims to be from, or None for the built-in issuer.
    fn issuer_of(
        &self,
        token: &str,
    ) -> Result<Option<&Arc<super::external::ExternalIssuer>>, tokens::TokenError> {
        self.external.route(token, &self.settings.issuer)
    }

    fn validate_builtin(&self, token: &str) -> Result<Principal, tokens::TokenError> {
        if !self.settings.builtin_enabled {
            return Err(tokens::TokenError::Invalid(
                "the built-in issuer is disabled; use a token of an external issuer".into(),
            ));
        }
        let metadata = self.core.cluster().metadata().current();
        tokens::validate_cached(token, &metadata.auth, &self.settings, &self.verified)
    }

    /// Every metadata state this node applies from now on: clients, secrets and keys change
    /// with it (on every node, wherever the change was made).
    pub fn credential_changes(
        &self,
    ) -> tokio::sync::watch::Receiver<Arc<herald_domain::metadata::MetadataState>> {
        self.core.cluster().metadata().changes()
    }

    /// Replaces the authorization policy on every node (`PUT /v1/auth/policies`).
    pub async fn set_policy(&self, rules: Vec<PolicyRule>) -> BrokerResult<()> {
        validate_rules(&rules).map_err(BrokerError::InvalidRequest)?;
        match self.propose(AuthCommand::SetPolicy { rules }).await? {
            AuthOutcome::Done => Ok(()),
            other => Err(refusal("the policy", other)),
        }
    }

    /// Every key that validates tokens, for `/oauth/jwks.json`.
    pub fn jwks(&self) -> Vec<Jwk> {
        let metadata = self.core.cluster().metadata().current();
        metadata.auth.signing_keys.iter().map(Jwk::of).collect()
    }

    /// Starts signing with a new key; the previous one validates its tokens until it is
    /// dropped.
    pub async fn rotate_signing_key(&self) -> BrokerResult<SigningKeyRecord> {
        let key = generate_signing_key(now_ms(), &self.sealing)
            .map_err(|error| BrokerError::Internal(error.to_string()))?;
        match self
            .propose(AuthCommand::AddSigningKey { key: key.clone() })
            .await?
        {
            AuthOutcome::Done => Ok(key),
            other => Err(refusal(&key.kid, other)),
        }
    }

    /// The key signing now, opened; opened again only when the current key changes.
    async fn signer(&self) -> BrokerResult<Arc<Signer>> {
        let key = self.current_signing_key().await?;
        if let Some(signer) = self.signer.lock().as_ref() {
            if signer.kid == key.kid {
                return Ok(signer.clone());
            }
        }
        let signer = Arc::new(Signer::open(&key, &self.sealing).map_err(|error| {
            tracing::error!(%error, "the current signing key cannot be opened: no token can be issued");
            BrokerError::Internal(error.to_string())
        })?);
        *self.signer.lock() = Some(signer.clone());
        Ok(signer)
    }

    /// The key signing now; the cluster's first token creates it.
    async fn current_signing_key(&self) -> BrokerResult<SigningKeyRecord> {
        if let Some(key) = self
            .core
            .cluster()
            .metadata()
            .current()
            .auth
            .current_signing_key()
        {
            return Ok(key.clone());
        }
        let key = self.rotate_signing_key().await?;
        // Two nodes may have raced to create the first key: sign with whichever won.
        Ok(self
            .core
            .cluster()
            .metadata()
            .current()
            .auth
            .current_signing_key()
            .cloned()
            .unwrap_or(key))
    }

    async fn propose(&self, command: AuthCommand) -> BrokerResult<AuthOutcome> {
        match self
            .core
            .cluster()
            .metadata()
            .propose(MetadataCommand::Auth(command))
            .await?
        {
            MetadataOutcome::Auth(outcome) => Ok(outcome),
            other => Err(BrokerError::Internal(format!(
                "unexpected answer to an auth command: {other:?}"
            ))),
        }
    }
}

/// A well-formed hash of no secret anyone has, verified against for unknown client ids.
const UNKNOWN_CLIENT_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn refusal(name: &str, outcome: AuthOutcome) -> BrokerError {
    match outcome {
        AuthOutcome::ClientNotFound => client_not_found(name),
        AuthOutcome::Invalid(message) => BrokerError::InvalidRequest(message),
        other => BrokerError::Internal(format!("unexpected auth outcome for '{name}': {other:?}")),
    }
}
