//! OAuth2 clients and tokens of the built-in issuer, as tests need them: a client created over
//! the API (its secret shown once), and a token for it by the client-credentials grant with
//! HTTP Basic authentication.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::Server;

/// Creates the client `id` with `roles` and answers its secret. The client `admin` with role
/// `admin` is the bootstrap admin every cluster makes on its first start: it is taken over by
/// rotating its secret.
pub async fn create_client(server: &Server, id: &str, roles: &[&str]) -> String {
    let response = server
        .post_json(
            "/v1/auth/clients",
            &json!({"client_id": id, "roles": roles}),
        )
        .await;
    let (status, body) = server.json(response).await;
    if status == StatusCode::CONFLICT && id == "admin" && roles == ["admin"] {
        let response = server
            .post_json("/v1/auth/clients/admin/secret", &json!({}))
            .await;
        let (status, body) = server.json(response).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        return body["client_secret"].as_str().unwrap().to_string();
    }
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["client_id"], id);
    body["client_secret"].as_str().unwrap().to_string()
}

/// The token endpoint's answer (status and body) to client `id` authenticating with `secret`.
pub async fn token_by_basic(server: &Server, id: &str, secret: &str) -> (StatusCode, Value) {
    let response = server
        .http_client()
        .post(server.url("/oauth/token"))
        .header(
            "authorization",
            format!("Basic {}", STANDARD.encode(format!("{id}:{secret}"))),
        )
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// A token for client `id`; the grant must succeed.
pub async fn token(server: &Server, id: &str, secret: &str) -> String {
    let (status, body) = token_by_basic(server, id, secret).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["access_token"].as_str().unwrap().to_string()
}
