//! One audit event, as it is stored (JSON) in `__audit`, and the bounds on what it holds: much
//! of it is the requester's text (a path, a token's key id echoed in a refusal's reason), and
//! an anonymous client must not be able to make every node store kilobytes per request.

use serde::{Deserialize, Serialize};

/// The principal of a request without a valid token (or with authentication off).
pub const ANONYMOUS: &str = "anonymous";

/// The most characters of an event's texts (principal, action, path, resource, reason): longer
/// ones are cut and end with `…`.
pub const MAX_TEXT_CHARS: usize = 256;
/// The most characters of an event's short texts (method, address, request id).
pub const MAX_SHORT_TEXT_CHARS: usize = 64;
/// The most roles an event lists.
pub const MAX_ROLES: usize = 16;

/// Who did what, to which resource, when, from where, and whether it was allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When the request was answered, in ms since the epoch (the recording node's clock).
    pub at_ms: i64,
    /// The token's subject, or `anonymous`.
    pub principal: String,
    /// The token's roles, when there was a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
    /// What was done, in a few words (`create topic`, `delete group`, `request token`).
    pub action: String,
    /// The HTTP method.
    pub method: String,
    /// The request's path (without the query).
    pub path: String,
    /// What it was done to (`topic:orders`, `client:billing`, `cluster`).
    pub resource: String,
    /// Whether the request was let through (false for 401 and 403).
    pub allowed: bool,
    /// The answer's HTTP status.
    pub status: u16,
    /// The client's address, as the node saw it (or as a trusted proxy said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<String>,
    /// The request's id (the `x-request-id` header of the answer).
    pub request_id: String,
    /// Why it was refused, for refused requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node that served the request.
    pub node_id: u64,
    /// For an event that stands for several refusals of unauthenticated requests from one
    /// address (`audit.refusal_window_ms`): how many, from `since_ms` to `at_ms`. The other
    /// fields describe the last of them. Absent: the event is one request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// When the first of the `count` refusals was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
}

impl AuditEvent {
    /// The event with every text cut to its bound ([`MAX_TEXT_CHARS`], ...).
    pub fn bounded(mut self) -> AuditEvent {
        for text in [
            &mut self.principal,
            &mut self.action,
            &mut self.path,
            &mut self.resource,
        ] {
            cut(text, MAX_TEXT_CHARS);
        }
        if let Some(reason) = self.reason.as_mut() {
            cut(reason, MAX_TEXT_CHARS);
        }
        for text in [&mut self.method, &mut self.request_id] {
            cut(text, MAX_SHORT_TEXT_CHARS);
        }
        if let Some(address) = self.remote_addr.as_mut() {
            cut(address, MAX_SHORT_TEXT_CHARS);
        }
        if let Some(roles) = self.roles.as_mut() {
            roles.truncate(MAX_ROLES);
            for role in roles {
                cut(role, MAX_SHORT_TEXT_CHARS);
            }
        }
        self
    }

    /// Whether this records a request refused for want of a valid token: the ones anyone can
    /// make, aggregated per address.
    pub fn is_unauthenticated_refusal(&self) -> bool {
        !self.allowed && self.status == 401 && self.principal == ANONYMOUS
    }
}

/// Cuts `text` to at most `max` characters (the last one then `…`), on a character boundary.
fn cut(text: &mut String, max: usize) {
    if let Some((end, _)) = text.char_indices().nth(max.saturating_sub(1)) {
        if text[end..].chars().nth(1).is_some() {
            text.truncate(end);
            text.push('…');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn event(reason: &str) -> AuditEvent {
        AuditEvent {
            at_ms: 1,
            principal: ANONYMOUS.into(),
            roles: None,
            action: "GET /v1/topics".into(),
            method: "GET".into(),
            path: "/v1/topics".into(),
            resource: "topics".into(),
            allowed: false,
            status: 401,
            remote_addr: Some("10.0.0.1".into()),
            request_id: "r".into(),
            reason: Some(reason.into()),
            node_id: 1,
            count: None,
            since_ms: None,
        }
    }

    #[test]
    fn texts_are_cut_to_their_bounds_on_character_boundaries() {
        let mut long = event(&"é".repeat(10_000));
        long.path = format!("/v1/topics/{}", "t".repeat(3_000));
        long.roles = Some(vec!["r".repeat(300); 64]);
        let bounded = long.bounded();
        let reason = bounded.reason.as_deref().unwrap();
        assert_eq!(reason.chars().count(), MAX_TEXT_CHARS);
        assert!(reason.ends_with('…'));
        assert_eq!(bounded.path.chars().count(), MAX_TEXT_CHARS);
        let roles = bounded.roles.as_ref().unwrap();
        assert_eq!(roles.len(), MAX_ROLES);
        assert!(roles
            .iter()
            .all(|role| role.chars().count() == MAX_SHORT_TEXT_CHARS));
        assert!(serde_json::to_string(&bounded).unwrap().len() < 4096);

        // Texts within their bounds are kept as they are.
        let short = event(&"x".repeat(MAX_TEXT_CHARS)).bounded();
        assert_eq!(
            short.reason.as_deref(),
            Some("x".repeat(MAX_TEXT_CHARS).as_str())
        );
        assert_eq!(event("").bounded().reason.as_deref(), Some(""));
    }
}
