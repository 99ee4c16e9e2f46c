//! Health, readiness, metrics and the API documents.

use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn health_and_readiness() {
    let server = Server::start().await;
    let response = server.get("/healthz").await;
    assert_eq!(response.status(), StatusCode::OK);
    let response = server.get("/readyz").await;
    assert_eq!(response.status(), StatusCode::OK);

    // Ready again with topics, once each partition has a known leader.
    server.create_topic("ready", 4).await;
    server.wait_for_leaders("ready").await;
    server.wait_for_status("/readyz", StatusCode::OK).await;
    let response = server.get("/healthz").await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn metrics_count_requests_and_traffic() {
    let server = Server::start().await;
    server.create_topic("measured", 1).await;
    server
        .produce_ok(
            "measured",
            &json!({"messages": [{"value": "x"}, {"value": "y"}]}),
        )
        .await;
    server.read_all("measured", 0).await;
    let response = server.get("/v1/topics/missing").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    let response = server.get("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await.unwrap();
    assert!(text.contains("herald_http_requests_total"), "{text}");
    // Every line is a comment or a sample `name{labels} value`.
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "not a Prometheus sample: {line}"
        );
    }
}

#[tokio::test]
async fn openapi_document_and_docs() {
    let server = Server::start().await;
    let response = server.get("/openapi.json").await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let document: Value = serde_json::from_str(&text).expect("/openapi.json is JSON");
    assert!(
        document["openapi"].as_str().unwrap_or("").starts_with('3'),
        "not an OpenAPI 3 document"
    );
    let paths = document["paths"].as_object().expect("paths");
    for path in [
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/messages",
        "/v1/topics/{topic}/partitions/{partition}/messages",
        "/v1/topics/{topic}/partitions/{partition}/offsets",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} is missing from /openapi.json"
        );
    }
    for (path, method) in [
        ("/v1/topics", "post"),
        ("/v1/topics", "get"),
        ("/v1/topics/{topic}", "get"),
        ("/v1/topics/{topic}", "patch"),
        ("/v1/topics/{topic}", "delete"),
        ("/v1/topics/{topic}/messages", "post"),
    ] {
        assert!(
            paths[path][method].is_object(),
            "{method} {path} is missing"
        );
    }

    // The committed document is the one the code serves.
    let committed_path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/herald.json");
    let committed = std::fs::read_to_string(committed_path)
        .unwrap_or_else(|err| panic!("{committed_path}: {err}"));
    let committed: Value = serde_json::from_str(&committed).expect("openapi/herald.json is JSON");
    assert!(
        committed == document,
        "openapi/herald.json differs from GET /openapi.json: regenerate the committed file"
    );

    // The docs UI is served, offline, as HTML.
    let response = server.get("/docs").await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let html = response.text().await.unwrap().to_ascii_lowercase();
    assert!(
        html.contains("<html") || html.contains("<!doctype html"),
        "{html}"
    );
}
