//! The one place errors become HTTP: RFC 9457 `application/problem+json` bodies with a stable,
//! machine-readable `code`.
//!
//! Handlers return [`ApiError`]; a [`BrokerError`] converts into one with `?`, and so do the
//! rejections of the extractors in [`super::extract`]. The codes, their statuses and titles are
//! declared once, in [`ErrorCode`]; clients can branch on `code` without parsing `detail`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::broker::{BrokerError, ErrorCode};

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem details body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:herald:problem:topic_not_found",
    "title": "Topic not found",
    "status": 404,
    "detail": "topic 'orders' does not exist",
    "code": "topic_not_found"
}))]
pub struct Problem {
    /// A URI naming the problem type: `urn:herald:problem:<code>`.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short, human-readable summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request, for humans.
    pub detail: String,
    /// A stable snake_case code, for programs.
    pub code: ErrorCode,
    /// With `offset_out_of_range`: the first offset still in the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_start_offset: Option<u64>,
    /// With `offset_out_of_range`: the offset after the last readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<u64>,
    /// With `out_of_order_sequence`: the sequence the partition expects next from the producer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_sequence: Option<i64>,
    /// The request's id (its `x-request-id` answer header), to quote when reporting the problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Schema registry routes only: Confluent's numeric error code (e.g. 40401), which its
    /// clients read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<u32>,
    /// Schema registry routes only: the `detail` again, under the name Confluent's clients read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Whether a request is to the schema registry's routes, whose problem answers also carry
/// Confluent's fields ([`add_registry_fields`]).
pub fn is_registry_path(path: &str) -> bool {
    path.strip_prefix(crate::api::routes::schema_registry::BASE_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Adds what Confluent's Schema Registry clients read from an error body beside the problem's
/// own fields: `error_code` (Confluent's number for the problem's `code`) and `message` (the
/// `detail`).
pub fn add_registry_fields(fields: &mut serde_json::Map<String, serde_json::Value>) {
    let code = fields
        .get("code")
        .and_then(|code| serde_json::from_value::<ErrorCode>(code.clone()).ok());
    if let Some(code) = code {
        fields.insert(
            "error_code".into(),
            serde_json::Value::from(code.confluent_error_code()),
        );
    }
    if let Some(detail) = fields.get("detail").cloned() {
        fields.insert("message".into(), detail);
    }
}

/// An error answer of the HTTP API: status, stable code and detail, rendered as a [`Problem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub detail: String,
    /// `(log_start_offset, high_watermark)` for `offset_out_of_range`.
    pub bounds: Option<(u64, u64)>,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u32>,
    /// The next sequence, for `out_of_order_sequence`.
    pub expected_sequence: Option<i64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with `code`'s status, and a `Retry-After` where the code asks for one.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        ApiError {
            status: status_of(code),
            code,
            detail: detail.into(),
            bounds: None,
            retry_after: code.retry_after_seconds(),
            expected_sequence: None,
        }
    }

    /// 400 `invalid_request`: the request is malformed or a value is out of range.
    pub fn invalid_request(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, detail)
    }

    /// 404 `not_found`: no such route.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, detail)
    }

    /// 405 `method_not_allowed`.
    pub fn method_not_allowed(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::MethodNotAllowed, detail)
    }

    /// 413 `payload_too_large`: the request body is over the server's limit.
    pub fn payload_too_large(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::PayloadTooLarge, detail)
    }

    /// 415 `unsupported_media_type`: a `Content-Type` the endpoint does not take.
    pub fn unsupported_media_type(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::UnsupportedMediaType, detail)
    }

    /// 500 `internal_error`: logs `cause` and answers a generic detail, so nothing internal leaks.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error while serving a request");
        Self::new(
            ErrorCode::InternalError,
            "the server failed to handle the request; the error has been logged",
        )
    }

    /// The problem body this error answers.
    pub fn problem(&self) -> Problem {
        Problem {
            problem_type: format!("urn:herald:problem:{}", self.code),
            title: self.code.title().to_string(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code,
            log_start_offset: self.bounds.map(|(start, _)| start),
            high_watermark: self.bounds.map(|(_, end)| end),
            expected_sequence: self.expected_sequence,
            // Added by the request-id layer, which knows it.
            request_id: None,
            error_code: None,
            message: None,
        }
    }
}

fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl From<BrokerError> for ApiError {
    fn from(error: BrokerError) -> Self {
        let code = error.code();
        match error {
            BrokerError::Internal(cause) => ApiError::internal(cause),
            BrokerError::OffsetOutOfRange {
                log_start_offset,
                high_watermark,
                ..
            } => ApiError {
                bounds: Some((log_start_offset, high_watermark)),
                ..ApiError::new(code, error.to_string())
            },
            // Refused against the partition's current end, not a read outside it.
            BrokerError::CommitOutOfRange {
                log_start_offset,
                high_watermark,
                ..
            } => ApiError {
                status: StatusCode::CONFLICT,
                bounds: Some((log_start_offset, high_watermark)),
                ..ApiError::new(code, error.to_string())
            },
            BrokerError::OutOfOrderSequence { expected, .. } => ApiError {
                expected_sequence: Some(expected),
                ..ApiError::new(code, error.to_string())
            },
            other => ApiError::new(code, other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match serde_json::to_vec(&self.problem()) {
            Ok(body) => body,
            Err(error) => {
                tracing::error!(%error, "failed to encode a problem body");
                b"{\"type\":\"urn:herald:problem:internal_error\",\"title\":\"Internal error\",\"status\":500,\"detail\":\"failed to encode the error\",\"code\":\"internal_error\"}".to_vec()
            }
        };
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The answer to any path no route matches.
pub async fn not_found_fallback(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

/// The answer to a known path called with a method it does not serve.
pub async fn method_not_allowed_fallback(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> ApiError {
    ApiError::method_not_allowed(format!("{method} is not allowed on {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_json(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("json body")
    }

    fn status_and_code(error: BrokerError) -> (u16, &'static str) {
        let api = ApiError::from(error);
        (api.status.as_u16(), api.code.as_str())
    }

    #[test]
    fn broker_errors_map_to_status_and_code() {
        let topic = || "orders".to_string();
        assert_eq!(
            status_and_code(BrokerError::InvalidRequest("x".into())),
            (400, "invalid_request")
        );
        assert_eq!(
            status_and_code(BrokerError::TopicNotFound(topic())),
            (404, "topic_not_found")
        );
        assert_eq!(
            status_and_code(BrokerError::PartitionNotFound {
                topic: topic(),
                partition: 3
            }),
            (404, "partition_not_found")
        );
        assert_eq!(
            status_and_code(BrokerError::TopicExists(topic())),
            (409, "topic_exists")
        );
        assert_eq!(
            status_and_code(BrokerError::Conflict {
                code: ErrorCode::CannotDrain,
                message: "x".into()
            }),
            (409, "cannot_drain")
        );
        assert_eq!(
            status_and_code(BrokerError::NodeNotFound(4)),
            (404, "node_not_found")
        );
        assert_eq!(
            status_and_code(BrokerError::MessageTooLarge { size: 10, max: 5 }),
            (413, "message_too_large")
        );
        assert_eq!(
            status_and_code(BrokerError::OffsetOutOfRange {
                offset: 1,
                log_start_offset: 5,
                high_watermark: 9
            }),
            (416, "offset_out_of_range")
        );
        assert_eq!(
            status_and_code(BrokerError::NoLeader(topic())),
            (503, "no_leader")
        );
        assert_eq!(
            status_and_code(BrokerError::Unavailable("x".into())),
            (503, "unavailable")
        );
        assert_eq!(
            status_and_code(BrokerError::Timeout("x".into())),
            (504, "timeout")
        );
        assert_eq!(
            status_and_code(BrokerError::OutOfOrderSequence {
                producer_id: 3,
                partition: 0,
                sequence: 9,
                expected: 5
            }),
            (409, "out_of_order_sequence")
        );
        assert_eq!(
            status_and_code(BrokerError::ProducerFenced("x".into())),
            (409, "producer_fenced")
        );
        assert_eq!(
            status_and_code(BrokerError::IdempotencyKeyReused("k".into())),
            (409, "idempotency_key_reused")
        );
        assert_eq!(
            status_and_code(BrokerError::Internal("disk on fire".into())),
            (500, "internal_error")
        );
    }

    #[tokio::test]
    async fn problem_body_is_rfc9457() {
        let response = ApiError::from(BrokerError::TopicNotFound("orders".into())).into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let body = body_json(response).await;
        assert_eq!(
            body,
            serde_json::json!({
                "type": "urn:herald:problem:topic_not_found",
                "title": "Topic not found",
                "status": 404,
                "detail": "topic 'orders' does not exist",
                "code": "topic_not_found"
            })
        );
    }

    #[tokio::test]
    async fn offset_out_of_range_carries_both_bounds() {
        let error = BrokerError::OffsetOutOfRange {
            offset: 2,
            log_start_offset: 10,
            high_watermark: 42,
        };
        let body = body_json(ApiError::from(error).into_response()).await;
        assert_eq!(body["code"], "offset_out_of_range");
        assert_eq!(body["status"], 416);
        assert_eq!(body["log_start_offset"], 10);
        assert_eq!(body["high_watermark"], 42);
    }

    #[tokio::test]
    async fn out_of_order_sequence_says_what_comes_next() {
        let error = BrokerError::OutOfOrderSequence {
            producer_id: 3,
            partition: 1,
            sequence: 9,
            expected: 5,
        };
        let body = body_json(ApiError::from(error).into_response()).await;
        assert_eq!(body["code"], "out_of_order_sequence");
        assert_eq!(body["expected_sequence"], 5);
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("expects sequence 5"), "{detail}");
    }

    #[tokio::test]
    async fn no_leader_asks_to_retry() {
        let response = ApiError::from(BrokerError::NoLeader("orders/0".into())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[tokio::test]
    async fn internal_errors_do_not_leak_their_cause() {
        let response = ApiError::from(BrokerError::Internal(
            "rocksdb: /secret/path corrupt".into(),
        ))
        .into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body_json(response).await;
        assert_eq!(body["code"], "internal_error");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(!detail.contains("secret"), "{detail}");
        assert!(!detail.contains("rocksdb"), "{detail}");
    }

    fn declared_codes() -> std::collections::BTreeSet<String> {
        ErrorCode::ALL
            .iter()
            .map(|code| code.as_str().to_string())
            .collect()
    }

    /// `docs/errors.md` has one table row per code, and no row for a code that does not exist.
    #[test]
    fn the_errors_doc_lists_every_code() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
        let text = std::fs::read_to_string(path).expect("read docs/errors.md");
        let documented: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|rest| rest.split('`').next())
            .map(str::to_string)
            .collect();
        assert_eq!(documented, declared_codes());
    }

    /// The OpenAPI document declares `code` as an enum of exactly the declared codes, so a
    /// generated SDK knows every one.
    #[test]
    fn the_openapi_document_enumerates_every_code() {
        let document = serde_json::to_value(crate::api::openapi()).expect("document as JSON");
        let listed: std::collections::BTreeSet<String> = document["components"]["schemas"]
            ["ErrorCode"]["enum"]
            .as_array()
            .expect("ErrorCode is a string enum")
            .iter()
            .filter_map(|code| code.as_str().map(str::to_string))
            .collect();
        assert_eq!(listed, declared_codes());
        assert_eq!(
            document["components"]["schemas"]["Problem"]["properties"]["code"]["$ref"],
            "#/components/schemas/ErrorCode"
        );
    }

    #[test]
    fn registry_problems_carry_confluents_error_code_and_message() {
        assert!(is_registry_path("/schema-registry/subjects"));
        assert!(is_registry_path("/schema-registry"));
        assert!(!is_registry_path("/schema-registryx/subjects"));
        assert!(!is_registry_path("/v1/topics"));
        let mut fields = serde_json::json!({
            "code": "subject_not_found", "detail": "Subject 'x' not found.", "status": 404
        });
        add_registry_fields(fields.as_object_mut().expect("an object"));
        assert_eq!(fields["error_code"], 40401);
        assert_eq!(fields["message"], "Subject 'x' not found.");
        // Codes of the rest of the API: their status (5xx with Confluent's `01` suffix).
        for (code, expected) in [
            ("invalid_request", 42201),
            ("unauthorized", 401),
            ("no_leader", 50301),
        ] {
            let mut fields = serde_json::json!({"code": code, "detail": "d"});
            add_registry_fields(fields.as_object_mut().expect("an object"));
            assert_eq!(fields["error_code"], expected, "{code}");
        }
    }
}
