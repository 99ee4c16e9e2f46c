//! Access control as the transports ask for it: who a request's token speaks for, and whether
//! they may do an action on a resource. With authentication off everyone may do everything and
//! no principal exists.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::policy::{check_requested, Action, Authorizer};
use super::service::Auth;
use super::tokens::Principal;
use herald_domain::metadata::MetadataState;

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No token was given.
    #[error("this operation needs a bearer token (Authorization: Bearer <token>)")]
    NoToken,
    /// The token is malformed, expired, signed by an unknown key or names a deleted client.
    #[error("the bearer token is not valid: {0}")]
    InvalidToken(String),
    /// The principal's roles lack the right.
    #[error("'{subject}' may not {action} {resource}")]
    Forbidden {
        subject: String,
        action: Action,
        resource: String,
    },
    /// The request names a resource no client may use (a name outside the name alphabet, an
    /// internal topic): bad input, refused before any rule is matched against it.
    #[error("{0}")]
    InvalidResource(String),
}

/// The access checks of a node; cheap to clone.
#[derive(Clone)]
pub struct Access {
    enabled: bool,
    public_metrics: bool,
    auth: Auth,
    authorizer: Authorizer,
}

impl Access {
    pub fn new(enabled: bool, public_metrics: bool, auth: Auth, authorizer: Authorizer) -> Access {
        Access {
            enabled,
            public_metrics,
            auth,
            authorizer,
        }
    }

    /// Whether requests need tokens and rights.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `/metrics` answers without a token.
    pub fn public_metrics(&self) -> bool {
        self.public_metrics
    }

    pub fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }

    /// Who a request's bearer token speaks for; `None` with authentication off. A token of an
    /// external issuer naming a key not fetched yet (the provider rotated) waits for the one
    /// shared, rate-limited refetch rather than being refused.
    pub async fn authenticate(&self, token: Option<&str>) -> Result<Option<Principal>, Denied> {
        if !self.enabled {
            return Ok(None);
        }
        let token = token.ok_or(Denied::NoToken)?;
        self.auth
            .authenticate(token)
            .await
            .map(Some)
            .map_err(|error| Denied::InvalidToken(error.to_string()))
    }

    /// Whether `principal` may do `action` on `resource`; always with authentication off.
    /// The resource's name is checked first ([`check_requested`]): one no client may use is
    /// refused whatever the policy says, before any rule is matched against it. Transports
    /// ask through [`Access::authorize`], by operation.
    pub(super) async fn check(
        &self,
        principal: Option<&Principal>,
        action: Action,
        resource: &str,
    ) -> Result<(), Denied> {
        if !self.enabled {
            return Ok(());
        }
        check_requested(resource).map_err(Denied::InvalidResource)?;
        let Some(principal) = principal else {
            return Err(Denied::NoToken);
        };
        if self.authorizer.allows(principal, action, resource).await {
            Ok(())
        } else {
            Err(Denied::Forbidden {
                subject: principal.subject.clone(),
                action,
                resource: resource.to_string(),
            })
        }
    }
}

/// The bearer token a request was admitted with (in its extensions beside the [`Principal`]):
/// what a connection that outlives the request (a WebSocket, an event stream) checks again
/// when the clients change.
#[derive(Debug, Clone)]
pub struct AdmittedToken(pub Arc<str>);

/// Why a connection's token stopped being valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenEnd {
    /// Its `exp` passed.
    Expired,
    /// Its client was deleted or re-created, its secret rotated, or its key dropped.
    Revoked(String),
}

/// How long a connection's token stays valid: until it expires, or until a change of the
/// replicated metadata on this node (which is how every node learns that a client was deleted
/// or its secret rotated, wherever that was done) makes it invalid. Authentication off (no
/// principal) never ends.
pub struct TokenLife {
    auth: Auth,
    token: Option<Arc<str>>,
    expires_at_ms: Option<i64>,
    changes: Option<watch::Receiver<Arc<MetadataState>>>,
}

impl Access {
    /// The life of the token `principal` was authenticated from (`token`); never ending without
    /// a principal.
    pub fn token_life(&self, principal: Option<&Principal>, token: Option<Arc<str>>) -> TokenLife {
        let expires_at_ms = principal.map(|principal| principal.expires_at_ms);
        let watched = expires_at_ms.is_some() && token.is_some();
        TokenLife {
            auth: self.auth.clone(),
            changes: watched.then(|| self.auth.credential_changes()),
            token,
            expires_at_ms,
        }
    }
}

impl TokenLife {
    /// Resolves when the token stops being valid. Cancel-safe: a connection selects on it
    /// beside its other work, again and again.
    pub async fn ended(&mut self) -> TokenEnd {
        let Some(expires_at_ms) = self.expires_at_ms else {
            return std::future::pending().await;
        };
        loop {
            let left = Duration::from_millis(expires_at_ms.saturating_sub(now_ms()).max(0) as u64);
            let changed = async {
                match self.changes.as_mut() {
                    Some(changes) => {
                        if changes.changed().await.is_err() {
                            // The node is shutting down; the connection ends with it.
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep(left) => return TokenEnd::Expired,
                () = changed => {
                    if let Some(token) = &self.token {
                        if let Err(error) = self.auth.validate(token) {
                            return TokenEnd::Revoked(error.to_string());
                        }
                    }
                }
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
