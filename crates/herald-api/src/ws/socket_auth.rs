//! Who a socket speaks for and what each of its frames may do: the handshake's principal
//! (renewed by `auth` frames), checked per operation through the same
//! [`Access::authorize`](crate::broker::auth::access::Access) as the HTTP API, with refusals
//! recorded in the audit log as the HTTP API's are.

use super::frames::{AuthFrame, ClientFrame, ServerFrame};
use crate::api::problem::ApiError;
use crate::broker::audit::event::ANONYMOUS;
use crate::broker::audit::{AuditEvent, AuditLog};
use crate::broker::auth::access::{Access, TokenLife};
use crate::broker::auth::operation::Operation;
use crate::broker::auth::tokens::Principal;
use crate::broker::ErrorCode;

/// Who a socket speaks for: the handshake's principal, replaced by `auth` frames. With
/// authentication off there is none and every op is allowed.
pub struct SocketAuth {
    pub access: Access,
    pub principal: Option<Principal>,
    /// How long the principal's token stays valid: the socket closes with 4001 when it expires,
    /// or as soon as its client is deleted or its secret rotated (on any node).
    pub life: TokenLife,
    /// Where refused operations are recorded, with the handshake's request id and address.
    pub audit: SocketAudit,
}

/// What an audit event of a refused WebSocket operation says besides the refusal.
pub struct SocketAudit {
    pub log: AuditLog,
    pub remote_addr: Option<String>,
    pub request_id: String,
}

impl SocketAuth {
    /// Refuses an op the principal has no right to, as a 403 problem (400 for a name no rule
    /// can match). A 403 is audited like a 403 answer, without holding the frame up.
    pub async fn authorize(&self, operation: &Operation<'_>) -> Result<(), ApiError> {
        let Err(refused) = self
            .access
            .authorize(self.principal.as_ref(), operation)
            .await
        else {
            return Ok(());
        };
        let error = crate::api::middleware::access::denial(&refused.denied);
        if error.code == ErrorCode::Forbidden {
            self.refused(
                &format!("websocket {}", refused.action.as_str()),
                &refused.resource,
                403,
                &error.detail,
            );
        }
        Err(error)
    }

    /// `auth`: takes a fresh token for the same client; a bad one is refused and the socket
    /// keeps its current token (and closes when that expires). Answers the frame to send.
    pub async fn renew(&mut self, frame: AuthFrame) -> ServerFrame {
        let id = frame.id.clone();
        let refuse = |code: ErrorCode, detail: String| {
            ServerFrame::error(id.clone().map(Into::into), &ApiError::new(code, detail))
        };
        match self.access.authenticate(Some(&frame.token)).await {
            Ok(Some(principal)) => {
                if let Some(current) = &self.principal {
                    if current.subject != principal.subject {
                        let detail = format!(
                            "the socket belongs to '{}'; an auth frame renews its token, it does not change who it is",
                            current.subject
                        );
                        let resource = format!("client:{}", principal.subject);
                        self.refused("websocket auth", &resource, 403, &detail);
                        return refuse(ErrorCode::Forbidden, detail);
                    }
                }
                let answer = ServerFrame::Authenticated {
                    id,
                    subject: Some(principal.subject.clone()),
                    expires_at_ms: Some(principal.expires_at_ms),
                };
                self.life = self
                    .access
                    .token_life(Some(&principal), Some(frame.token.as_str().into()));
                self.principal = Some(principal);
                answer
            }
            Ok(None) => ServerFrame::Authenticated {
                id,
                subject: None,
                expires_at_ms: None,
            },
            Err(denied) => {
                let detail = denied.to_string();
                let resource = match &self.principal {
                    Some(principal) => format!("client:{}", principal.subject),
                    None => "client".to_string(),
                };
                self.refused("websocket auth", &resource, 401, &detail);
                refuse(ErrorCode::Unauthorized, detail)
            }
        }
    }

    /// Records a refused operation of the socket in the audit log.
    fn refused(&self, action: &str, resource: &str, status: u16, reason: &str) {
        let (principal, roles) = match &self.principal {
            Some(principal) => (principal.subject.clone(), Some(principal.roles.clone())),
            None => (ANONYMOUS.to_string(), None),
        };
        self.audit.log.record(AuditEvent {
            at_ms: now_ms(),
            principal,
            roles,
            action: action.to_string(),
            method: "WS".into(),
            path: "/v1/ws".into(),
            resource: resource.to_string(),
            allowed: false,
            status,
            remote_addr: self.audit.remote_addr.clone(),
            request_id: self.audit.request_id.clone(),
            reason: Some(truncate_at(reason.to_string(), MAX_AUDIT_REASON_BYTES)),
            node_id: 0,
            count: None,
            since_ms: None,
        });
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// The operation a frame asks for, with the frame's id. Frames on a running subscription
/// (credit, commit, ack, ...) were covered when it was subscribed.
pub fn frame_operation(frame: &ClientFrame) -> Option<(&str, Operation<'_>)> {
    match frame {
        ClientFrame::Publish(publish) => Some((
            &publish.id,
            Operation::Produce {
                topic: &publish.topic,
            },
        )),
        ClientFrame::Subscribe(subscribe) => Some((
            &subscribe.id,
            Operation::ReadTopic {
                topic: &subscribe.topic,
            },
        )),
        ClientFrame::GroupSubscribe(subscribe) => Some((
            &subscribe.id,
            Operation::JoinGroup {
                group: &subscribe.group,
                topics: &subscribe.topics,
            },
        )),
        ClientFrame::QueueSubscribe(subscribe) => Some((
            &subscribe.id,
            Operation::Lease {
                subscription: &subscribe.subscription,
            },
        )),
        _ => None,
    }
}

/// The most bytes of a refusal's reason an audit event of the socket keeps: a refused token's
/// reason can quote what the client sent.
const MAX_AUDIT_REASON_BYTES: usize = 512;

pub fn truncate_at(mut text: String, max_bytes: usize) -> String {
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}
