//! The registry's REST answers as Confluent's clients read them, and its refusals: malformed
//! schemas, unknown ids and versions, bad levels, deletes out of order and messages that do not
//! follow a topic's subject are 4xx problem+json with Confluent's `error_code` beside the
//! problem's `code`, change nothing, and never a 5xx.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{b64, Server};

const R: &str = "/schema-registry";

async fn register(server: &Server, subject: &str, body: &Value) -> (StatusCode, Value) {
    let path = format!("{R}/subjects/{subject}/versions");
    // Confluent's clients send their own media type.
    let response = server
        .post_raw(
            &path,
            "application/vnd.schemaregistry.v1+json",
            body.to_string().into_bytes(),
        )
        .await;
    server.json(response).await
}

/// A refusal: its status, problem `code` and Confluent `error_code`.
async fn refusal(
    server: &Server,
    response: reqwest::Response,
    status: StatusCode,
    code: &str,
    error_code: u64,
) -> Value {
    let body = server.expect_problem(response, status, code).await;
    assert_eq!(body["error_code"], error_code, "{body}");
    assert_eq!(body["message"], body["detail"], "{body}");
    body
}

fn avro_record(fields: Value) -> Value {
    json!({"schema": json!({"type": "record", "name": "User", "fields": fields}).to_string()})
}

#[tokio::test]
async fn the_registry_answers_and_refuses_as_confluent_clients_expect() {
    let server = Server::start().await;
    let v1 = avro_record(json!([{"name": "id", "type": "long"}]));
    let (status, first) = register(&server, "users-value", &v1).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let id = first["id"].as_u64().expect("an id");
    // The same schema again, here or under another subject: the same id.
    let (_, again) = register(&server, "users-value", &v1).await;
    assert_eq!(again["id"], id);
    let (_, elsewhere) = register(&server, "people-value", &v1).await;
    assert_eq!(elsewhere["id"], id);

    let (status, subjects) = server
        .json(server.get(&format!("{R}/subjects")).await)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(subjects, json!(["people-value", "users-value"]));
    let (_, by_id) = server
        .json(server.get(&format!("{R}/schemas/ids/{id}")).await)
        .await;
    assert_eq!(by_id["schema"], v1["schema"]);
    assert!(
        by_id.get("schemaType").is_none(),
        "Avro has no schemaType: {by_id}"
    );
    let (_, version) = server
        .json(
            server
                .get(&format!("{R}/subjects/users-value/versions/latest"))
                .await,
        )
        .await;
    assert_eq!(version["version"], 1);
    assert_eq!(version["subject"], "users-value");
    let (_, types) = server
        .json(server.get(&format!("{R}/schemas/types")).await)
        .await;
    assert_eq!(types, json!(["AVRO", "JSON", "PROTOBUF"]));

    // Malformed schemas: 422 invalid_schema (42201), nothing registered.
    for bad in [
        json!({"schema": "{not json"}),
        json!({"schema": "{\"type\": \"no-such-type\"}"}),
        json!({"schema": "syntax = \"proto3\"; message {", "schemaType": "PROTOBUF"}),
        json!({"schema": "{\"type\": 5}", "schemaType": "JSON"}),
        json!({"schema": "\"string\"", "schemaType": "XML"}),
        json!({"schema": "\"string\"", "references": [{"name": "x", "subject": "missing", "version": 1}]}),
    ] {
        let response = server
            .post_json(&format!("{R}/subjects/users-value/versions"), &bad)
            .await;
        refusal(
            &server,
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_schema",
            42201,
        )
        .await;
    }
    // A body that is not a schema request at all.
    let response = server
        .post_raw(
            &format!("{R}/subjects/users-value/versions"),
            "application/json",
            b"[1,2]".to_vec(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let (_, versions) = server
        .json(
            server
                .get(&format!("{R}/subjects/users-value/versions"))
                .await,
        )
        .await;
    assert_eq!(
        versions,
        json!([1]),
        "a refused registration left a version"
    );

    // An incompatible change under BACKWARD: 409 with what breaks.
    let v2 =
        avro_record(json!([{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]));
    let response = server
        .post_json(&format!("{R}/subjects/users-value/versions"), &v2)
        .await;
    let body = refusal(
        &server,
        response,
        StatusCode::CONFLICT,
        "incompatible_schema",
        409,
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap_or("").contains("name"),
        "{body}"
    );
    let (status, verdict) = server
        .json(
            server
                .post_json(
                    &format!("{R}/compatibility/subjects/users-value/versions/latest?verbose=true"),
                    &v2,
                )
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(verdict["is_compatible"], false, "{verdict}");
    assert!(!verdict["messages"].as_array().expect("messages").is_empty());
    // Under NONE it registers.
    let response = server
        .put_json(
            &format!("{R}/config/users-value"),
            &json!({"compatibility": "NONE"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let (status, _) = register(&server, "users-value", &v2).await;
    assert_eq!(status, StatusCode::OK);
    let response = server
        .put_json(
            &format!("{R}/config"),
            &json!({"compatibility": "SOMETIMES"}),
        )
        .await;
    refusal(
        &server,
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_compatibility_level",
        42203,
    )
    .await;

    // Unknown ids, subjects and versions.
    refusal(
        &server,
        server.get(&format!("{R}/schemas/ids/99999")).await,
        StatusCode::NOT_FOUND,
        "schema_not_found",
        40403,
    )
    .await;
    refusal(
        &server,
        server.get(&format!("{R}/subjects/nobody/versions")).await,
        StatusCode::NOT_FOUND,
        "subject_not_found",
        40401,
    )
    .await;
    refusal(
        &server,
        server
            .get(&format!("{R}/subjects/users-value/versions/7"))
            .await,
        StatusCode::NOT_FOUND,
        "version_not_found",
        40402,
    )
    .await;
    refusal(
        &server,
        server
            .get(&format!("{R}/subjects/users-value/versions/zero"))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_version",
        42202,
    )
    .await;
    refusal(
        &server,
        server.get(&format!("{R}/config/people-value")).await,
        StatusCode::NOT_FOUND,
        "subject_level_not_set",
        40408,
    )
    .await;

    // Deletes: permanent only after soft.
    refusal(
        &server,
        server
            .delete(&format!("{R}/subjects/people-value?permanent=true"))
            .await,
        StatusCode::NOT_FOUND,
        "subject_not_soft_deleted",
        40405,
    )
    .await;
    let (status, deleted) = server
        .json(server.delete(&format!("{R}/subjects/people-value")).await)
        .await;
    assert_eq!((status, deleted), (StatusCode::OK, json!([1])));
    refusal(
        &server,
        server.delete(&format!("{R}/subjects/people-value")).await,
        StatusCode::NOT_FOUND,
        "subject_soft_deleted",
        40404,
    )
    .await;
    // The id still resolves (users-value holds it too, and soft-deleted versions keep it).
    assert_eq!(
        server.get(&format!("{R}/schemas/ids/{id}")).await.status(),
        StatusCode::OK
    );
    let (status, deleted) = server
        .json(
            server
                .delete(&format!("{R}/subjects/people-value?permanent=true"))
                .await,
        )
        .await;
    assert_eq!((status, deleted), (StatusCode::OK, json!([1])));
}

#[tokio::test]
async fn a_topic_with_a_value_subject_refuses_what_does_not_follow_it_and_writes_nothing() {
    let server = Server::start().await;
    let schema = json!({
        "type": "object",
        "properties": {"amount": {"type": "integer", "minimum": 0}},
        "required": ["amount"],
    });
    let (status, registered) = register(
        &server,
        "payments-value",
        &json!({"schema": schema.to_string(), "schemaType": "JSON"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{registered}");
    let id = registered["id"].as_u64().expect("an id") as u32;

    // A topic may name only a subject that exists.
    let response = server
        .post_json(
            "/v1/topics",
            &json!({"name": "payments", "config": {"value_subject": "nobody"}}),
        )
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "subject_not_found")
        .await;
    let response = server
        .post_json(
            "/v1/topics",
            &json!({"name": "payments", "config": {"value_subject": "payments-value"}}),
        )
        .await;
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );

    let ok = server
        .post_json(
            "/v1/topics/payments/messages",
            &json!({"messages": [{"value": {"amount": 5}}]}),
        )
        .await;
    assert!(ok.status().is_success());
    let mut framed = vec![0u8];
    framed.extend_from_slice(&id.to_be_bytes());
    framed.extend_from_slice(br#"{"amount": 7}"#);
    let ok = server
        .post_json(
            "/v1/topics/payments/messages",
            &json!({"messages": [{"value_b64": b64(&framed)}]}),
        )
        .await;
    assert!(ok.status().is_success());

    let mut wrong_id = vec![0u8, 0, 0, 0x30, 0x39];
    wrong_id.extend_from_slice(br#"{"amount": 7}"#);
    let bad_messages = [
        json!({"value": {"amount": -1}}),
        json!({"value": {"other": 1}}),
        json!({"value_b64": b64(b"not framed")}),
        json!({"value_b64": b64(&[0u8, 0, 0])}),
        json!({"value_b64": b64(&wrong_id)}),
        json!({"value_b64": b64(&[&framed[..5], b"{not json"].concat())}),
    ];
    for bad in bad_messages {
        let response = server
            .post_json(
                "/v1/topics/payments/messages",
                &json!({"messages": [{"value": {"amount": 1}}, bad]}),
            )
            .await;
        let body = server
            .expect_problem(
                response,
                StatusCode::BAD_REQUEST,
                "schema_validation_failed",
            )
            .await;
        assert!(
            body["detail"].as_str().unwrap_or("").contains("message 1"),
            "{body}"
        );
    }
    // Nothing of the refused requests was written: the two good messages only.
    let (_, topic) = server.json(server.get("/v1/topics/payments").await).await;
    assert_eq!(topic["partitions"][0]["high_watermark"], 2, "{topic}");
    assert_eq!(topic["config"]["value_subject"], "payments-value");

    // Read decoded: the framed JSON value comes back as JSON with its schema.
    let (_, read) = server
        .json(
            server
                .get("/v1/topics/payments/partitions/0/messages?decode=json")
                .await,
        )
        .await;
    assert_eq!(read["messages"][1]["value"], json!({"amount": 7}), "{read}");
    assert_eq!(read["messages"][1]["value_schema"]["id"], id);

    // Clearing the subject lets anything in again.
    let response = server
        .patch_json(
            "/v1/topics/payments",
            &json!({"config": {"value_subject": null}}),
        )
        .await;
    assert!(response.status().is_success());
    let ok = server
        .post_json(
            "/v1/topics/payments/messages",
            &json!({"messages": [{"value": {"other": 1}}]}),
        )
        .await;
    assert!(ok.status().is_success());
}
