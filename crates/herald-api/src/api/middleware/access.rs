//! The authentication and authorization middleware: with `[auth] enabled`, every route but the
//! public ones needs `Authorization: Bearer <token>` (401 `unauthorized` otherwise) and the
//! right `api::middleware::rights` names for it (403 `forbidden`). The principal goes into the request's
//! extensions for the handler and the layers inside, and into the response's for the layers
//! outside (the audit log).
//!
//! It runs in the route guard, so the matched path template and its parameters are known.

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::api::middleware::rights::{self, Requirement};
use crate::api::problem::ApiError;
use crate::broker::auth::access::{Access, AdmittedToken, Denied};
use crate::broker::auth::operation::Operation;
use crate::broker::auth::policy::Action;
use crate::broker::auth::tokens::Principal;
use crate::broker::ErrorCode;

/// The bearer token of a request: the `Authorization` header, or `?access_token=` where
/// browsers cannot set headers (`allow_query`).
pub fn bearer_token(
    headers: &axum::http::HeaderMap,
    query: Option<&str>,
    allow_query: bool,
) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_string());
    }
    if !allow_query {
        return None;
    }
    form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == "access_token")
        .map(|(_, value)| value.into_owned())
}

/// The problem of a refusal: 403, 401, or 400 for a name no client may use.
pub fn denial(denied: &Denied) -> ApiError {
    match denied {
        Denied::Forbidden { .. } => ApiError::new(ErrorCode::Forbidden, denied.to_string()),
        Denied::InvalidResource(reason) => ApiError::invalid_request(reason.clone()),
        Denied::NoToken | Denied::InvalidToken(_) => {
            ApiError::new(ErrorCode::Unauthorized, denied.to_string())
        }
    }
}

/// The answer to a refused request: 401 with `WWW-Authenticate`, 403, or 400.
pub fn refusal(denied: &Denied) -> Response {
    match denied {
        Denied::Forbidden { .. } | Denied::InvalidResource(_) => denial(denied).into_response(),
        Denied::NoToken | Denied::InvalidToken(_) => {
            let mut response =
                ApiError::new(ErrorCode::Unauthorized, denied.to_string()).into_response();
            let challenge = match denied {
                Denied::NoToken => r#"Bearer realm="herald""#,
                _ => r#"Bearer realm="herald", error="invalid_token""#,
            };
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
            response
        }
    }
}

/// Authenticates a request and checks its rights for its route (the route guard calls it,
/// so the matched path is known). Answers the request, with the principal in its extensions,
/// and the principal (none with authentication off or on a public route); or the refusal.
pub async fn admit(
    access: &Access,
    request: Request,
) -> Result<(Request, Option<Principal>), Response> {
    if !access.enabled() {
        return Ok((request, None));
    }
    let (mut parts, body) = request.into_parts();
    let path = parts
        .extensions
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_string())
        .unwrap_or_else(|| parts.uri.path().to_string());
    let Some(requirement) = rights::requirement(&parts.method, &path) else {
        tracing::error!(method = %parts.method, %path, "a route has no entry in api::middleware::rights: refused");
        return Err(
            ApiError::new(ErrorCode::Forbidden, "this route grants no rights").into_response(),
        );
    };
    match requirement {
        Requirement::Public => return Ok((Request::from_parts(parts, body), None)),
        Requirement::Metrics if access.public_metrics() => {
            return Ok((Request::from_parts(parts, body), None))
        }
        _ => {}
    }
    let token = bearer_token(
        &parts.headers,
        parts.uri.query(),
        rights::takes_query_token(&parts.method, &path),
    );
    let principal = match access.authenticate(token.as_deref()).await {
        Ok(Some(principal)) => principal,
        Ok(None) => return Ok((Request::from_parts(parts, body), None)),
        Err(denied) => return Err(refusal(&denied)),
    };
    if let Some(token) = token {
        // Kept by what outlives the request (sockets, streams) to check it again later.
        parts.extensions.insert(AdmittedToken(token.into()));
    }
    // Only a right on a resource names its path's parameters (`topic:{topic}`); routes any
    // valid token may use, and /metrics, are not read for them.
    let params = match requirement {
        Requirement::Right(..) => RawPathParams::from_request_parts(&mut parts, &())
            .await
            .ok(),
        _ => None,
    };
    let pairs: Vec<(&str, &str)> = params.iter().flat_map(|params| params.iter()).collect();
    let stream_topics = match requirement {
        Requirement::Right(..) => rights::group_stream_topics(&path, parts.uri.query()),
        _ => None,
    };
    let operation = match route_operation(requirement, &path, &pairs, stream_topics.as_deref()) {
        Ok(operation) => operation,
        Err(error) => return Err(error.into_response()),
    };
    if let Some(operation) = operation {
        if let Err(refused) = access.authorize(Some(&principal), &operation).await {
            return Err(with_principal(refusal(&refused.denied), principal));
        }
    }
    parts.extensions.insert(principal.clone());
    Ok((Request::from_parts(parts, body), Some(principal)))
}

/// The operation a request on a route is, for its rights (`None`: any valid token will do).
/// A group's event stream joins the group for the topics its query names.
fn route_operation<'a>(
    requirement: Requirement,
    path: &str,
    params: &[(&'a str, &'a str)],
    stream_topics: Option<&'a [String]>,
) -> Result<Option<Operation<'a>>, ApiError> {
    Ok(Some(match requirement {
        Requirement::Right(action, template) => {
            let Some(resource) = rights::resource(template, params.iter().copied()) else {
                return Err(ApiError::internal(format!(
                    "route {path} lacks a parameter of {template}"
                )));
            };
            let group = params.iter().find(|(key, _)| *key == "group");
            match (stream_topics, group) {
                (Some(topics), Some((_, group))) => Operation::JoinGroup { group, topics },
                _ => Operation::Route { action, resource },
            }
        }
        Requirement::Metrics => Operation::Route {
            action: Action::View,
            resource: "cluster:metrics".to_string(),
        },
        Requirement::Authenticated | Requirement::Public => return Ok(None),
    }))
}

/// `response` with the principal it was answered to, for the audit log outside.
pub(crate) fn with_principal(mut response: Response, principal: Principal) -> Response {
    response.extensions_mut().insert(principal);
    response
}

impl axum::extract::FromRef<crate::api::AppState> for Access {
    fn from_ref(state: &crate::api::AppState) -> Self {
        state.access.clone()
    }
}

/// A handler's view of who calls it, for the resources a request names in its body (the
/// topics a group member joins for, the topic a subscription reads), which the route guard
/// cannot see.
pub struct Caller {
    access: Access,
    principal: Option<Principal>,
}

impl FromRequestParts<crate::api::AppState> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &crate::api::AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Caller {
            access: state.access.clone(),
            principal: parts.extensions.get::<Principal>().cloned(),
        })
    }
}

impl Caller {
    /// Refuses (403) unless the caller may do `operation`; allows all with authentication
    /// off.
    pub async fn authorize(&self, operation: &Operation<'_>) -> Result<(), ApiError> {
        self.access
            .authorize(self.principal.as_ref(), operation)
            .await
            .map_err(|refused| denial(&refused.denied))
    }

    /// The caller's subject: `None` with authentication off.
    pub fn subject(&self) -> Option<String> {
        self.principal
            .as_ref()
            .map(|principal| principal.subject.clone())
    }

    /// Refuses (403) unless `member_id` of `group` is the caller's: the principal that joined
    /// it. With `reads`, also unless the caller may still consume every topic the member joined
    /// for (a poll or a commit checks the rights as they are now, not as they were at the
    /// join). Allows all with authentication off; an unknown member is `unknown_member`.
    pub async fn require_member(
        &self,
        broker: &crate::broker::Broker,
        group: &str,
        member_id: &str,
        reads: bool,
    ) -> Result<(), ApiError> {
        if !self.access.enabled() {
            return Ok(());
        }
        let member = broker.groups().group_member(group, member_id).await?;
        let caller = self.principal.as_ref().map(|principal| &principal.subject);
        if member.owner.as_ref() != caller || caller.is_none() {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "member '{member_id}' of group '{group}' belongs to the principal that joined it; join the group to get a member of your own"
                ),
            ));
        }
        if reads {
            self.authorize(&Operation::ReadAsMember {
                topics: &member.topics,
            })
            .await?;
        }
        Ok(())
    }
}
