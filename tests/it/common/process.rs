//! Running an outside program (a browser script, a code generator, a generated client) as one
//! step of a test: bounded by a deadline, and failing the test with everything the program and
//! the node printed, so a red run says why without a rerun.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::Server;

/// What a program that exited successfully printed.
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program` with `args` in `dir`, with `env` added to the test's environment, to
/// completion within `deadline`; answers what it printed. Fails the test, with the
/// program's output and the node's log, when it cannot start, outlives the deadline (it is
/// killed) or exits unsuccessfully. `what` names the step in those failures.
pub async fn run<Arg: AsRef<OsStr>>(
    server: &Server,
    what: &str,
    program: &Path,
    args: impl IntoIterator<Item = Arg>,
    dir: &Path,
    env: &[(&str, &OsStr)],
    deadline: Duration,
) -> Printed {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(deadline, command.output())
        .await
        .unwrap_or_else(|_| server.fail(&format!("{what} did not finish within {deadline:?}")))
        .unwrap_or_else(|err| {
            server.fail(&format!("{what}: cannot run {}: {err}", program.display()))
        });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        server.fail(&format!(
            "{what} failed ({}):\n{stdout}\n{stderr}",
            output.status
        ));
    }
    Printed { stdout, stderr }
}
