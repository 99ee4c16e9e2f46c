//! A policy changed on one node of a 3-node cluster with `--auth` applies on the others: the
//! policy is replicated through the metadata group and each node recompiles it on the first
//! request after it changed; tokens issued by one node are valid on all. A client deleted on one
//! node loses its sockets and event streams on the others at once.

use crate::common;

use std::time::Duration;

use crate::common::auth::{create_client, token};
use crate::common::cluster::TestCluster;
use crate::common::{poll, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn list_topics(server: &Server, token: &str) -> StatusCode {
    server
        .http_client()
        .get(server.url("/v1/topics"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

/// Waits until `GET /v1/topics` as `token` answers `expected` on every node.
async fn wait_everywhere(cluster: &TestCluster, token: &str, expected: StatusCode) {
    for id in 1..=3 {
        let node = cluster.node(id);
        poll(
            Duration::from_secs(10),
            Duration::from_millis(20),
            || async {
                match list_topics(node, token).await {
                    status if status == expected => Ok(()),
                    other => Err(format!("node {id} answered {other}")),
                }
            },
        )
        .await
        .unwrap_or_else(|seen| panic!("not {expected} within 10 s: {seen}"));
    }
}

#[tokio::test]
async fn policy_changes_and_client_deletions_apply_on_every_node() {
    let mut cluster = TestCluster::start(3).await;
    let admin_secret = create_client(cluster.node(1), "admin", &["admin"]).await;
    let viewer_secret = create_client(cluster.node(1), "viewer", &["viewer"]).await;
    let service_secret = create_client(cluster.node(1), "svc", &["admin"]).await;
    // Every node names the cluster's address as the tokens' issuer.
    let config = tempfile::tempdir().unwrap();
    let path = config.path().join("herald.toml");
    std::fs::write(&path, "[auth]\nissuer = \"https://herald.example\"\n").unwrap();
    for id in 1..=3 {
        cluster.node_mut(id).set_extra_args(vec![
            "--auth".into(),
            "--config".into(),
            path.to_str().unwrap().into(),
        ]);
    }
    cluster.restart_all(&[1, 2, 3]).await;

    // Tokens from node 2 work on every node (once the signing key its first token made has
    // reached them).
    let admin = token(cluster.node(2), "admin", &admin_secret).await;
    let viewer = token(cluster.node(2), "viewer", &viewer_secret).await;
    wait_everywhere(&cluster, &viewer, StatusCode::OK).await;
    wait_everywhere(&cluster, &admin, StatusCode::OK).await;

    // Node 1 takes the viewer's right to list topics away.
    let rules: Vec<Value> = [("admin", "*", "*"), ("viewer", "cluster:*", "view")]
        .iter()
        .map(|(role, resource, action)| json!({"role": role, "resource": resource, "action": action}))
        .collect();
    let response = cluster
        .node(1)
        .http_client()
        .put(cluster.node(1).url("/v1/auth/policies"))
        .bearer_auth(&admin)
        .json(&json!({"rules": rules}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    wait_everywhere(&cluster, &viewer, StatusCode::FORBIDDEN).await;

    // And node 3 gives it back.
    let mut rules = rules;
    rules.push(json!({"role": "viewer", "resource": "topic:*", "action": "view"}));
    let response = cluster
        .node(3)
        .http_client()
        .put(cluster.node(3).url("/v1/auth/policies"))
        .bearer_auth(&admin)
        .json(&json!({"rules": rules}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let policy: Value = response.json().await.unwrap();
    assert_eq!(policy["rules"].as_array().unwrap().len(), 3, "{policy}");
    wait_everywhere(&cluster, &viewer, StatusCode::OK).await;

    // A client with a socket on node 3 and an event stream on node 2 is deleted on node 1:
    // both end at once, not when the token expires (in an hour).
    let service = token(cluster.node(1), "svc", &service_secret).await;
    wait_everywhere(&cluster, &service, StatusCode::OK).await;
    let mut request = common::ws::ws_request(cluster.node(3), Some("herald.v1"));
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {service}").parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    // Placement takes only nodes its failure detector has seen up since the restart: a
    // replication factor of 3 needs all three.
    poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let view: Value = cluster
                .node(1)
                .http_client()
                .get(cluster.node(1).url("/v1/cluster"))
                .bearer_auth(&admin)
                .send()
                .await
                .map_err(|err| err.to_string())?
                .json()
                .await
                .map_err(|err| err.to_string())?;
            let up = view["nodes"].as_array().map_or(0, |nodes| {
                nodes.iter().filter(|n| n["status"] == "up").count()
            });
            if up == 3 {
                Ok(())
            } else {
                Err(format!("node 1 sees {up} nodes up: {view}"))
            }
        },
    )
    .await
    .unwrap_or_else(|seen| panic!("not every node up within 10 s: {seen}"));
    let created = cluster
        .node(1)
        .http_client()
        .post(cluster.node(1).url("/v1/topics"))
        .bearer_auth(&admin)
        .json(&json!({"name": "live", "replication_factor": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let mut stream = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let response = common::sse::stream_client()
                .get(
                    cluster
                        .node(2)
                        .url(&format!("/v1/topics/live/events?access_token={service}")),
                )
                .send()
                .await
                .map_err(|error| error.to_string())?;
            match response.status() {
                StatusCode::OK => Ok(common::sse::EventStream::of(response)),
                other => Err(format!("the stream answered {other}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| panic!("{seen}"));
    let deleted = std::time::Instant::now();
    let response = cluster
        .node(1)
        .http_client()
        .delete(cluster.node(1).url("/v1/auth/clients/svc"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (code, reason) = common::ws::next_close(&mut socket).await;
    assert_eq!(code, 4001, "{reason}");
    let ended = loop {
        match stream.next().await {
            Some(event) if event.event == "token_expired" => break event,
            Some(_) => continue,
            None => panic!("the stream ended without a token_expired event"),
        }
    };
    assert_eq!(ended.message()["code"], "unauthorized", "{}", ended.data);
    assert!(
        deleted.elapsed() < Duration::from_secs(10),
        "ended {:?} after the deletion",
        deleted.elapsed()
    );
}
