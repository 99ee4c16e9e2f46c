//! Browser scripts in `tests/js` (playwright-core driving Debian's chromium) run against a
//! node started by a test: where they live, what they need, and running one to its verdict.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::Server;

/// `tests/js`, where the scripts and their `node_modules` are.
pub fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js")
}

/// The chromium to drive (`CHROMIUM`, or Debian's); fails the test, saying what to install,
/// when it or playwright-core is missing, rather than letting it pass without having run.
pub fn chromium() -> String {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: apt-get install -y chromium (or set CHROMIUM)"
    );
    assert!(
        browser_dir().join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run `npm ci` in {} (make test does)",
        browser_dir().display()
    );
    chromium
}

/// Runs `node SCRIPT` in `tests/js` against `server` (`HERALD_URL`, `CHROMIUM` and `env` set)
/// within `deadline`; fails the test with the script's output and the node's log unless it
/// exits successfully having printed `passed`.
pub async fn run_script(
    server: &Server,
    script: &str,
    env: &[(&str, &std::ffi::OsStr)],
    passed: &str,
    deadline: Duration,
) {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(script)
        .current_dir(browser_dir())
        .env("HERALD_URL", server.base_url())
        .env("CHROMIUM", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(deadline, command.output())
        .await
        .unwrap_or_else(|_| server.fail(&format!("{script} did not finish within {deadline:?}")))
        .expect("node runs (apt-get install -y nodejs)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        server.fail(&format!(
            "{script} failed ({}):\n{stdout}\n{stderr}",
            output.status
        ));
    }
    assert!(stdout.contains(passed), "{stdout}\n{stderr}");
}
