//! One audit event, as it is stored (JSON) in `__audit`.

use serde::{Deserialize, Serialize};

/// The principal of a request without a valid token (or with authentication off).
pub const ANONYMOUS: &str = "anonymous";

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
}
