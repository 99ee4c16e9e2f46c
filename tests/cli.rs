//! The CLI speaks the HTTP API: `herald topics`, `herald produce`, `herald consume`, run as a
//! separate process against a real node with `--server`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::Server;
use herald::domain::partitioner::partition_for_key;
use reqwest::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// How long one CLI invocation may take.
const CLI_DEADLINE: Duration = Duration::from_secs(30);

struct Output {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `herald <args> --server <url>`, feeding `stdin`, with a deadline.
async fn herald(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
    // `--server` is a global option of each client subcommand, so it goes after the subcommand.
    command
        .args(args)
        .arg("--server")
        .arg(server.base_url())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERALD_") {
            command.env_remove(name);
        }
    }
    let mut child = command.spawn().expect("start the herald CLI");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.expect("write stdin");
        drop(pipe);
    }
    let output = tokio::time::timeout(CLI_DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            server.fail(&format!(
                "herald {args:?} did not finish within {CLI_DEADLINE:?}"
            ))
        })
        .expect("wait for the CLI");
    let output = Output {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    if !output.status.success() {
        server.fail(&format!(
            "herald {args:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
            output.status, output.stdout, output.stderr
        ));
    }
    output
}

#[tokio::test]
async fn topics_produce_consume_round_trip() {
    let server = Server::start().await;

    herald(
        &server,
        &["topics", "create", "cli-events", "--partitions", "3"],
        None,
    )
    .await;
    let described = server.describe("cli-events").await;
    assert_eq!(described["partitions"].as_array().unwrap().len(), 3);

    let listed = herald(&server, &["topics", "list"], None).await;
    assert!(listed.stdout.contains("cli-events"), "{}", listed.stdout);
    let described = herald(&server, &["topics", "describe", "cli-events"], None).await;
    assert!(
        described.stdout.contains("cli-events"),
        "{}",
        described.stdout
    );

    // One message per stdin line, all with one key: one partition, in order.
    let lines: Vec<String> = (1..=20).map(|i| format!("line-{i}")).collect();
    let input = lines.join("\n") + "\n";
    herald(
        &server,
        &["produce", "cli-events", "--key", "user-42"],
        Some(&input),
    )
    .await;
    let partition = partition_for_key(b"user-42", 3);
    let marks = server.high_watermarks("cli-events").await;
    assert_eq!(marks.iter().sum::<u64>(), 20, "{marks:?}");
    assert_eq!(marks[partition as usize], 20, "{marks:?}");

    // Without --follow, consume stops at the end.
    let consumed = herald(
        &server,
        &["consume", "cli-events", "--from", "earliest"],
        None,
    )
    .await;
    let mut position = 0;
    for line in &lines {
        let found = consumed.stdout[position..]
            .find(line.as_str())
            .unwrap_or_else(|| panic!("{line} missing or out of order in:\n{}", consumed.stdout));
        position += found + line.len();
    }

    // Unkeyed lines are accepted too, and consume sees them.
    herald(&server, &["produce", "cli-events"], Some("alpha\nbeta\n")).await;
    let consumed = herald(
        &server,
        &["consume", "cli-events", "--from", "earliest"],
        None,
    )
    .await;
    assert!(
        consumed.stdout.contains("alpha") && consumed.stdout.contains("beta"),
        "{}",
        consumed.stdout
    );
    assert_eq!(
        server
            .high_watermarks("cli-events")
            .await
            .iter()
            .sum::<u64>(),
        22
    );

    herald(&server, &["topics", "delete", "cli-events"], None).await;
    let response = server.get("/v1/topics/cli-events").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
