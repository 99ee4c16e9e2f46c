//! Extractors whose rejections are problem+json: axum's own answer plain text with statuses
//! (422, 415) clients should not have to special-case.
//!
//! - bad JSON, wrong types, unknown fields, bad query or path values: 400 `invalid_request`;
//! - a body over the limit (`DefaultBodyLimit`): 413 `payload_too_large`;
//! - a JSON endpoint called without `Content-Type: application/json`: 415 `unsupported_media_type`.

use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use bytes::Bytes;

use super::problem::ApiError;

/// A JSON request body with problem+json rejections. Every request body of the API is a
/// JSON object, so anything else (an array, a string) is refused: serde would otherwise
/// accept `["name"]` for a struct.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let ContentType(content_type) =
            match ContentType::from_request_parts(&mut parts, state).await {
                Ok(content_type) => content_type,
                Err(never) => match never {},
            };
        if !ContentType(content_type).is_json() {
            return Err(ApiError::unsupported_media_type(
                "expected a request with `Content-Type: application/json`",
            ));
        }
        let ApiBytes(bytes) =
            ApiBytes::from_request(Request::from_parts(parts, body), state).await?;
        json_from_bytes(&bytes).map(ApiJson)
    }
}

/// `axum::extract::Query` with problem+json rejections.
#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// `axum::extract::Path` with problem+json rejections.
#[derive(Debug, Clone, Copy, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// The raw request body, limited by `DefaultBodyLimit`, with problem+json rejections.
#[derive(Debug, Clone)]
pub struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(request, state)
            .await
            .map(ApiBytes)
            .map_err(ApiError::from)
    }
}

/// The `Content-Type` of a request, lower-cased and without parameters (`; charset=...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentType(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ContentType {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let essence = parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(|value| {
                value
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            });
        Ok(ContentType(essence))
    }
}

impl ContentType {
    /// `application/json` or any `application/*+json`.
    pub fn is_json(&self) -> bool {
        matches!(&self.0, Some(essence) if essence == "application/json"
            || (essence.starts_with("application/") && essence.ends_with("+json")))
    }

    pub fn is_octet_stream(&self) -> bool {
        self.0.as_deref() == Some("application/octet-stream")
    }

    /// Whether the media type (without parameters) is `essence`.
    pub fn is(&self, essence: &str) -> bool {
        self.0.as_deref() == Some(essence)
    }
}

fn body_rejection(status: StatusCode, text: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::payload_too_large("the request body is larger than the server's limit")
    } else {
        ApiError::invalid_request(format!("could not read the request body: {text}"))
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        body_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::unsupported_media_type(
                "expected a request with `Content-Type: application/json`",
            ),
            JsonRejection::BytesRejection(inner) => ApiError::from(inner),
            // Data and syntax errors: the text names the field and position.
            other => ApiError::invalid_request(other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::invalid_request(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        match rejection {
            PathRejection::FailedToDeserializePathParams(inner) => {
                ApiError::invalid_request(inner.body_text())
            }
            // The route and the extractor disagree: our bug, not the client's.
            other => ApiError::internal(other.body_text()),
        }
    }
}

/// Decodes a JSON body already read as bytes, with the same error texts as [`ApiJson`].
pub fn json_from_bytes<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|byte| !byte.is_ascii_whitespace());
    if first.is_some_and(|&byte| byte != b'{') {
        return Err(ApiError::invalid_request(
            "the request body must be a JSON object",
        ));
    }
    axum::Json::<T>::from_bytes(bytes)
        .map(|axum::Json(value)| value)
        .map_err(ApiError::from)
}

/// Decodes an optional JSON body (the document declares it `oneOf [object, null]`): no body,
/// only whitespace or a JSON `null` is `T::default()`; anything else must be a JSON object.
pub fn optional_json_from_bytes<T>(bytes: &[u8]) -> Result<T, ApiError>
where
    T: serde::de::DeserializeOwned + Default,
{
    let trimmed = bytes.trim_ascii();
    if trimmed.is_empty() || trimmed == b"null" {
        return Ok(T::default());
    }
    json_from_bytes(bytes)
}
