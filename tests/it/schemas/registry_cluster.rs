//! The registry on three nodes: a schema registered through one node is visible and enforced
//! through the others at once (no waiting: a node that does not know an id yet catches up with
//! the metadata leader before it answers), and the registry survives the loss of a node.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{avro_long, framed};
use crate::common::b64;
use crate::common::cluster::TestCluster;

const R: &str = "/schema-registry";

fn order_schema(fields: Value) -> Value {
    json!({"schema": json!({"type": "record", "name": "Order", "fields": fields}).to_string()})
}

#[tokio::test]
async fn a_schema_registered_through_one_node_is_known_and_enforced_on_the_others_at_once() {
    let mut cluster = TestCluster::start(3).await;
    let (node1, node2, node3) = (cluster.node(1), cluster.node(2), cluster.node(3));
    let v1 = order_schema(json!([{"name": "id", "type": "long"}]));
    // A new cluster takes the registry once every node reported its wire version (503 until
    // the cluster version rises, a moment after the start).
    let registered = crate::common::poll(
        crate::common::LEADER_DEADLINE,
        std::time::Duration::from_millis(100),
        || async {
            let response = node1
                .post_json(&format!("{R}/subjects/orders-value/versions"), &v1)
                .await;
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            match status {
                StatusCode::OK => Ok(body),
                StatusCode::SERVICE_UNAVAILABLE => Err(format!("{status}: {body}")),
                _ => panic!("registration answered {status}: {body}"),
            }
        },
    )
    .await
    .unwrap_or_else(|error| cluster.fail(&format!("the registry never took a schema: {error}")));
    let id = registered["id"].as_u64().expect("an id") as u32;

    // At once, through the others.
    let (status, by_id) = node2
        .json(node2.get(&format!("{R}/schemas/ids/{id}")).await)
        .await;
    assert_eq!(status, StatusCode::OK, "{by_id}");
    assert_eq!(by_id["schema"], v1["schema"]);
    let (status, latest) = node3
        .json(
            node3
                .get(&format!("{R}/subjects/orders-value/versions/latest"))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{latest}");
    assert_eq!(latest["id"], id);

    // A topic bound to the subject through node 2, produced to through node 3.
    let response = node2
        .post_json(
            "/v1/topics",
            &json!({"name": "orders", "partitions": 2, "replication_factor": 3,
                    "config": {"value_subject": "orders-value"}}),
        )
        .await;
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );
    let good = framed(id, &avro_long(42));
    let response = node3
        .post_json(
            "/v1/topics/orders/messages",
            &json!({"messages": [{"key": "a", "value_b64": b64(&good)}]}),
        )
        .await;
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );
    let trailing = framed(id, &[avro_long(42), vec![1]].concat());
    let response = node1
        .post_json(
            "/v1/topics/orders/messages",
            &json!({"messages": [{"key": "a", "value_b64": b64(&trailing)}]}),
        )
        .await;
    node1
        .expect_problem(
            response,
            StatusCode::BAD_REQUEST,
            "schema_validation_failed",
        )
        .await;

    // A new version through node 3 is enforced through node 1 at once: a payload of version 2
    // (two longs) is taken.
    let v2 = order_schema(json!([
        {"name": "id", "type": "long"},
        {"name": "count", "type": "long", "default": 0},
    ]));
    let (status, second) = node3
        .json(
            node3
                .post_json(&format!("{R}/subjects/orders-value/versions"), &v2)
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let id2 = second["id"].as_u64().expect("an id") as u32;
    let response = node1
        .post_json(
            "/v1/topics/orders/messages",
            &json!({"messages": [{"key": "b", "value_b64": b64(&framed(id2, &[avro_long(1), avro_long(2)].concat()))}]}),
        )
        .await;
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );

    // The registry survives the loss of a node: node 1 goes, the others register and answer.
    cluster.kill(1);
    let (node2, node3) = (cluster.node(2), cluster.node(3));
    let v3 = order_schema(json!([
        {"name": "id", "type": "long"},
        {"name": "count", "type": "long", "default": 0},
        {"name": "note", "type": "string", "default": ""},
    ]));
    let registered = crate::common::poll(
        crate::common::LEADER_DEADLINE,
        std::time::Duration::from_millis(200),
        || async {
            let response = node2
                .post_json(&format!("{R}/subjects/orders-value/versions"), &v3)
                .await;
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            if status == StatusCode::OK {
                Ok(body)
            } else {
                Err(format!("{status}: {body}"))
            }
        },
    )
    .await
    .unwrap_or_else(|error| cluster.fail(&format!("no registration without node 1: {error}")));
    let (status, versions) = node3
        .json(
            node3
                .get(&format!("{R}/subjects/orders-value/versions"))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(versions, json!([1, 2, 3]), "{registered}");
}
