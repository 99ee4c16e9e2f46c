//! The CLI's authentication and TLS: `herald auth clients ...`, a token fetched with client
//! credentials and sent as `Authorization: Bearer` on every request, and `--ca-cert` for a
//! node whose certificate a private CA signed (HTTPS and the WebSocket of `consume --follow`).

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::common::tls::TestCa;
use crate::common::Server;
use axum::http::HeaderMap;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::process::Command;

const CLI_DEADLINE: Duration = Duration::from_secs(30);

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `herald <args>` (the caller gives `--server`), with a deadline and none of the
/// environment's `HERALD_*`.
async fn herald(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERALD_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    let output = tokio::time::timeout(CLI_DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("herald {args:?} did not finish in {CLI_DEADLINE:?}"))
        .expect("run the herald CLI");
    Output {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn succeeded(args: &[&str], output: &Output) {
    assert!(
        output.success,
        "herald {args:?} failed\nstdout:\n{}\nstderr:\n{}",
        output.stdout, output.stderr
    );
}

#[tokio::test]
async fn auth_clients_are_created_listed_rotated_and_deleted() {
    let server = Server::start().await;
    let url = server.base_url();
    let create = [
        "auth", "clients", "create", "ingest", "--role", "producer", "--role", "viewer",
        "--server", &url,
    ];
    let created = herald(&create, &[]).await;
    succeeded(&create, &created);
    let answer: Value = serde_json::from_str(&created.stdout).expect("the new client as JSON");
    assert_eq!(answer["client_id"], "ingest");
    assert_eq!(answer["roles"], json!(["producer", "viewer"]));
    let secret = answer["client_secret"]
        .as_str()
        .expect("the secret")
        .to_string();
    assert!(created.stderr.contains("shown once"), "{}", created.stderr);

    let list = ["auth", "clients", "list", "--server", &url];
    let listed = herald(&list, &[]).await;
    succeeded(&list, &listed);
    let line = listed
        .stdout
        .lines()
        .find(|line| line.starts_with("ingest "))
        .unwrap_or_else(|| panic!("ingest is not listed:\n{}", listed.stdout));
    assert!(line.contains("producer,viewer"), "{line}");
    assert!(!listed.stdout.contains(&secret), "secrets are never listed");

    let rotate = [
        "auth",
        "clients",
        "rotate-secret",
        "ingest",
        "--server",
        &url,
    ];
    let rotated = herald(&rotate, &[]).await;
    succeeded(&rotate, &rotated);
    let answer: Value = serde_json::from_str(&rotated.stdout).unwrap();
    assert_ne!(answer["client_secret"].as_str(), Some(secret.as_str()));

    let delete = ["auth", "clients", "delete", "ingest", "--server", &url];
    succeeded(&delete, &herald(&delete, &[]).await);
    let listed = herald(&list, &[]).await;
    assert!(!listed.stdout.contains("ingest"), "{}", listed.stdout);
    let again = herald(&delete, &[]).await;
    assert!(!again.success);
    assert!(
        again.stderr.contains("client_not_found"),
        "{}",
        again.stderr
    );
}

#[tokio::test]
async fn client_credentials_get_a_token_from_a_real_node_and_a_wrong_secret_is_refused() {
    let server = Server::start().await;
    let url = server.base_url();
    let created = server
        .post_json(
            "/v1/auth/clients",
            &json!({"client_id": "cli", "roles": ["admin"]}),
        )
        .await;
    let (_, created) = server.json(created).await;
    let secret = created["client_secret"].as_str().unwrap().to_string();

    let args = ["topics", "create", "authed", "--server", &url];
    let output = herald(
        &args,
        &[
            ("HERALD_CLIENT_ID", "cli"),
            ("HERALD_CLIENT_SECRET", &secret),
        ],
    )
    .await;
    succeeded(&args, &output);
    let args = [
        "topics",
        "list",
        "--client-id",
        "cli",
        "--client-secret",
        &secret,
        "--server",
        &url,
    ];
    let output = herald(&args, &[]).await;
    succeeded(&args, &output);
    assert!(output.stdout.contains("authed"), "{}", output.stdout);

    let wrong = [
        "topics",
        "list",
        "--client-id",
        "cli",
        "--client-secret",
        "not-it",
        "--server",
        &url,
    ];
    let output = herald(&wrong, &[]).await;
    assert!(
        !output.success,
        "a wrong secret must fail: {}",
        output.stdout
    );
    assert!(
        output.stderr.contains("could not get a token") && output.stderr.contains("invalid_client"),
        "{}",
        output.stderr
    );
}

/// What the recording server saw: each request's path and `Authorization` header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A stand-in for a node that records who called: it issues the token `token-1` and answers
/// `GET /v1/topics` with no topics.
async fn recording_server() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let record = |seen: Seen, path: &'static str| {
        move |headers: HeaderMap| {
            let authorization = headers
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .map(str::to_string);
            seen.lock().push((path.to_string(), authorization));
            async {}
        }
    };
    let (token_seen, topics_seen) = (seen.clone(), seen.clone());
    let app = axum::Router::new()
        .route(
            "/oauth/token",
            axum::routing::post(move |headers: HeaderMap| {
                let recorded = record(token_seen.clone(), "/oauth/token")(headers);
                async move {
                    recorded.await;
                    axum::Json(json!({
                        "access_token": "token-1", "token_type": "Bearer", "expires_in": 3600
                    }))
                }
            }),
        )
        .route(
            "/v1/topics",
            axum::routing::get(move |headers: HeaderMap| {
                let recorded = record(topics_seen.clone(), "/v1/topics")(headers);
                async move {
                    recorded.await;
                    axum::Json(json!({"topics": []}))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, seen)
}

#[tokio::test]
async fn every_request_carries_the_fetched_token_as_bearer() {
    let (address, seen) = recording_server().await;
    let url = format!("http://{address}");
    let args = [
        "topics",
        "list",
        "--client-id",
        "svc",
        "--client-secret",
        "pssst",
        "--server",
        &url,
    ];
    let output = herald(&args, &[]).await;
    succeeded(&args, &output);
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    // The token request authenticates the client with HTTP Basic (svc:pssst).
    assert_eq!(seen[0].0, "/oauth/token");
    assert_eq!(seen[0].1.as_deref(), Some("Basic c3ZjOnBzc3N0"));
    assert_eq!(
        seen[1],
        ("/v1/topics".to_string(), Some("Bearer token-1".into()))
    );

    let (address, seen) = recording_server().await;
    let url = format!("http://{address}");
    let args = ["topics", "list", "--server", &url];
    succeeded(&args, &herald(&args, &[("HERALD_TOKEN", "given")]).await);
    assert_eq!(
        seen.lock().clone(),
        vec![("/v1/topics".to_string(), Some("Bearer given".to_string()))]
    );
}

#[tokio::test]
async fn ca_cert_lets_the_cli_use_a_node_with_a_private_ca_over_https_and_wss() {
    let ca = TestCa::new("Herald CLI test CA");
    let files = ca.issue("node", "herald-cli-node");
    let ca_file = ca.write_ca();
    let mut server = Server::prepare(
        1,
        0,
        0,
        vec![
            "--tls-cert".into(),
            files.cert.display().to_string(),
            "--tls-key".into(),
            files.key.display().to_string(),
        ],
    );
    server.set_https(ca.client_config(&[b"http/1.1"]));
    let server = server.start_on_free_ports().await;
    let url = server.base_url();
    assert!(url.starts_with("https://"), "{url}");
    let ca_path = ca_file.to_str().unwrap();

    let untrusted = ["topics", "list", "--server", &url];
    let output = herald(&untrusted, &[]).await;
    assert!(
        !output.success,
        "an unknown CA must be refused: {}",
        output.stdout
    );

    let create = [
        "topics",
        "create",
        "secure",
        "--server",
        &url,
        "--ca-cert",
        ca_path,
    ];
    succeeded(&create, &herald(&create, &[]).await);
    let produce = ["produce", "secure", "--server", &url];
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(produce)
        .env("HERALD_CA_CERT", ca_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"{\"n\":1}\n").await.unwrap();
    }
    let produced = tokio::time::timeout(CLI_DEADLINE, child.wait_with_output())
        .await
        .expect("produce in time")
        .unwrap();
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    // The follow reads over wss:// with the same CA.
    let follow = [
        "consume",
        "secure",
        "--follow",
        "-c",
        "1",
        "--server",
        &url,
        "--ca-cert",
        ca_path,
    ];
    let output = herald(&follow, &[]).await;
    succeeded(&follow, &output);
    let message: Value = serde_json::from_str(output.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(message["value"], json!({"n": 1}), "{message}");
}
