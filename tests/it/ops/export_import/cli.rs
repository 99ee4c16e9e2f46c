//! The `herald` CLI as the operator runs it: a separate process against a node's URL, bounded
//! by a deadline, its output kept whatever its exit (the refusals are checked too).

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

/// How long one export or import of the test's topics may take.
pub const CLI_DEADLINE: Duration = Duration::from_secs(90);

/// What a finished CLI process printed.
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Fails the test unless it exited successfully.
    pub fn ok(self, what: &str) -> Ran {
        assert!(
            self.status.success(),
            "{what} failed ({}):\n{}\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        // Not a terminal: no progress bar, whose redraws are carriage returns.
        assert!(!self.stderr.contains('\r'), "{what}: a bar on a pipe");
        self
    }

    /// Fails the test unless it failed, saying `expected` on stderr.
    pub fn refused(self, what: &str, expected: &str) -> Ran {
        assert!(
            !self.status.success() && self.stderr.contains(expected),
            "{what} should fail saying {expected:?} ({}):\n{}\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// `herald <args>` ready to start, with no `HERALD_*` of the test's own environment (a
/// developer's `HERALD_SERVER` or `HERALD_DATA_DIR` must not redirect it).
pub fn offline_command(args: &[&str]) -> Command {
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
    command
}

/// `herald <args> --server <server>` ready to start (see [`offline_command`]).
pub fn command(server: &str, args: &[&str]) -> Command {
    let mut command = offline_command(args);
    command.arg("--server").arg(server);
    command
}

/// Runs `herald <args> --server <server>` to its end within [`CLI_DEADLINE`].
pub async fn herald(server: &str, args: &[&str]) -> Ran {
    let child = command(server, args).spawn().expect("start the herald CLI");
    finish(child, args).await
}

/// Waits for a started CLI process within [`CLI_DEADLINE`].
pub async fn finish(child: Child, args: &[&str]) -> Ran {
    let output = tokio::time::timeout(CLI_DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("herald {args:?} did not finish within {CLI_DEADLINE:?}"))
        .expect("wait for the CLI");
    Ran {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
