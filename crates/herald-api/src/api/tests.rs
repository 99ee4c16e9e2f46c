//! Transport tests that need no broker: fallbacks, rejections, limits, docs, metrics. The
//! routes here use the real extractors, DTO decoding and layers, with stand-in handlers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::FutureExt as _;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

use super::dto::consume::FetchQuery;
use super::dto::produce::{decode_produce, ProduceQuery};
use super::dto::topic::CreateTopicRequest;
use super::extract::{ApiBytes, ApiJson, ApiPath, ApiQuery, ContentType};
use super::middleware::limits::RequestLimits;
use super::openapi::docs;
use super::problem::{ApiResult, PROBLEM_JSON};
use super::routes::health;
use super::with_layers;

const LIMIT: usize = 1024;

fn app() -> Router {
    let routes = Router::new()
        .route("/healthz", get(health::healthz))
        .route(
            "/v1/topics",
            post(|ApiJson(request): ApiJson<CreateTopicRequest>| async move {
                request.into_domain().map(|_| StatusCode::CREATED)
            }),
        )
        .route(
            "/v1/topics/{topic}/messages",
            post(
                |ApiQuery(query): ApiQuery<ProduceQuery>,
                 content_type: ContentType,
                 ApiBytes(body): ApiBytes| async move {
                    decode_produce(&content_type, &query, body)
                        .map(|decoded| Json(decoded.messages.len()))
                },
            ),
        )
        .route(
            "/v1/topics/{topic}/partitions/{partition}/messages",
            get(
                |ApiPath((topic, partition)): ApiPath<(String, u32)>,
                 ApiQuery(query): ApiQuery<FetchQuery>| async move {
                    let request = query.into_domain(topic, partition)?;
                    ApiResult::Ok(Json(request.max_messages))
                },
            ),
        )
        .route("/panic", get(panics))
        .merge(docs::router(super::openapi()));
    with_layers(routes, test_layers(RequestLimits::default()))
}

/// The layers without the audit log, authentication or quotas.
fn test_layers(limits: RequestLimits) -> super::Layers {
    super::Layers {
        max_body_bytes: LIMIT,
        limits,
        auditing: None,
        guard: super::middleware::route_guard::RouteGuard::default(),
    }
}

async fn panics() -> StatusCode {
    panic!("boom")
}

async fn send(request: Request<Body>) -> (StatusCode, Option<String>, serde_json::Value) {
    let response = app().oneshot(request).await.expect("infallible");
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .expect("body");
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, content_type, json)
}

fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).expect("request")
}

fn post_request(uri: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(uri)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .expect("request")
}

fn assert_problem(
    answer: &(StatusCode, Option<String>, serde_json::Value),
    status: u16,
    code: &str,
) {
    let (got, content_type, body) = answer;
    assert_eq!(got.as_u16(), status, "{body}");
    assert_eq!(content_type.as_deref(), Some(PROBLEM_JSON), "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|detail| !detail.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn healthz_is_ok() {
    let (status, _, body) = send(get_request("/healthz")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!({"status": "ok"}));
}

#[tokio::test]
async fn unknown_route_is_404_problem() {
    assert_problem(&send(get_request("/v1/nope")).await, 404, "not_found");
}

#[tokio::test]
async fn wrong_method_is_405_problem() {
    let answer = send(
        Request::delete("/healthz")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_problem(&answer, 405, "method_not_allowed");
}

#[tokio::test]
async fn bad_json_is_400_problem() {
    for body in [
        r#"{"name": "#,
        r#"{"name": 5}"#,
        r#"{"name":"a","partitions":"x"}"#,
        r#"{"nme":"a"}"#,
    ] {
        let answer = send(post_request("/v1/topics", "application/json", body)).await;
        assert_problem(&answer, 400, "invalid_request");
    }
    let answer = send(post_request(
        "/v1/topics",
        "application/json",
        r#"{"name":"__x"}"#,
    ))
    .await;
    assert_problem(&answer, 400, "invalid_request");
}

#[tokio::test]
async fn json_endpoint_without_json_content_type_is_415() {
    let answer = send(post_request("/v1/topics", "text/plain", r#"{"name":"a"}"#)).await;
    assert_problem(&answer, 415, "unsupported_media_type");
}

#[tokio::test]
async fn body_over_the_limit_is_413_problem() {
    let big = format!(r#"{{"name":"{}"}}"#, "a".repeat(LIMIT * 2));
    assert_problem(
        &send(post_request("/v1/topics", "application/json", big)).await,
        413,
        "payload_too_large",
    );
    let bytes = vec![0u8; LIMIT + 1];
    let answer = send(post_request(
        "/v1/topics/t/messages",
        "application/octet-stream",
        bytes,
    ))
    .await;
    assert_problem(&answer, 413, "payload_too_large");
}

#[tokio::test]
async fn produce_content_types() {
    let answer = send(post_request(
        "/v1/topics/t/messages",
        "application/json",
        r#"{"messages":[{"value":1}]}"#,
    ))
    .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.2);
    let answer = send(post_request(
        "/v1/topics/t/messages?key=k&partition=1",
        "application/octet-stream",
        "raw",
    ))
    .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.2);
    assert_problem(
        &send(post_request("/v1/topics/t/messages", "text/csv", "a,b")).await,
        415,
        "unsupported_media_type",
    );
    let answer = send(post_request(
        "/v1/topics/t/messages?acks=some",
        "application/json",
        r#"{"messages":[{"value":1}]}"#,
    ))
    .await;
    assert_problem(&answer, 400, "invalid_request");
    let answer = send(post_request(
        "/v1/topics/t/messages",
        "application/json",
        r#"{"messages":[]}"#,
    ))
    .await;
    assert_problem(&answer, 400, "invalid_request");
}

#[tokio::test]
async fn bad_fetch_parameters_are_400() {
    for uri in [
        "/v1/topics/t/partitions/x/messages",
        "/v1/topics/t/partitions/-1/messages",
        "/v1/topics/t/partitions/0/messages?offset=-3",
        "/v1/topics/t/partitions/0/messages?offset=soon",
        "/v1/topics/t/partitions/0/messages?max_messages=10001",
        "/v1/topics/t/partitions/0/messages?max_messages=abc",
        "/v1/topics/t/partitions/0/messages?max_wait_ms=60001",
    ] {
        assert_problem(&send(get_request(uri)).await, 400, "invalid_request");
    }
    let (status, _, body) = send(get_request(
        "/v1/topics/t/partitions/0/messages?offset=latest",
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, 100);
}

#[tokio::test]
async fn panics_become_500_problems() {
    assert_problem(&send(get_request("/panic")).await, 500, "internal_error");
}

#[tokio::test]
async fn docs_are_served() {
    let response = app()
        .oneshot(get_request("/docs"))
        .await
        .expect("infallible");
    assert!(response.status().is_redirection(), "{}", response.status());
    let response = app()
        .oneshot(get_request("/docs/"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let (status, _, body) = send(get_request("/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["info"]["title"], "Herald");
}

#[tokio::test]
async fn requests_are_counted_by_route_pattern() {
    let handle = crate::telemetry::init_metrics().expect("metrics");
    send(get_request("/v1/topics/orders/partitions/7/messages")).await;
    send(get_request("/v1/not/a/route")).await;
    let text = handle.render();
    assert!(
        text.contains(r#"route="/v1/topics/{topic}/partitions/{partition}/messages""#),
        "{text}"
    );
    assert!(text.contains(r#"route="unmatched""#), "{text}");
    assert!(
        !text.contains("orders"),
        "raw paths must not become labels: {text}"
    );
    assert!(
        text.contains("herald_http_request_duration_seconds_bucket"),
        "{text}"
    );
}

/// A router whose `/slow` route waits until `gate` has a permit (it gives it back at once, so
/// one permit lets every waiting request through).
fn limited_app(limits: RequestLimits, gate: Arc<Semaphore>) -> Router {
    let routes = Router::new().route("/healthz", get(health::healthz)).route(
        "/slow",
        get(move || {
            let gate = gate.clone();
            async move {
                let _passed = gate.acquire().await;
                StatusCode::NO_CONTENT
            }
        }),
    );
    with_layers(routes, test_layers(limits))
}

async fn problem_code(response: axum::response::Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("problem json");
    body["code"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_request_past_its_deadline_is_504_timeout() {
    let limits = RequestLimits {
        request_timeout: Duration::from_millis(50),
        ..RequestLimits::default()
    };
    let app = limited_app(limits, Arc::new(Semaphore::new(0)));
    let response = app.oneshot(get_request("/slow")).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(problem_code(response).await, "timeout");
}

#[tokio::test]
async fn requests_past_the_concurrency_cap_are_503_overloaded_and_health_still_answers() {
    let limits = RequestLimits {
        max_concurrent_requests: 2,
        ..RequestLimits::default()
    };
    let gate = Arc::new(Semaphore::new(0));
    let app = limited_app(limits, gate.clone());
    let holders: Vec<_> = (0..2)
        .map(|_| tokio::spawn(app.clone().oneshot(get_request("/slow"))))
        .collect();
    // Once both holders run, a third request is refused at once: a bounded number of tries
    // for them to get there (each try that is admitted is dropped, freeing its place).
    let mut refused = None;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if let Some(Ok(response)) = app.clone().oneshot(get_request("/slow")).now_or_never() {
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                refused = Some(response);
                break;
            }
        }
    }
    let refused = refused.expect("a third request is refused while two are in flight");
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    assert_eq!(problem_code(refused).await, "overloaded");
    let health = app
        .clone()
        .oneshot(get_request("/healthz"))
        .await
        .expect("infallible");
    assert_eq!(health.status(), StatusCode::OK);
    gate.add_permits(1);
    for holder in holders {
        let response = holder.await.expect("task").expect("infallible");
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    // Their places are free again.
    let response = app.oneshot(get_request("/slow")).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}
