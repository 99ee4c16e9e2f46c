//! The example page in a real browser: `tests/js/examples.test.mjs` drives Debian's
//! chromium (playwright-core, `executablePath: /usr/bin/chromium`) to open `/examples/` on a node
//! started here, produce over plain HTTP, and see the messages arrive over both the WebSocket and
//! EventSource, and a WebSocket reconnect resume exactly.
//!
//! Needs node, `npm ci` in `tests/js` and `/usr/bin/chromium`; `.ci/run` and `make test`
//! install them. Without them the test fails and says what is missing, rather than passing
//! without having run.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::Server;
use reqwest::StatusCode;

/// Everything the browser script does (start chromium, ~10 waits of at most 20 s, usually
/// milliseconds each) fits in this.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test]
async fn example_page_shows_messages_over_websocket_and_eventsource() {
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: apt-get install -y chromium (or set CHROMIUM)"
    );
    assert!(
        browser_dir.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run `npm ci` in {} (make test does)",
        browser_dir.display()
    );

    let server = Server::start().await;
    server.create_topic("browser-orders", 1).await;
    server.wait_for_leaders("browser-orders").await;

    let page = server
        .http_client()
        .get(server.url("/examples/"))
        .send()
        .await
        .expect("GET /examples/");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("new WebSocket("));

    let script = tokio::process::Command::new("node")
        .arg("examples.test.mjs")
        .current_dir(&browser_dir)
        .env("HERALD_URL", server.base_url())
        .env("HERALD_TOPIC", "browser-orders")
        .env("CHROMIUM", &chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_DEADLINE, script)
        .await
        .unwrap_or_else(|_| server.fail("the browser script did not finish within its deadline"))
        .expect("node runs (apt-get install -y nodejs)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        server.fail(&format!(
            "the browser script failed ({}):\n{stdout}\n{stderr}",
            output.status
        ));
    }
    assert!(stdout.contains("browser test passed"), "{stdout}\n{stderr}");
}
