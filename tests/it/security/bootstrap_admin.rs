//! The bootstrap `admin` client: a cluster's first start creates it once, prints its secret
//! once and writes it to `<data_dir>/admin-credentials` readable only by its owner; restarts
//! and the other founders do not create another.

use std::path::Path;
use std::time::Duration;

use crate::common::cluster::TestCluster;
use crate::common::{poll, Server};
use reqwest::StatusCode;
use serde_json::Value;

/// The banner around the printed secret.
const BANNER: &str = "HERALD ADMIN CREDENTIALS";
const WAIT: Duration = Duration::from_secs(30);

fn credentials_path(server: &Server) -> std::path::PathBuf {
    server.data_dir().join("admin-credentials")
}

/// `client_id` and `client_secret` from the credentials file.
fn read_credentials(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).expect("read the credentials file");
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    (field("client_id"), field("client_secret"))
}

async fn wait_for_credentials(server: &Server) -> (String, String) {
    let path = credentials_path(server);
    poll(WAIT, Duration::from_millis(50), || async {
        // Complete once the banner is printed (the file is written just before).
        let printed = server.logs().iter().any(|log| log.contains(BANNER));
        if path.exists() && printed {
            Ok(())
        } else {
            Err(format!("no {} yet", path.display()))
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    read_credentials(&path)
}

async fn token_status(server: &Server, client_id: &str, secret: &str) -> (StatusCode, Value) {
    let response = server
        .http_client()
        .post(server.url("/oauth/token"))
        .basic_auth(client_id, Some(secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials")
        .send()
        .await
        .expect("POST /oauth/token");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn client_ids(server: &Server) -> Vec<String> {
    let listed: Value = server
        .get("/v1/auth/clients")
        .await
        .json()
        .await
        .expect("the clients as JSON");
    listed["clients"]
        .as_array()
        .expect("a clients array")
        .iter()
        .map(|client| client["client_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn the_first_start_creates_an_admin_whose_secret_works_and_a_restart_creates_none() {
    let mut server = Server::start().await;
    let (client_id, secret) = wait_for_credentials(&server).await;
    assert_eq!(client_id, "admin");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(credentials_path(&server))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "the file is readable by its owner only"
        );
    }
    let first_log = server.logs().concat();
    assert_eq!(first_log.matches(BANNER).count(), 1, "printed once");
    assert!(first_log.contains(&format!("client_secret: {secret}")));
    let (status, token) = token_status(&server, &client_id, &secret).await;
    assert_eq!(status, StatusCode::OK, "{token}");
    assert!(token["access_token"].is_string(), "{token}");
    let clients: Value = server
        .get("/v1/auth/clients/admin")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(clients["roles"], serde_json::json!(["admin"]), "{clients}");

    let written = std::fs::read_to_string(credentials_path(&server)).unwrap();
    server.restart().await;
    // The restarted node serves and still knows the one admin, with the same secret.
    let (status, _) = token_status(&server, &client_id, &secret).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(client_ids(&server).await, vec!["admin".to_string()]);
    assert_eq!(
        std::fs::read_to_string(credentials_path(&server)).unwrap(),
        written
    );
    let logs = server.logs();
    assert_eq!(logs.len(), 2);
    assert!(
        !logs[1].contains(BANNER) && !logs[1].contains(&secret),
        "a restart prints no secret:\n{}",
        logs[1]
    );
}

#[tokio::test]
async fn bootstrap_admin_false_creates_no_client() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(&config, "[auth]\nbootstrap_admin = false\n").unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]).await;
    // A client created after the start is listed alone: no admin was made before it.
    let created = server
        .post_json(
            "/v1/auth/clients",
            &serde_json::json!({"client_id": "probe", "roles": ["viewer"]}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(client_ids(&server).await, vec!["probe".to_string()]);
    assert!(!credentials_path(&server).exists());
    assert!(!server.logs().concat().contains(BANNER));
}

#[tokio::test]
async fn a_three_node_cluster_creates_exactly_one_admin() {
    let cluster = TestCluster::start(3).await;
    let ids = cluster.ids();
    let found = poll(WAIT, Duration::from_millis(100), || async {
        let with_file: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| credentials_path(cluster.node(*id)).exists())
            .collect();
        if with_file.is_empty() {
            Err("no node wrote admin credentials yet".to_string())
        } else {
            Ok(with_file)
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
    assert_eq!(found.len(), 1, "nodes {found:?} wrote credentials");
    let founder = cluster.node(found[0]);
    let (client_id, secret) = wait_for_credentials(founder).await;
    // Every node knows the one admin, and any node issues it a token.
    for id in &ids {
        let node = cluster.node(*id);
        let admins = poll(WAIT, Duration::from_millis(100), || async {
            let listed = client_ids(node).await;
            if listed.is_empty() {
                Err("no clients yet".to_string())
            } else {
                Ok(listed)
            }
        })
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
        assert_eq!(admins, vec!["admin".to_string()], "node {id}");
        assert_eq!(
            token_status(node, &client_id, &secret).await.0,
            StatusCode::OK
        );
    }
    let printed: usize = ids
        .iter()
        .map(|id| cluster.node(*id).logs().concat().matches(BANNER).count())
        .sum();
    assert_eq!(printed, 1, "printed once, by one node");
}
