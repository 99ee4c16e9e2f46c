//! `herald consume`: reads partitions by offset and prints messages to stdout.
//!
//! Every partition is read by its own task, following `next_offset`, so a long poll on a quiet
//! partition never delays messages of a busy one; one printer task writes what they fetch, which
//! keeps each partition's messages in offset order and lets `--count` stop everything at once.
//! A partition's task ends when it reaches the high watermark. `--follow` is `follow.rs`: the
//! messages pushed over the WebSocket.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::client::{Api, OffsetSpec, ProblemError};
use super::{ConsumeArgs, OutputFormat};

/// How many times in a row a partition read is retried after a transient failure.
const MAX_RETRIES: u32 = 5;

/// Batches of messages waiting to be printed; small, so slow stdout slows the readers down.
const CHANNEL_BATCHES: usize = 8;

/// Writes one message in the chosen format, followed by a newline.
///
/// `json` prints the message object exactly as the server sent it. `value` prints just the value:
/// a JSON string as its text (no quotes), other JSON as JSON text, `value_b64` as the decoded raw
/// bytes, and a missing value (a tombstone) as an empty line.
pub fn write_message(
    out: &mut impl Write,
    message: &Value,
    format: OutputFormat,
) -> std::io::Result<()> {
    match format {
        OutputFormat::Json => serde_json::to_writer(&mut *out, message)?,
        OutputFormat::Value => match (message.get("value"), message.get("value_b64")) {
            (Some(Value::String(text)), _) => out.write_all(text.as_bytes())?,
            (Some(value), _) if !value.is_null() => serde_json::to_writer(&mut *out, value)?,
            (_, Some(Value::String(encoded))) => {
                match base64::engine::general_purpose::STANDARD.decode(encoded) {
                    Ok(bytes) => out.write_all(&bytes)?,
                    // Not base64 after all: show it rather than drop the message.
                    Err(_) => out.write_all(encoded.as_bytes())?,
                }
            }
            _ => {}
        },
    }
    out.write_all(b"\n")
}

/// Reads one partition from `from`, sending each non-empty batch to the printer, until the end
/// or until the printer hangs up.
async fn read_partition(
    api: Api,
    topic: String,
    partition: u32,
    from: OffsetSpec,
    max_messages: u32,
    decode: bool,
    sender: mpsc::Sender<Vec<Value>>,
) -> anyhow::Result<()> {
    let mut offset = from;
    let mut failures = 0u32;
    loop {
        let read = if decode {
            api.fetch_decoded(&topic, partition, offset, max_messages)
                .await
        } else {
            api.fetch(&topic, partition, offset, max_messages, 0).await
        };
        let answer = match read {
            Ok(answer) => answer,
            Err(error) => {
                if let Some(start) = out_of_range_restart(&error) {
                    eprintln!(
                        "partition {partition}: offset {} is no longer kept; starting at {start}",
                        offset.to_query()
                    );
                    offset = OffsetSpec::At(start);
                    continue;
                }
                if is_transient(&error) && failures < MAX_RETRIES {
                    failures += 1;
                    let backoff = Duration::from_millis(200 << failures.min(5));
                    eprintln!("partition {partition}: {error:#}; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    continue;
                }
                return Err(error.context(format!("reading partition {partition}")));
            }
        };
        failures = 0;
        let before = offset;
        offset = OffsetSpec::At(answer.next_offset);
        let empty = answer.messages.is_empty();
        if !empty && sender.send(answer.messages).await.is_err() {
            return Ok(()); // the printer is done (--count reached or stdout closed)
        }
        let at_end = answer.next_offset >= answer.high_watermark;
        // An empty answer that did not move forward would otherwise loop for ever.
        let stuck = empty && before == offset;
        if at_end || stuck {
            return Ok(());
        }
    }
}

/// For a 416 `offset_out_of_range`, the log start offset to restart from, if the problem says.
fn out_of_range_restart(error: &anyhow::Error) -> Option<u64> {
    let problem = error.downcast_ref::<ProblemError>()?;
    if problem.code() != "offset_out_of_range" {
        return None;
    }
    problem.body.get("log_start_offset").and_then(Value::as_u64)
}

/// Whether a failed read is worth retrying: the server was unreachable or answered 5xx (no leader
/// during a failover, a timeout); a 4xx is the request's fault and will not get better.
pub(super) fn is_transient(error: &anyhow::Error) -> bool {
    match error.downcast_ref::<ProblemError>() {
        Some(problem) => problem.status.is_server_error(),
        None => error
            .chain()
            .any(|cause| cause.downcast_ref::<reqwest::Error>().is_some()),
    }
}

/// Runs `herald consume`.
pub async fn run(server: &str, args: ConsumeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.max_messages > 0, "--max-messages must be at least 1");
    let api = Api::new(server)?;
    let topic = api.get_topic(&args.topic).await?;
    let partitions: Vec<u32> = match args.partition {
        Some(partition) => {
            anyhow::ensure!(
                topic.partitions.iter().any(|p| p.partition == partition),
                "topic `{}` has no partition {partition} (it has {})",
                args.topic,
                topic.partitions.len()
            );
            vec![partition]
        }
        None => topic.partitions.iter().map(|p| p.partition).collect(),
    };
    if args.count == Some(0) || partitions.is_empty() {
        return Ok(());
    }
    if args.follow {
        return super::follow::run(&api, &args).await;
    }

    let (sender, mut receiver) = mpsc::channel::<Vec<Value>>(CHANNEL_BATCHES);
    let mut readers = JoinSet::new();
    for partition in partitions {
        readers.spawn(read_partition(
            api.clone(),
            args.topic.clone(),
            partition,
            args.from,
            args.max_messages,
            args.decode,
            sender.clone(),
        ));
    }
    drop(sender); // the channel closes once every reader is done

    // `Stdout`, not a held `StdoutLock`: the lock is not `Send` and this future awaits.
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut printed = 0u64;
    'printing: loop {
        let batch = tokio::select! {
            batch = receiver.recv() => match batch {
                Some(batch) => batch,
                None => break, // every reader reached its end
            },
            // A reader that fails stops the command now, not when the others are done.
            Some(Ok(Err(error))) = readers.join_next() => {
                let _ = out.flush();
                readers.abort_all();
                return Err(error);
            }
        };
        for message in &batch {
            if let Err(error) = write_message(&mut out, message, args.format) {
                if error.kind() == std::io::ErrorKind::BrokenPipe {
                    break 'printing; // e.g. `| head`: the reader went away, which is fine
                }
                return Err(error).context("could not write to stdout");
            }
            printed += 1;
            if args.count.is_some_and(|count| printed >= count) {
                break 'printing;
            }
        }
        match out.flush() {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => break,
            other => other.context("could not write to stdout")?,
        }
    }
    let _ = out.flush();
    drop(receiver);
    readers.abort_all();
    while let Some(result) = readers.join_next().await {
        match result {
            Ok(outcome) => outcome?,
            Err(error) if error.is_cancelled() => {}
            Err(error) => return Err(anyhow::anyhow!("a partition reader failed: {error}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::{Method, StatusCode};
    use serde_json::json;

    fn render(message: Value, format: OutputFormat) -> String {
        let mut out = Vec::new();
        write_message(&mut out, &message, format).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn json_format_prints_the_whole_message() {
        let message = json!({"partition": 0, "offset": 3, "value": {"a": 1}});
        let line = render(message.clone(), OutputFormat::Json);
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), message);
    }

    #[test]
    fn value_format_unwraps_values() {
        assert_eq!(
            render(json!({"value": "plain"}), OutputFormat::Value),
            "plain\n"
        );
        assert_eq!(
            render(json!({"value": {"a": [1]}}), OutputFormat::Value),
            "{\"a\":[1]}\n"
        );
        assert_eq!(
            render(json!({"value_b64": "aGk="}), OutputFormat::Value),
            "hi\n"
        );
        assert_eq!(render(json!({"key": "k"}), OutputFormat::Value), "\n");
    }

    #[test]
    fn out_of_range_problems_give_the_restart_offset() {
        let body = r#"{"status":416,"code":"offset_out_of_range","detail":"x",
            "log_start_offset":100,"high_watermark":200}"#;
        let problem = ProblemError::from_parts(
            Method::GET,
            "/v1/topics/t/partitions/0/messages".into(),
            StatusCode::RANGE_NOT_SATISFIABLE,
            body,
        );
        assert_eq!(
            out_of_range_restart(&anyhow::Error::new(problem)),
            Some(100)
        );
        assert_eq!(out_of_range_restart(&anyhow::anyhow!("other")), None);
    }

    #[test]
    fn only_server_side_failures_are_retried() {
        let problem = |status| {
            anyhow::Error::new(ProblemError::from_parts(
                Method::GET,
                "/p".into(),
                status,
                "",
            ))
        };
        assert!(is_transient(&problem(StatusCode::SERVICE_UNAVAILABLE)));
        assert!(!is_transient(&problem(StatusCode::NOT_FOUND)));
        assert!(!is_transient(&anyhow::anyhow!("something else")));
    }

    #[tokio::test]
    async fn unreachable_servers_are_retried() {
        let api = Api::new("http://127.0.0.1:1").unwrap();
        let error = api
            .fetch("t", 0, OffsetSpec::Earliest, 1, 0)
            .await
            .unwrap_err();
        assert!(is_transient(&error), "{error:#}");
    }
}
