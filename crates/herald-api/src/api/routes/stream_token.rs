//! The token an event stream was opened with: the stream lasts as long as the token is valid,
//! then ends with a `token_expired` event, and the client reconnects with a fresh token (and
//! `Last-Event-ID`, so nothing is missed). It ends so when the token expires, and at once when
//! its client is deleted or its secret rotated (on whichever node).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::sse::Event;

use crate::api::AppState;
use crate::broker::auth::access::{AdmittedToken, TokenEnd, TokenLife};
use crate::broker::auth::tokens::Principal;

/// Who opened a stream and how long their token lasts (forever with authentication off).
pub struct StreamToken {
    life: TokenLife,
    subject: Option<String>,
}

impl FromRequestParts<AppState> for StreamToken {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let principal = parts.extensions.get::<Principal>();
        let token = parts
            .extensions
            .get::<AdmittedToken>()
            .map(|token| token.0.clone());
        Ok(StreamToken {
            life: state.access.token_life(principal, token),
            subject: principal.map(|principal| principal.subject.clone()),
        })
    }
}

impl StreamToken {
    /// The subject of the stream's principal (`None` with authentication off): the owner of the
    /// group member a group stream joins as.
    pub fn subject(&self) -> Option<String> {
        self.subject.clone()
    }

    /// Resolves when the token stops being valid.
    pub async fn ended(&mut self) -> TokenEnd {
        self.life.ended().await
    }
}

/// The last event of a stream whose token stopped being valid.
pub fn token_expired_event(end: &TokenEnd) -> Event {
    let detail = match end {
        TokenEnd::Expired => {
            "the token this stream was opened with expired; reconnect with a new one (and Last-Event-ID)".to_string()
        }
        TokenEnd::Revoked(reason) => format!(
            "the token this stream was opened with is no longer valid ({reason}); reconnect with a valid one (and Last-Event-ID)"
        ),
    };
    let data = serde_json::json!({
        "code": crate::broker::ErrorCode::Unauthorized.as_str(),
        "detail": detail,
    });
    Event::default()
        .event("token_expired")
        .data(data.to_string())
}
