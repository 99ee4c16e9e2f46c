//! W3C trace context through Herald: a produce request's `traceparent` travels in the
//! produced messages' headers to every kind of delivery, a message's own `traceparent` is kept,
//! an idempotent retry under a new trace context is still the same message, a JSON log line
//! of a request carries the client's trace id, and with `--otlp-endpoint` the request's span and
//! its raft proposal's span reach an OTLP collector in the client's trace. A token in a query
//! string (`?access_token=`, for WebSocket and SSE) is redacted wherever the URI is recorded:
//! exported spans and request log lines.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{poll, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

async fn produce_traced(
    server: &Server,
    topic: &str,
    body: &Value,
    traceparent: &str,
) -> (StatusCode, Value) {
    let response = server
        .http_client()
        .post(server.url(&format!("/v1/topics/{topic}/messages")))
        .header("traceparent", traceparent)
        .json(body)
        .send()
        .await
        .expect("produce");
    server.json(response).await
}

fn header<'a>(message: &'a Value, name: &str) -> Option<&'a str> {
    message["headers"][name].as_str()
}

#[tokio::test]
async fn a_produce_requests_traceparent_reaches_fetches_polls_and_pulls() {
    let server = Server::start().await;
    server.create_topic("traced", 1).await;
    server.wait_for_leaders("traced").await;
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let body = json!({"messages": [
        {"value": "plain"},
        {"value": "own", "headers": {"traceparent": own}},
    ]});
    let (status, answer) = produce_traced(&server, "traced", &body, TRACEPARENT).await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let (_, read) = server.fetch("traced", 0, "offset=0").await;
    let messages = read["messages"].as_array().expect("messages");
    assert_eq!(
        header(&messages[0], "traceparent"),
        Some(TRACEPARENT),
        "{read}"
    );
    assert_eq!(
        header(&messages[1], "traceparent"),
        Some(own),
        "a message's own trace is kept"
    );

    // A consumer group's poll delivers the same header.
    let member = server
        .join_group("traced-group", &json!({"topics": ["traced"]}))
        .await;
    let polled = poll(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            let response = server
                .post_json(
                    &format!("/v1/groups/traced-group/members/{}/poll", member.id),
                    &json!({"generation": member.generation, "max_wait_ms": 200}),
                )
                .await;
            let (status, answer) = server.json(response).await;
            match answer["messages"].as_array() {
                Some(messages) if status == StatusCode::OK && messages.len() == 2 => {
                    Ok(messages.clone())
                }
                _ => Err(format!("poll: {status}: {answer}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    assert_eq!(header(&polled[0], "traceparent"), Some(TRACEPARENT));

    // And a queue subscription's pull.
    common::queues::subscribe(&server, "traced-sub", json!({"topic": "traced"})).await;
    let pulled = common::queues::pull(&server, "traced-sub", 10, 2_000).await;
    let first = pulled
        .iter()
        .find(|item| item["message"]["offset"] == 0)
        .expect("offset 0 pulled");
    assert_eq!(header(&first["message"], "traceparent"), Some(TRACEPARENT));
}

#[tokio::test]
async fn an_invalid_traceparent_is_ignored_and_an_idempotent_retry_under_a_new_trace_is_a_duplicate(
) {
    let server = Server::start().await;
    server.create_topic("retried", 1).await;
    server.wait_for_leaders("retried").await;
    let (status, answer) = produce_traced(
        &server,
        "retried",
        &json!({"messages": [{"value": 1}]}),
        "00-nonsense",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (_, read) = server.fetch("retried", 0, "offset=0").await;
    assert_eq!(header(&read["messages"][0], "traceparent"), None, "{read}");

    let body = json!({"messages": [{"value": 2}]});
    let send = |traceparent: &'static str| {
        let server = &server;
        let body = body.clone();
        async move {
            let response = server
                .http_client()
                .post(server.url("/v1/topics/retried/messages"))
                .header("traceparent", traceparent)
                .header("Idempotency-Key", "order-7")
                .json(&body)
                .send()
                .await
                .expect("produce");
            server.json(response).await
        }
    };
    let (status, first) = send(TRACEPARENT).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let retry_trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";
    let (status, retry) = send(retry_trace).await;
    assert_eq!(status, StatusCode::OK, "{retry}");
    assert_eq!(retry["duplicate"], true, "{retry}");
    assert_eq!(retry["offsets"], first["offsets"]);
    assert_eq!(server.high_watermarks("retried").await, vec![2]);
}

#[tokio::test]
async fn json_log_lines_of_a_request_carry_its_trace_id() {
    // The request's own events ("started processing request", in its span) are at debug. Set
    // for this node only: every test of the binary shares the process's environment.
    let server = Server::start_with_env(
        &["--log-format", "json"],
        &[("RUST_LOG", "info,herald_api::api::middleware::trace=debug")],
    )
    .await;
    server.create_topic("logged", 1).await;
    server.wait_for_leaders("logged").await;
    let response = server
        .http_client()
        .delete(server.url("/v1/topics/logged"))
        .header("traceparent", TRACEPARENT)
        .send()
        .await
        .expect("delete");
    assert!(response.status().is_success(), "{}", response.status());
    let line = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            server
                .logs()
                .iter()
                .flat_map(|text| text.lines().map(String::from).collect::<Vec<_>>())
                .find(|line| line.contains(TRACE_ID))
                .ok_or_else(|| "no log line with the trace id".to_string())
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    let parsed: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(parsed["span"]["trace_id"], TRACE_ID, "{line}");
    assert!(
        parsed["span"]["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{line}"
    );
    assert!(
        parsed["timestamp"].is_string() && parsed["level"].is_string(),
        "{line}"
    );
}

/// An OTLP/HTTP collector stub on loopback: keeps the body of every `POST /v1/traces`.
struct Collector {
    url: String,
    bodies: Arc<Mutex<Vec<bytes::Bytes>>>,
}

impl Collector {
    async fn start() -> Collector {
        let bodies: Arc<Mutex<Vec<bytes::Bytes>>> = Arc::default();
        let kept = bodies.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: bytes::Bytes| {
                let kept = kept.clone();
                async move {
                    kept.lock().expect("bodies").push(body);
                    // An empty ExportTraceServiceResponse: everything was accepted.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector { url, bodies }
    }

    /// Every span exported so far, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, opentelemetry_proto::tonic::trace::v1::Span)> {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use prost::Message as _;
        let bodies = self.bodies.lock().expect("bodies").clone();
        let mut spans = Vec::new();
        for body in bodies {
            let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
            for resource_spans in request.resource_spans {
                let service = resource_spans
                    .resource
                    .iter()
                    .flat_map(|resource| &resource.attributes)
                    .find(|attribute| attribute.key == "service.name")
                    .map(|attribute| format!("{:?}", attribute.value))
                    .unwrap_or_default();
                for scope in resource_spans.scope_spans {
                    spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
                }
            }
        }
        spans
    }
}

fn from_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&text[index..index + 2], 16).expect("hex"))
        .collect()
}

#[tokio::test]
async fn spans_of_a_traced_produce_reach_an_otlp_collector_in_the_clients_trace() {
    let collector = Collector::start().await;
    let server = Server::start_with(&["--otlp-endpoint", &collector.url]).await;
    server.create_topic("exported", 1).await;
    server.wait_for_leaders("exported").await;
    let body = json!({"messages": [{"value": "a"}, {"value": "b"}]});
    // A client that decided not to sample its trace: nothing of it is exported.
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let (status, answer) = produce_traced(&server, "exported", &body, unsampled).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, answer) = produce_traced(&server, "exported", &body, TRACEPARENT).await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let trace_id = from_hex(TRACE_ID);
    let client_span_id = from_hex("00f067aa0ba902b7");
    // The SDK exports in batches every 5 s.
    let spans = poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let spans = collector.spans();
            let ours = spans
                .iter()
                .filter(|(_, span)| span.trace_id == trace_id)
                .count();
            if ours >= 2 {
                Ok(spans)
            } else {
                Err(format!(
                    "{} spans exported, {ours} of the trace",
                    spans.len()
                ))
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));

    let request = spans
        .iter()
        .map(|(_, span)| span)
        .find(|span| span.trace_id == trace_id && span.name == "POST /v1/topics/{topic}/messages")
        .unwrap_or_else(|| panic!("no request span: {spans:?}"));
    assert_eq!(
        request.parent_span_id, client_span_id,
        "the client's span is its parent"
    );
    assert_eq!(
        request.kind,
        opentelemetry_proto::tonic::trace::v1::span::SpanKind::Server as i32
    );
    let status_code = request
        .attributes
        .iter()
        .find(|attribute| attribute.key == "http.response.status_code")
        .map(|attribute| format!("{:?}", attribute.value));
    assert!(
        status_code
            .as_deref()
            .is_some_and(|value| value.contains("200")),
        "{status_code:?}"
    );
    let proposal = spans
        .iter()
        .map(|(_, span)| span)
        .find(|span| span.trace_id == trace_id && span.name == "raft propose")
        .unwrap_or_else(|| panic!("no raft proposal span: {spans:?}"));
    assert_eq!(
        proposal.parent_span_id, request.span_id,
        "the proposal is the request's child"
    );
    assert!(proposal.end_time_unix_nano >= proposal.start_time_unix_nano);
    assert!(
        spans.iter().all(|(service, _)| service.contains("herald")),
        "service.name is herald: {spans:?}"
    );
    // Exported after the unsampled request's spans would have been: none of them are there.
    let unsampled_trace = from_hex("0af7651916cd43dd8448eb211c80319c");
    assert!(
        spans
            .iter()
            .all(|(_, span)| span.trace_id != unsampled_trace),
        "an unsampled trace was exported"
    );
}

#[tokio::test]
async fn a_node_refuses_an_otlp_endpoint_that_is_not_an_http_url() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--otlp-endpoint", "collector:4318", "--data-dir"])
        .arg(tempfile::tempdir().expect("tempdir").path())
        .output()
        .expect("run herald");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("otlp_endpoint"), "{stderr}");
}

/// A bearer token as a browser puts it in a query string; its middle part is easy to find.
const QUERY_TOKEN: &str = "eyJhbGciOiJFUzI1NiIsImtpZCI6IngifQ.U0VDUkVULVRPS0VOLVBBUlQ.c2lnbmF0dXJl";
const QUERY_TOKEN_PART: &str = "U0VDUkVULVRPS0VOLVBBUlQ";

#[tokio::test]
async fn a_query_string_token_is_redacted_from_spans_and_logs() {
    let collector = Collector::start().await;
    let server = Server::start_with_env(
        &[
            "--auth",
            "--otlp-endpoint",
            &collector.url,
            "--log-format",
            "json",
        ],
        &[("RUST_LOG", "info,herald_api::api::middleware::trace=debug")],
    )
    .await;
    // An event stream and a WebSocket, as browsers open them: the token in the query.
    for path in [
        format!("/v1/topics/orders/events?from=earliest&access_token={QUERY_TOKEN}"),
        format!("/v1/ws?access_token={QUERY_TOKEN}&x=1"),
        format!("/v1/topics/orders/events?access_token={QUERY_TOKEN}&from=nonsense"),
    ] {
        let response = server
            .http_client()
            .get(server.url(&path))
            .header("traceparent", TRACEPARENT)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status == StatusCode::UNAUTHORIZED || status == StatusCode::BAD_REQUEST,
            "{path}: {status} {body}"
        );
        assert!(!body.contains(QUERY_TOKEN_PART), "{path}: {body}");
    }

    let trace_id = from_hex(TRACE_ID);
    let spans = poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let spans: Vec<_> = collector
                .spans()
                .into_iter()
                .map(|(_, span)| span)
                .filter(|span| span.trace_id == trace_id && span.name.starts_with("GET"))
                .collect();
            if spans.len() >= 3 {
                Ok(spans)
            } else {
                Err(format!("{} request spans exported", spans.len()))
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    for span in &spans {
        let attributes = format!("{:?}", span.attributes);
        assert!(!attributes.contains(QUERY_TOKEN_PART), "{attributes}");
        assert!(
            attributes.contains("access_token=[redacted]"),
            "the URI is recorded, redacted: {attributes}"
        );
    }
    let logs = server.logs().concat();
    assert!(
        logs.contains("access_token=[redacted]"),
        "no request log line with the redacted URI:\n{}",
        server.log_tail()
    );
    assert!(
        !logs.contains(QUERY_TOKEN_PART),
        "the token is in the log:\n{}",
        server.log_tail()
    );
}
