//! The web console (`/console/`) in a real browser: `tests/js/console.test.mjs` drives Debian's
//! chromium (playwright-core, `executablePath: /usr/bin/chromium`) against a node started here.
//! Without authentication it creates and configures a topic, produces a message from the page
//! and finds it by key, offset and time, watches the live tail (WebSocket) receive a message
//! produced over plain HTTP, sees a consumer group's lag fall when it commits, grows a topic,
//! deletes one behind its confirmation, redrives a dead letter, and checks the pages on a phone
//! screen; with `--auth` it signs in with client credentials (keeping the token, not the secret),
//! works with the token, renews it silently before it expires (token exchange; the live tail's
//! socket takes the new token), asks for the secret again once a rotated secret ends the
//! session, and signs out; in a cluster it adds a node started with `--join` and
//! drains it again, following its progress. Every run fails on any error the page logs.
//!
//! `CONSOLE_SCREENSHOTS=docs/console cargo test --test it console::` also saves a screenshot of
//! each page there (the committed ones in docs/console/ are made so).
//!
//! Needs node, `npm ci` in `tests/js` and `/usr/bin/chromium`; `.ci/run` and `make test` install
//! them. Without them the test fails and says what is missing, rather than passing without
//! having run.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use crate::common::auth::create_client;
use crate::common::browser::{self, chromium};
use crate::common::cluster::TestCluster;
use crate::common::Server;
use reqwest::StatusCode;

/// Everything one browser script does (start chromium, a few dozen waits of at most 20 s,
/// usually milliseconds each) fits in this.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);

/// Runs the console's browser script against `server` with `env`; fails the test with its
/// output.
async fn run_script(server: &Server, env: &[(&str, &str)]) {
    let mut env: Vec<(&str, &OsStr)> = env
        .iter()
        .map(|(key, value)| (*key, OsStr::new(value)))
        .collect();
    // Relative to the repository, not to tests/js where the script runs.
    let screenshots = std::env::var_os("CONSOLE_SCREENSHOTS")
        .map(|dir| Path::new(env!("CARGO_MANIFEST_DIR")).join(dir));
    if let Some(dir) = &screenshots {
        env.push(("CONSOLE_SCREENSHOTS", dir.as_os_str()));
    }
    browser::run_script(
        server,
        "console.test.mjs",
        &env,
        "console browser test passed",
        SCRIPT_DEADLINE,
    )
    .await;
}

#[tokio::test]
async fn console_manages_topics_messages_groups_and_subscriptions_in_a_browser() {
    chromium();
    let server = Server::start().await;
    let page = server
        .http_client()
        .get(server.url("/console/"))
        .send()
        .await
        .expect("GET /console/");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains(r#"<meta name="herald-auth" content="off" />"#));
    run_script(&server, &[]).await;
}

#[tokio::test]
async fn console_signs_in_with_client_credentials_when_auth_is_on() {
    chromium();
    // The client is made with authentication off (as the bootstrap admin would), then the node
    // restarts with it on.
    let mut server = Server::start().await;
    let secret = create_client(&server, "console-ops", &["admin"]).await;
    // Tokens of 20 s: the console renews them silently after 16 s, so the script sees a
    // renewal soon.
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("herald.toml");
    std::fs::write(&config, "[auth]\ntoken_lifetime_ms = 20000\n").unwrap();
    server.set_extra_args(vec![
        "--auth".to_string(),
        "--config".to_string(),
        config.to_str().unwrap().to_string(),
    ]);
    server.restart().await;
    let page = server
        .http_client()
        .get(server.url("/console/"))
        .send()
        .await
        .expect("GET /console/");
    assert_eq!(
        page.status(),
        StatusCode::OK,
        "the console's files are public"
    );
    assert!(page
        .text()
        .await
        .unwrap()
        .contains(r#"<meta name="herald-auth" content="on" />"#));
    run_script(
        &server,
        &[
            ("HERALD_CLIENT_ID", "console-ops"),
            ("HERALD_CLIENT_SECRET", &secret),
        ],
    )
    .await;
}

#[tokio::test]
async fn console_adds_a_node_and_drains_it() {
    chromium();
    let mut cluster = TestCluster::start(1).await;
    let joining = cluster.start_joining_node().await;
    let node = cluster.node(joining);
    let join = format!("{joining},{},{}", node.http_addr(), node.raft_addr());
    run_script(cluster.node(1), &[("HERALD_JOIN_NODE", &join)]).await;
}
