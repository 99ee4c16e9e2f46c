//! Topics over HTTP: create, list, describe, grow, change config, delete and reuse the name.

use std::time::Duration;

use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn topic_names(list: &Value) -> Vec<String> {
    list["topics"]
        .as_array()
        .unwrap_or_else(|| panic!("no topics array: {list}"))
        .iter()
        .map(|t| t["name"].as_str().expect("topic name").to_string())
        .collect()
}

fn assert_partitions(topic: &Value, count: usize) {
    let partitions = topic["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no partitions array: {topic}"));
    assert_eq!(partitions.len(), count, "{topic}");
    let mut ids: Vec<u64> = partitions
        .iter()
        .map(|p| p["partition"].as_u64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, (0..count as u64).collect::<Vec<_>>(), "{topic}");
    for p in partitions {
        assert!(p["log_start_offset"].is_u64(), "{p}");
        assert!(p["high_watermark"].is_u64(), "{p}");
        assert!(p["replicas"].is_array(), "{p}");
        assert!(p["in_sync"].is_array(), "{p}");
        // One node: it is the only replica, and the leader once the group has elected one.
        assert!(p["leader"] == 1 || p["leader"].is_null(), "{p}");
        assert_eq!(p["replicas"], json!([1]), "{p}");
    }
}

#[tokio::test]
async fn create_list_describe() {
    let server = Server::start().await;

    let created = server.create_topic("orders", 3).await;
    assert_eq!(created["name"], "orders");
    assert_eq!(created["replication_factor"], 1);
    assert_partitions(&created, 3);
    for p in created["partitions"].as_array().unwrap() {
        assert_eq!(p["log_start_offset"], 0);
        assert_eq!(p["high_watermark"], 0);
    }
    // Defaults of API.md.
    let config = &created["config"];
    assert_eq!(
        config["retention_ms"],
        7 * 24 * 60 * 60 * 1000_i64,
        "{config}"
    );
    assert_eq!(config["retention_bytes"], -1, "{config}");
    assert_eq!(config["cleanup_policy"], "delete", "{config}");
    assert_eq!(config["compression"], "none", "{config}");
    assert!(
        config["max_message_bytes"].as_u64().unwrap_or(0) > 0,
        "{config}"
    );

    // Partitions default to 1; a config is accepted at creation.
    let created = server
        .create_topic_with(&json!({
            "name": "audit.log_v2",
            "config": {"retention_ms": 3_600_000, "compression": "zstd", "cleanup_policy": "compact"}
        }))
        .await;
    assert_partitions(&created, 1);
    assert_eq!(created["config"]["retention_ms"], 3_600_000);
    assert_eq!(created["config"]["compression"], "zstd");
    assert_eq!(created["config"]["cleanup_policy"], "compact");

    // Creating it again with other partitions, replication or config is a conflict and
    // changes nothing.
    for different in [
        json!({"name": "orders", "partitions": 7}),
        json!({"name": "orders", "partitions": 3, "config": {"compression": "lz4"}}),
    ] {
        let response = server.post_json("/v1/topics", &different).await;
        server
            .expect_problem(response, StatusCode::CONFLICT, "topic_exists")
            .await;
    }
    assert_partitions(&server.describe("orders").await, 3);
    assert_eq!(
        server.describe("orders").await["config"]["compression"],
        "none"
    );

    // The same create again (a client retrying after a lost answer) answers 200 with the
    // topic as it is: nothing is created twice.
    for _ in 0..2 {
        let response = server
            .post_json("/v1/topics", &json!({"name": "orders", "partitions": 3}))
            .await;
        let (status, again) = server.json(response).await;
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["name"], "orders");
        assert_partitions(&again, 3);
    }
    let response = server
        .post_json(
            "/v1/topics",
            &json!({
                "name": "audit.log_v2",
                "config": {"retention_ms": 3_600_000, "compression": "zstd", "cleanup_policy": "compact"}
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);

    let (status, list) = server.json(server.get("/v1/topics").await).await;
    assert_eq!(status, StatusCode::OK);
    let mut names = topic_names(&list);
    names.sort();
    assert_eq!(
        names,
        vec!["audit.log_v2".to_string(), "orders".to_string()]
    );

    server.wait_for_leaders("orders").await;
    let described = server.describe("orders").await;
    assert_eq!(described["name"], "orders");
    assert_partitions(&described, 3);
    assert_eq!(
        described["config"],
        server.describe("orders").await["config"]
    );
}

#[tokio::test]
async fn grow_partitions_and_change_config() {
    let server = Server::start().await;
    server.create_topic("growing", 2).await;
    server
        .produce_ok(
            "growing",
            &json!({"messages": [{"value": 1, "partition": 1}]}),
        )
        .await;

    let response = server
        .patch_json("/v1/topics/growing", &json!({"partitions": 5}))
        .await;
    let (status, topic) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{topic}");
    assert_partitions(&topic, 5);
    assert_partitions(&server.describe("growing").await, 5);
    // The same grow again (a retry) succeeds and adds nothing.
    let response = server
        .patch_json("/v1/topics/growing", &json!({"partitions": 5}))
        .await;
    let (status, topic) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{topic}");
    assert_partitions(&topic, 5);
    // Existing data is untouched; the new partitions are empty and usable.
    assert_eq!(server.high_watermarks("growing").await, vec![0, 1, 0, 0, 0]);
    let offsets = server
        .produce_ok(
            "growing",
            &json!({"messages": [{"value": "new", "partition": 4}]}),
        )
        .await;
    assert_eq!(offsets, vec![(4, 0)]);

    // Partitions only grow.
    let response = server
        .patch_json("/v1/topics/growing", &json!({"partitions": 3}))
        .await;
    server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    assert_partitions(&server.describe("growing").await, 5);

    // Config changes are kept, other keys keep their values.
    let before = server.describe("growing").await["config"].clone();
    let response = server
        .patch_json(
            "/v1/topics/growing",
            &json!({"config": {"retention_ms": 60_000, "max_message_bytes": 2048}}),
        )
        .await;
    let (status, topic) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{topic}");
    let config = server.describe("growing").await["config"].clone();
    assert_eq!(config["retention_ms"], 60_000, "{config}");
    assert_eq!(config["max_message_bytes"], 2048, "{config}");
    assert_eq!(config["compression"], before["compression"], "{config}");
    assert_eq!(
        config["cleanup_policy"], before["cleanup_policy"],
        "{config}"
    );
    assert_eq!(
        config["retention_bytes"], before["retention_bytes"],
        "{config}"
    );
    assert_partitions(&server.describe("growing").await, 5);

    // An invalid config is refused and changes nothing.
    for bad in [
        json!({"config": {"retention_ms": -5}}),
        json!({"config": {"compression": "snappy-ish"}}),
        json!({"config": {"cleanup_policy": "shred"}}),
        json!({"config": {"max_message_bytes": 0}}),
        json!({"partitions": 0}),
        json!({"partitions": 5000}),
    ] {
        let response = server.patch_json("/v1/topics/growing", &bad).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    assert_eq!(server.describe("growing").await["config"], config);
    assert_partitions(&server.describe("growing").await, 5);

    let response = server
        .patch_json("/v1/topics/nope", &json!({"partitions": 3}))
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
}

#[tokio::test]
async fn delete_removes_data_and_frees_the_name() {
    let server = Server::start().await;
    server.create_topic("doomed", 2).await;
    server.create_topic("survivor", 1).await;
    let messages: Vec<Value> = (0..10)
        .map(|i| json!({"value": {"i": i}, "partition": i % 2}))
        .collect();
    server
        .produce_ok("doomed", &json!({ "messages": messages }))
        .await;
    server
        .produce_ok("survivor", &json!({"messages": [{"value": "stay"}]}))
        .await;
    assert_eq!(server.high_watermarks("doomed").await, vec![5, 5]);

    let response = server.delete("/v1/topics/doomed").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let response = server.get("/v1/topics/doomed").await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
    let response = server.fetch_response("doomed", 0, "offset=earliest").await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
    let (_, list) = server.json(server.get("/v1/topics").await).await;
    assert_eq!(topic_names(&list), vec!["survivor".to_string()]);
    // A retried delete (its first answer lost) succeeds again; a topic that never existed is
    // still 404.
    let response = server.delete("/v1/topics/doomed").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let response = server.delete("/v1/topics/never-was").await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;

    // The name is free again, and the new topic starts empty: nothing of the old data shows.
    let recreated = server.create_topic("doomed", 2).await;
    assert_partitions(&recreated, 2);
    assert_eq!(server.high_watermarks("doomed").await, vec![0, 0]);
    for partition in 0..2 {
        let answer = server
            .fetch_raw("doomed", partition, "offset=earliest")
            .await;
        assert!(answer.messages.is_empty(), "{answer:?}");
        assert_eq!(answer.high_watermark, 0);
        assert_eq!(answer.log_start_offset, 0);
        assert_eq!(answer.next_offset, 0);
    }
    let offsets = server
        .produce_ok(
            "doomed",
            &json!({"messages": [{"value": "fresh", "partition": 0}]}),
        )
        .await;
    assert_eq!(offsets, vec![(0, 0)]);
    let messages = server.read_all("doomed", 0).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].value_text(), "\"fresh\"");

    // The other topic is untouched.
    let messages = server.read_all("survivor", 0).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].value_text(), "\"stay\"");
}

#[tokio::test]
async fn create_refuses_bad_input() {
    let server = Server::start().await;
    let long = "x".repeat(250);
    let bodies = [
        json!({"name": "bad name", "partitions": 1}),
        json!({"name": "slash/name", "partitions": 1}),
        json!({"name": "ünïcode", "partitions": 1}),
        json!({"name": "", "partitions": 1}),
        json!({"name": ".", "partitions": 1}),
        json!({"name": "..", "partitions": 1}),
        json!({"name": long, "partitions": 1}),
        json!({"name": "ok", "partitions": 0}),
        json!({"name": "ok", "partitions": 1025}),
        json!({"name": "ok", "partitions": -1}),
        json!({"name": "ok", "partitions": "three"}),
        json!({"name": 42, "partitions": 1}),
        json!({"partitions": 1}),
        json!({"name": "ok", "config": {"retention_ms": "forever"}}),
        json!({"name": "ok", "config": {"compression": "rar"}}),
        json!({"name": "ok", "config": {"max_message_bytes": -1}}),
        json!({"name": "ok", "config": "none"}),
        json!(["ok"]),
    ];
    for body in bodies {
        let response = server.post_json("/v1/topics", &body).await;
        let problem = server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
        assert!(
            !problem["detail"].as_str().unwrap().is_empty(),
            "{body}: {problem}"
        );
    }
    let response = server
        .post_raw("/v1/topics", "application/json", "{\"name\": \"ok\", ")
        .await;
    server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;

    // Nothing was created.
    let (_, list) = server.json(server.get("/v1/topics").await).await;
    assert!(topic_names(&list).is_empty(), "{list}");

    // 249 characters is the limit and is fine.
    let longest = "y".repeat(249);
    server.create_topic(&longest, 1).await;
    let (_, list) = server.json(server.get("/v1/topics").await).await;
    assert_eq!(topic_names(&list), vec![longest]);
}

#[tokio::test]
async fn the_largest_topic_is_accepted() {
    let server = Server::start().await;
    let topic = server.create_topic("wide", 1024).await;
    assert_partitions(&topic, 1024);
    // Starting 1024 raft groups takes a moment; then every partition has its leader.
    server.wait_for_leaders("wide").await;
    let offsets = server
        .produce_ok(
            "wide",
            &json!({"messages": [{"value": 1, "partition": 1023}]}),
        )
        .await;
    assert_eq!(offsets, vec![(1023, 0)]);
}

#[tokio::test]
async fn topics_list_in_pages_with_a_prefix() {
    let server = Server::start().await;
    // 25 topics in two families, created out of name order.
    for n in (0..20).rev() {
        server.create_topic(&format!("page-{n:02}"), 1).await;
    }
    for n in 0..5 {
        server.create_topic(&format!("other-{n}"), 1).await;
    }

    // Without `limit`: every topic, no token (the answer it always was).
    let (status, all) = server.json(server.get("/v1/topics").await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all["topics"].as_array().map(Vec::len), Some(25), "{all}");
    assert!(all.get("next_page_token").is_none(), "{all}");

    // Pages of 8 with the prefix: 8 + 8 + 4, in name order, each name once.
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    for page in 0.. {
        assert!(page < 5, "more pages than topics");
        let mut path = "/v1/topics?limit=8&prefix=page-".to_string();
        if let Some(token) = &token {
            path.push_str(&format!("&page_token={token}"));
        }
        let (status, answer) = server.json(server.get(&path).await).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let topics = answer["topics"].as_array().expect("topics");
        assert!(topics.len() <= 8);
        names.extend(
            topics
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string()),
        );
        match answer["next_page_token"].as_str() {
            Some(next) => token = Some(next.to_string()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..20).map(|n| format!("page-{n:02}")).collect();
    assert_eq!(names, expected);

    // Bad paging is 400 and lists nothing.
    for bad in [
        "/v1/topics?limit=0",
        "/v1/topics?limit=1001",
        "/v1/topics?limit=5&page_token=not-a-token!",
        "/v1/topics?page_token=cGFnZS0wMQ",
    ] {
        let response = server.get(bad).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }

    // The CLI pages through everything.
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["topics", "list", "--server", &server.base_url()])
            .env_remove("HERALD_SERVER")
            .output(),
    )
    .await
    .expect("herald topics list in time")
    .expect("run herald topics list");
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{listed}");
    assert_eq!(listed.lines().count(), 26, "a header and 25 rows: {listed}");
}
