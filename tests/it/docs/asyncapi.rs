//! The AsyncAPI document of the live streams: a node serves at `/asyncapi.json` exactly the
//! committed `openapi/asyncapi.json` (which a unit test keeps equal to the frames the code
//! speaks), and the AsyncAPI initiative's parser (`tests/js/asyncapi.test.mjs`) finds no error or
//! warning in it. Needs node and `npm ci` in `tests/js` (`make test` does it).

use std::path::Path;
use std::time::Duration;

use crate::common::Server;
use reqwest::StatusCode;
use serde_json::Value;

const PARSER_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn served_document_is_the_committed_one_and_valid_asyncapi() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed_path = root.join("openapi/asyncapi.json");
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(&committed_path).unwrap()).unwrap();

    let server = Server::start().await;
    let response = server
        .http_client()
        .get(server.url("/asyncapi.json"))
        .send()
        .await
        .expect("GET /asyncapi.json");
    assert_eq!(response.status(), StatusCode::OK);
    let served: Value = response.json().await.unwrap();
    assert_eq!(served, committed, "the node serves the committed document");

    let js = root.join("tests/js");
    assert!(
        js.join("node_modules/@asyncapi/parser").exists(),
        "the AsyncAPI parser is missing: run `npm ci` in {} (make test does)",
        js.display()
    );
    let parse = tokio::process::Command::new("node")
        .arg("asyncapi.test.mjs")
        .arg(&committed_path)
        .current_dir(&js)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PARSER_DEADLINE, parse)
        .await
        .expect("the AsyncAPI parser finishes within its deadline")
        .expect("node runs (apt-get install -y nodejs)");
    assert!(
        output.status.success(),
        "the AsyncAPI parser refused openapi/asyncapi.json:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
