//! The example page in a real browser: `tests/js/examples.test.mjs` drives Debian's
//! chromium (playwright-core, `executablePath: /usr/bin/chromium`) to open `/examples/` on a node
//! started here, produce over plain HTTP, and see the messages arrive over both the WebSocket and
//! EventSource, and a WebSocket reconnect resume exactly.
//!
//! Needs node, `npm ci` in `tests/js` and `/usr/bin/chromium`; `.ci/run` and `make test`
//! install them. Without them the test fails and says what is missing, rather than passing
//! without having run.

use std::ffi::OsStr;
use std::time::Duration;

use crate::common::browser::{chromium, run_script};
use crate::common::Server;
use reqwest::StatusCode;

/// Everything the browser script does (start chromium, ~10 waits of at most 20 s, usually
/// milliseconds each) fits in this.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test]
async fn example_page_shows_messages_over_websocket_and_eventsource() {
    chromium();

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

    run_script(
        &server,
        "examples.test.mjs",
        &[("HERALD_TOPIC", OsStr::new("browser-orders"))],
        "browser test passed",
        SCRIPT_DEADLINE,
    )
    .await;
}
