//! Browser scripts in `tests/js` (playwright-core driving Debian's chromium) run against a
//! node started by a test: where they live, what they need, and running one to its verdict.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{process, Server};

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
    env: &[(&str, &OsStr)],
    passed: &str,
    deadline: Duration,
) {
    let base_url = server.base_url();
    let chromium = chromium();
    let mut env = env.to_vec();
    env.push(("HERALD_URL", OsStr::new(&base_url)));
    env.push(("CHROMIUM", OsStr::new(&chromium)));
    let printed = process::run(
        server,
        script,
        Path::new("node"),
        [script],
        &browser_dir(),
        &env,
        deadline,
    )
    .await;
    if !printed.stdout.contains(passed) {
        server.fail(&format!(
            "{script} exited successfully without printing {passed:?}:\n{}\n{}",
            printed.stdout, printed.stderr
        ));
    }
}
