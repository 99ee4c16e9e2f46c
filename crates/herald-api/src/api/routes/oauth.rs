//! The built-in OAuth2 issuer: `POST /oauth/token` (RFC 6749 client credentials), its keys at
//! `/oauth/jwks.json` and `/.well-known/openid-configuration`, so any OAuth2/OIDC library can
//! use a Herald cluster as its issuer.
//!
//! The token endpoint answers in RFC 6749's terms (`{"error","error_description"}`), not
//! problem+json: that is what OAuth2 clients parse.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::auth::{
    JwkSet, OAuthError, OpenIdConfiguration, TokenRequestForm, TokenResponse,
};
use crate::api::extract::{ApiBytes, ContentType};
use crate::api::middleware::audit_layer::Auditing;
use crate::api::middleware::client_address::client_address;
use crate::api::AppState;
use crate::broker::auth::service::{Auth, GrantError, IssuedToken};

pub const TOKEN_PATH: &str = "/oauth/token";
pub const JWKS_PATH: &str = "/oauth/jwks.json";

/// The refusal of every token request with `[auth] builtin_issuer_enabled = false`.
const ISSUER_DISABLED: &str =
    "this cluster's built-in issuer is disabled: get a token from its external OIDC issuer";

/// The token request's parameters; others are ignored.
const FORM_PARAMETERS: [&str; 7] = [
    "grant_type",
    "client_id",
    "client_secret",
    "scope",
    "subject_token",
    "subject_token_type",
    "requested_token_type",
];

/// RFC 8693 token exchange: a valid token for its successor (a renewal).
pub const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 § 3: the type of an access token, the only kind exchanged and issued.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(token))
        .routes(routes!(jwks))
        .routes(routes!(openid_configuration))
}

fn oauth_error(
    status: StatusCode,
    error: &'static str,
    description: impl Into<String>,
) -> Response {
    let mut response = (
        status,
        Json(OAuthError {
            error,
            error_description: description.into(),
        }),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"herald\""),
        );
    }
    response
}

/// A refusal of the token endpoint, answered with [`oauth_error`].
struct Refusal {
    status: StatusCode,
    error: &'static str,
    description: &'static str,
}

impl Refusal {
    fn into_response(self) -> Response {
        oauth_error(self.status, self.error, self.description)
    }
}

/// Client credentials from HTTP Basic (RFC 6749 § 2.3.1: each part form-urlencoded) or from the
/// form; both at once is refused.
fn credentials(
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<(String, String), Refusal> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .map(|encoded| {
            let decoded = STANDARD
                .decode(encoded.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok());
            let pair = decoded.as_deref().and_then(|text| text.split_once(':'));
            pair.and_then(|(id, secret)| {
                let decode = |part: &str| {
                    form_urlencoded::parse(format!("x={part}").as_bytes())
                        .next()
                        .map(|(_, value)| value.into_owned())
                };
                Some((decode(id)?, decode(secret)?))
            })
        });
    let in_form = (form.get("client_id"), form.get("client_secret"));
    match (basic, in_form) {
        (Some(_), (Some(_), _)) | (Some(_), (_, Some(_))) => Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            error: "invalid_request",
            description: "send the client credentials either with HTTP Basic or in the form, not both",
        }),
        (Some(Some(pair)), _) => Ok(pair),
        (Some(None), _) => Err(Refusal {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: "the Basic authorization header is malformed",
        }),
        (None, (Some(id), Some(secret))) => Ok((id.clone(), secret.clone())),
        (None, _) => Err(Refusal {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: "client authentication is required: HTTP Basic, or client_id and client_secret in the form",
        }),
    }
}

/// Get an access token (OAuth2 client credentials), or renew one (token exchange).
///
/// RFC 6749 § 4.4: `grant_type=client_credentials`, the client authenticated with HTTP Basic or
/// `client_id` and `client_secret` in the form. Answers a Bearer token (an ES256 JWT) and how
/// many seconds it lasts.
///
/// RFC 8693: `grant_type=urn:ietf:params:oauth:grant-type:token-exchange` with a valid token of
/// this cluster as `subject_token` (`subject_token_type=urn:ietf:params:oauth:token-type:access_token`)
/// answers its successor, for the same client, without the secret: how a holder of a token
/// (the web console) stays signed in. A session is renewed until `[auth] max_session_ms` after
/// the secret was presented, and ends when the client is deleted or its secret rotated.
#[utoipa::path(
    post,
    path = "/oauth/token",
    tag = "auth",
    request_body(content = TokenRequestForm, description = "`grant_type=client_credentials` (and `client_id`, `client_secret` without HTTP Basic), or `grant_type=urn:ietf:params:oauth:grant-type:token-exchange` with `subject_token` and `subject_token_type`", content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "A token", body = TokenResponse),
        (status = 400, description = "`invalid_request`, `unsupported_grant_type`, or `invalid_grant` (a token exchange's token is expired, its client deleted, its session past `max_session_ms` or begun before a secret rotation)", body = OAuthError),
        (status = 401, description = "`invalid_client`: unknown client or wrong secret", body = OAuthError),
        (status = 429, description = "`slow_down`: too many failed token requests for this client id or from this address lately (`[auth] failed_token_requests_per_client_per_min`, `..._per_address_per_min`); nothing was checked. `Retry-After` says when to try again", body = OAuthError),
        (status = 503, description = "`temporarily_unavailable`: every secret check is taken (`Retry-After: 1`), or no metadata leader to create the first signing key", body = OAuthError),
    )
)]
async fn token(
    State(auth): State<Auth>,
    State(auditing): State<Auditing>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    content_type: ContentType,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Response {
    if !content_type.is("application/x-www-form-urlencoded") {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body must be application/x-www-form-urlencoded",
        );
    }
    if !auth.settings().builtin_enabled {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            ISSUER_DISABLED,
        );
    }
    // RFC 6749 § 3.2: a parameter may appear once; unrecognized ones are ignored.
    let mut form = HashMap::new();
    for (name, value) in form_urlencoded::parse(&body) {
        if !FORM_PARAMETERS.contains(&name.as_ref()) {
            continue;
        }
        if form.insert(name.into_owned(), value.into_owned()).is_some() {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "a parameter appears twice",
            );
        }
    }
    match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {
            let (client_id, secret) = match credentials(&headers, &form) {
                Ok(pair) => pair,
                Err(refusal) => return refusal.into_response(),
            };
            let forwarded_for = headers
                .get("x-forwarded-for")
                .and_then(|value| value.to_str().ok());
            let address = client_address(
                peer.map(|Extension(ConnectInfo(peer))| peer.ip()),
                forwarded_for,
                &auditing.trusted_proxies,
            );
            answer(
                auth.issue_token(&client_id, &secret, address).await,
                None,
            )
        }
        Some(TOKEN_EXCHANGE_GRANT) => match exchanged_token(&form) {
            Ok(subject_token) => answer(
                auth.renew_token(subject_token).await,
                Some(ACCESS_TOKEN_TYPE),
            ),
            Err(refusal) => refusal.into_response(),
        },
        Some(other) => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            format!(
                "grant_type '{other}' is not supported: use client_credentials or {TOKEN_EXCHANGE_GRANT}"
            ),
        ),
        None => oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "grant_type is required",
        ),
    }
}

/// A token exchange's `subject_token`, when the request asks for an access token for an
/// access token (RFC 8693 § 2.1).
fn exchanged_token(form: &HashMap<String, String>) -> Result<&str, Refusal> {
    let refusal = |description| Refusal {
        status: StatusCode::BAD_REQUEST,
        error: "invalid_request",
        description,
    };
    let subject_token = form
        .get("subject_token")
        .filter(|token| !token.is_empty())
        .ok_or_else(|| refusal("subject_token is required"))?;
    if form.get("subject_token_type").map(String::as_str) != Some(ACCESS_TOKEN_TYPE) {
        return Err(refusal(
            "subject_token_type must be urn:ietf:params:oauth:token-type:access_token",
        ));
    }
    if form
        .get("requested_token_type")
        .is_some_and(|requested| requested != ACCESS_TOKEN_TYPE)
    {
        return Err(refusal(
            "requested_token_type must be urn:ietf:params:oauth:token-type:access_token (or absent)",
        ));
    }
    Ok(subject_token)
}

/// The token endpoint's answer to a grant: the token, or the RFC 6749 § 5.2 error.
fn answer(issued: Result<IssuedToken, GrantError>, token_type: Option<&'static str>) -> Response {
    match issued {
        Ok(issued) => {
            let mut response = Json(TokenResponse {
                access_token: issued.access_token,
                token_type: "Bearer",
                expires_in: issued.expires_in_s,
                issued_token_type: token_type,
            })
            .into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(GrantError::IssuerDisabled) => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            ISSUER_DISABLED,
        ),
        Err(GrantError::InvalidClient) => oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "the client id or secret is wrong",
        ),
        Err(GrantError::InvalidGrant(reason)) => {
            oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", reason)
        }
        Err(GrantError::Busy) => retry_after(
            oauth_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the node is checking as many client secrets as it can; retry in a moment",
            ),
            1,
        ),
        Err(GrantError::TooManyFailures { retry_after: wait }) => {
            let seconds = wait.as_secs().max(1);
            retry_after(
                oauth_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "slow_down",
                    format!(
                        "too many failed token requests for this client or from this address; retry in {seconds} s"
                    ),
                ),
                seconds,
            )
        }
        Err(GrantError::Broker(error)) => {
            tracing::warn!(%error, "issuing a token failed");
            oauth_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the token could not be issued now; retry",
            )
        }
    }
}

fn retry_after(mut response: Response, seconds: u64) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The keys that validate Herald's tokens (JWKS, RFC 7517).
#[utoipa::path(
    get,
    path = "/oauth/jwks.json",
    tag = "auth",
    responses((status = 200, description = "The public keys, current and retired-but-valid", body = JwkSet))
)]
async fn jwks(State(auth): State<Auth>) -> Json<JwkSet> {
    Json(JwkSet { keys: auth.jwks() })
}

/// OpenID Connect Discovery for the built-in issuer.
#[utoipa::path(
    get,
    path = "/.well-known/openid-configuration",
    tag = "auth",
    responses((status = 200, description = "Where the token endpoint and the keys are", body = OpenIdConfiguration))
)]
async fn openid_configuration(State(auth): State<Auth>) -> Json<OpenIdConfiguration> {
    let issuer = auth.settings().issuer.trim_end_matches('/').to_string();
    Json(OpenIdConfiguration {
        token_endpoint: format!("{issuer}{TOKEN_PATH}"),
        jwks_uri: format!("{issuer}{JWKS_PATH}"),
        issuer,
        grant_types_supported: vec!["client_credentials", TOKEN_EXCHANGE_GRANT],
        token_endpoint_auth_methods_supported: vec!["client_secret_basic", "client_secret_post"],
        id_token_signing_alg_values_supported: vec!["ES256"],
        response_types_supported: vec!["token"],
        subject_types_supported: vec!["public"],
    })
}
