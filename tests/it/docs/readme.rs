//! The README's curl walkthrough ("Using it with curl", up to "The web console") runs top to
//! bottom as written, against one fresh node, and no request in it answers an error.
//!
//! The blocks are run by bash as they are, with one difference: `curl` is a wrapper that sends
//! `localhost:8080` to the test node, stops streams (`curl -N`, "Ctrl-C to stop") after two
//! seconds, and records the status of every answer, which is what the test checks. Without
//! it the walkthrough would need port 8080, and its first stream would never end.

use std::path::Path;
use std::time::Duration;

use crate::common::Server;

/// The shell blocks of the README between two headings.
fn blocks_between(readme: &str, from: &str, to: &str) -> Vec<String> {
    let start = readme
        .find(from)
        .unwrap_or_else(|| panic!("README has no '{from}'"));
    let end = readme[start..]
        .find(to)
        .map(|offset| start + offset)
        .unwrap_or_else(|| panic!("README has no '{to}' after '{from}'"));
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme[start..end].lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh" | "```bash") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed block in the README");
    blocks
}

/// The `curl` the walkthrough runs: the real one, aimed at `address`, bounded in time, with
/// every answer's status line appended to `statuses` (`-D` writes the headers to a file and
/// leaves what the command prints alone; the walkthrough reads that with `sed`).
fn curl_wrapper(dir: &Path, address: &str, statuses: &Path) -> std::path::PathBuf {
    let real = ["/usr/bin/curl", "/bin/curl"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .expect("curl is installed (apt-get install -y curl)");
    let script = format!(
        r#"#!/bin/bash
args=()
stream=0
for arg in "$@"; do
  [[ "$arg" == -*N* && "$arg" != --* ]] && stream=1
  args+=("${{arg//localhost:8080/{address}}}")
done
headers=$(mktemp)
if [ "$stream" = 1 ]; then limit=2; else limit=30; fi
{real} --max-time "$limit" -D "$headers" "${{args[@]}}"
code=$?
status=$(grep -a '^HTTP/' "$headers" | tail -n 1 | cut -d' ' -f2)
echo "${{status:-none}} exit=$code stream=$stream ${{args[*]}}" >> {statuses}
rm -f "$headers"
# A stream cut at its time limit (28) ended as the walkthrough says: by Ctrl-C.
if [ "$stream" = 1 ] && [ "$code" = 28 ]; then exit 0; fi
exit $code
"#,
        statuses = statuses.display(),
    );
    let path = dir.join("curl");
    std::fs::write(&path, script).expect("write the curl wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the curl wrapper executable");
    path
}

#[tokio::test]
async fn the_curl_walkthrough_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let blocks = blocks_between(&readme, "## Using it with curl", "## The web console");
    assert!(blocks.len() >= 5, "found only {} blocks", blocks.len());
    let server = Server::start().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let statuses = dir.path().join("statuses");
    curl_wrapper(dir.path(), &server.http_addr(), &statuses);
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Not `pipefail`: `curl ... | head -c 300` ends curl early on purpose.
    let script = format!("set -eu\n{}", blocks.join("\n"));
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("PATH", path)
        .current_dir(dir.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the walkthrough ends within 2 minutes")
        .expect("run bash");
    let answers = std::fs::read_to_string(&statuses).unwrap_or_default();
    let report = format!(
        "stdout:\n{}\nstderr:\n{}\nanswers:\n{answers}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "the walkthrough failed: {report}");
    let requests: Vec<&str> = answers.lines().collect();
    assert!(
        requests.len() >= 40,
        "only {} requests ran: {report}",
        requests.len()
    );
    let failed: Vec<&&str> = requests
        .iter()
        .filter(|line| {
            let status = line.split(' ').next().unwrap_or("none");
            !matches!(status.parse::<u16>(), Ok(code) if code < 400)
        })
        .collect();
    assert!(
        failed.is_empty(),
        "requests of the walkthrough that did not succeed: {failed:#?}\n{report}"
    );
}
