//! Audit log DTOs: `GET /v1/audit`.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::problem::ApiError;
use crate::broker::audit::{AuditEvent, AuditPage, AuditQuery, MAX_AUDIT_LIMIT};

/// The default `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;
/// The longest `principal` filter.
pub const MAX_PRINCIPAL_LEN: usize = 256;

/// The largest `from_offset`: offsets are signed 64-bit integers in the document (and in the
/// SDKs generated from it), so a page's `next_offset` never passes it.
pub const MAX_FROM_OFFSET: u64 = i64::MAX as u64;

/// Query of `GET /v1/audit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQueryParams {
    /// Events at or after this time, in ms since the epoch; default 0 (the oldest kept).
    #[serde(default)]
    #[param(minimum = 0)]
    pub since: Option<i64>,
    /// At most this many events (1 to 1000; default 100). A page may pass it by the events of
    /// its last millisecond.
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Only this principal's events (a token's subject, or `anonymous`).
    #[serde(default)]
    #[param(min_length = 1, max_length = 256)]
    pub principal: Option<String>,
    /// Continue at this position of the log: a page's `next_offset`. Pages continued so hold
    /// exactly up to `limit` events and lose or repeat none, whatever the events' times (the
    /// recording nodes' clocks) say; `since` then only filters.
    #[serde(default)]
    #[param(minimum = 0, maximum = 9223372036854775807_i64)]
    pub from_offset: Option<u64>,
}

impl AuditQueryParams {
    pub fn into_domain(self) -> Result<AuditQuery, ApiError> {
        let since_ms = self.since.unwrap_or(0);
        if since_ms < 0 {
            return Err(ApiError::invalid_request(format!(
                "since must be a time in ms since the epoch (>= 0), got {since_ms}"
            )));
        }
        let limit = self.limit.unwrap_or(DEFAULT_AUDIT_LIMIT);
        if !(1..=MAX_AUDIT_LIMIT).contains(&limit) {
            return Err(ApiError::invalid_request(format!(
                "limit must be between 1 and {MAX_AUDIT_LIMIT}, got {limit}"
            )));
        }
        if let Some(principal) = &self.principal {
            if principal.is_empty() || principal.chars().count() > MAX_PRINCIPAL_LEN {
                return Err(ApiError::invalid_request(format!(
                    "principal must be 1 to {MAX_PRINCIPAL_LEN} characters"
                )));
            }
        }
        if let Some(from_offset) = self.from_offset {
            if from_offset > MAX_FROM_OFFSET {
                return Err(ApiError::invalid_request(format!(
                    "from_offset must be between 0 and {MAX_FROM_OFFSET}, got {from_offset}"
                )));
            }
        }
        Ok(AuditQuery {
            since_ms,
            limit,
            principal: self.principal,
            from_offset: self.from_offset,
        })
    }
}

/// One audited request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = AuditEvent, example = json!({
    "at_ms": 1764662400000_i64,
    "principal": "anonymous",
    "action": "create topic",
    "method": "POST",
    "path": "/v1/topics",
    "resource": "topic:orders",
    "allowed": true,
    "status": 201,
    "remote_addr": "127.0.0.1",
    "request_id": "5f0c6e1d2a9b4c7e8d3f1a2b3c4d5e6f",
    "node_id": 1
}))]
pub struct AuditEventDto {
    /// When the request was answered, in ms since the epoch (the serving node's clock).
    pub at_ms: i64,
    /// The token's subject, or `anonymous`.
    pub principal: String,
    /// The token's roles, when there was a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
    /// What was done (`create topic`, `delete client`, `request token`, or `METHOD route`).
    pub action: String,
    /// The HTTP method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// What it was done to (`topic:orders`, `client:billing`, `node:3`, `topics`).
    pub resource: String,
    /// False for requests refused with 401 or 403.
    pub allowed: bool,
    /// The answer's HTTP status.
    pub status: u16,
    /// The client's IP address (from a trusted proxy's `X-Forwarded-For` when configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: String,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node that served the request.
    pub node_id: u64,
    /// For an event standing for several refusals of unauthenticated requests from one
    /// address (`audit.refusal_window_ms`): how many, answered from `since_ms` to `at_ms`; the
    /// other fields describe the last. Absent: the event is one request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// When the first of the `count` refusals was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
}

/// `GET /v1/audit`: events oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = AuditPage)]
pub struct AuditPageDto {
    pub events: Vec<AuditEventDto>,
    /// The `since` of the next page, from the events' times: only as good as the recording
    /// nodes' clocks. Page with `next_offset`.
    pub next_since: i64,
    /// The `from_offset` of the next page: the position right after the events this page
    /// looked at.
    pub next_offset: u64,
}

impl From<AuditEvent> for AuditEventDto {
    fn from(event: AuditEvent) -> Self {
        AuditEventDto {
            at_ms: event.at_ms,
            principal: event.principal,
            roles: event.roles,
            action: event.action,
            method: event.method,
            path: event.path,
            resource: event.resource,
            allowed: event.allowed,
            status: event.status,
            remote_addr: event.remote_addr,
            request_id: event.request_id,
            reason: event.reason,
            node_id: event.node_id,
            count: event.count,
            since_ms: event.since_ms,
        }
    }
}

impl From<AuditPage> for AuditPageDto {
    fn from(page: AuditPage) -> Self {
        AuditPageDto {
            events: page.events.into_iter().map(Into::into).collect(),
            next_since: page.next_since,
            next_offset: page.next_offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(
        since: Option<i64>,
        limit: Option<usize>,
        principal: Option<&str>,
    ) -> AuditQueryParams {
        AuditQueryParams {
            since,
            limit,
            principal: principal.map(str::to_string),
            from_offset: None,
        }
    }

    #[test]
    fn defaults_and_limits() {
        let query = params(None, None, None).into_domain().expect("valid");
        assert_eq!(
            (query.since_ms, query.limit, query.principal),
            (0, 100, None)
        );
        assert!(params(Some(5), Some(1000), Some("svc"))
            .into_domain()
            .is_ok());
        for bad in [
            params(Some(-1), None, None),
            params(None, Some(0), None),
            params(None, Some(1001), None),
            params(None, None, Some("")),
            params(None, None, Some(&"p".repeat(257))),
        ] {
            assert!(bad.clone().into_domain().is_err(), "{bad:?}");
        }
    }
}
