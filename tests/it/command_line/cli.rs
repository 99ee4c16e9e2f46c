//! The CLI speaks the HTTP API: `herald topics`, `herald produce`, `herald consume`, run as a
//! separate process against a real node with `--server`.

use std::process::Stdio;
use std::time::Duration;

use crate::common::Server;
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

/// Runs `herald <args> --server <url>`, feeding `stdin`, with a deadline; fails the test when
/// the command fails.
async fn herald(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let output = herald_may_fail(server, args, stdin).await;
    if !output.status.success() {
        server.fail(&format!(
            "herald {args:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
            output.status, output.stdout, output.stderr
        ));
    }
    output
}

/// Runs `herald <args> --server <url>`, feeding `stdin`, with a deadline.
async fn herald_may_fail(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
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
    Output {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
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

#[tokio::test]
async fn request_prints_the_reply_that_herald_reply_sent() {
    let server = Server::start().await;
    server.create_topic("rpc", 1).await;
    let requesting = herald(
        &server,
        &[
            "request",
            "rpc",
            "--value",
            r#"{"q":1}"#,
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    let responding = async {
        let (status, answer) = server
            .fetch("rpc", 0, "offset=0&max_messages=1&max_wait_ms=20000")
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let headers = &answer["messages"][0]["headers"];
        let reply_to = headers["herald-reply-to"].as_str().expect("reply-to");
        let correlation_id = headers["herald-correlation-id"]
            .as_str()
            .expect("correlation id");
        let args = [
            "reply",
            "--reply-to",
            reply_to,
            "--correlation-id",
            correlation_id,
            "--value",
            r#"{"a":2}"#,
        ];
        let first = herald(&server, &args, None).await;
        let second = herald_may_fail(&server, &args, None).await;
        (first, second)
    };
    let (request, (first, second)) = tokio::join!(requesting, responding);
    assert!(first.status.success(), "{}", first.stderr);
    assert!(request.status.success(), "{}", request.stderr);
    assert_eq!(request.stdout.trim(), r#"{"a":2}"#);
    // Nobody waits any more: the CLI says so and fails.
    assert!(!second.status.success());
    assert!(
        second.stderr.contains("no_waiting_request"),
        "{}",
        second.stderr
    );
}
