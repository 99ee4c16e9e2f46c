//! Access control as the transports ask for it: who a request's token speaks for, and whether
//! they may do an action on a resource. With authentication off everyone may do everything and
//! no principal exists.

use super::policy::{Action, Authorizer};
use super::service::Auth;
use super::tokens::Principal;

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
    pub async fn authorize(
        &self,
        principal: Option<&Principal>,
        action: Action,
        resource: &str,
    ) -> Result<(), Denied> {
        if !self.enabled {
            return Ok(());
        }
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
