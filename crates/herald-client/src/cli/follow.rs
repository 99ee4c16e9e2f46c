//! `herald consume --follow`: a topic's messages pushed over the WebSocket (`GET /v1/ws`,
//! `herald.v1`) instead of long polls, printed as they arrive.
//!
//! One subscription covers every partition read. The command grants credit back as it prints,
//! so the server never sends faster than stdout takes messages; and it keeps the resume token of
//! the last message printed, so when the socket ends (the node shuts down, the connection
//! drops) it connects again and continues exactly after that message: nothing is printed twice
//! and nothing is skipped.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::client::{Api, OffsetSpec};
use super::consume::write_message;
use super::ConsumeArgs;

/// The subscription's id on the socket.
const SUBSCRIPTION_ID: &str = "follow";
/// Messages the server may have in flight to us; credit is granted back as they are printed.
const CREDIT: u64 = 1_000;
/// How many connection attempts in a row may fail before the command gives up.
const MAX_RECONNECTS: u32 = 8;
/// How long the handshake and the subscription's answer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one socket's session ended.
enum SessionEnd {
    /// `--count` reached, or stdout closed: the command is done.
    Done,
    /// The socket ended (a close frame, a dropped connection): connect again.
    Lost(String),
}

/// Follows the topic until `--count` messages are printed or stdout closes.
pub async fn run(api: &Api, args: &ConsumeArgs) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut resume: Option<String> = args.resume.clone();
    let mut printed = 0u64;
    let mut failures = 0u32;
    loop {
        let from = match &resume {
            Some(token) => Value::from(token.clone()),
            None => from_value(args.from),
        };
        match session(api, args, from, &mut out, &mut resume, &mut printed).await {
            Ok(SessionEnd::Done) => return Ok(()),
            Ok(SessionEnd::Lost(reason)) => {
                failures = 0;
                eprintln!("the stream ended ({reason}); reconnecting");
            }
            Err(error) if failures < MAX_RECONNECTS && is_connection_error(&error) => {
                failures += 1;
                let pause = Duration::from_millis(200 << failures.min(5));
                eprintln!("{error:#}; connecting again in {pause:?}");
                tokio::time::sleep(pause).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// `--from` as the subscribe frame's `from`.
fn from_value(from: OffsetSpec) -> Value {
    match from {
        OffsetSpec::Earliest => json!("earliest"),
        OffsetSpec::Latest => json!("latest"),
        OffsetSpec::At(offset) => json!(offset),
    }
}

/// An error from connecting or talking to the socket (worth another attempt), not a refusal of
/// the subscription by the server.
fn is_connection_error(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<ConnectionError>().is_some())
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ConnectionError(String);

fn lost(what: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(ConnectionError(what.to_string()))
}

/// One socket: subscribe, then print what arrives until the socket ends or the command is done.
async fn session(
    api: &Api,
    args: &ConsumeArgs,
    from: Value,
    out: &mut impl Write,
    resume: &mut Option<String>,
    printed: &mut u64,
) -> anyhow::Result<SessionEnd> {
    let mut url = api.url(&["v1", "ws"]);
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    url.set_scheme(scheme)
        .map_err(|()| anyhow::anyhow!("cannot make a WebSocket URL of {url}"))?;
    let mut request = url
        .as_str()
        .into_client_request()
        .context("a WebSocket request")?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.v1".parse()?);
    // A fresh token on every (re)connection: a long follow outlives any one token.
    // A token endpoint that cannot be reached now (the node restarting) is retried like the
    // socket; a refused secret is too, within the reconnection limit, and then says why.
    let authorization = api
        .authorization()
        .await
        .map_err(|error| lost(format!("{error:#}")))?;
    if let Some(authorization) = authorization {
        request.headers_mut().insert(
            "authorization",
            authorization
                .parse()
                .context("the token is not a valid header value")?,
        );
    }
    let mut socket = tokio::time::timeout(
        CONNECT_TIMEOUT,
        super::ws_connect::connect(&url, request, api.ca_certs()),
    )
    .await
    .map_err(|_| lost(format!("connecting to {url} timed out")))?
    .map_err(|error| lost(format!("could not connect to {url}: {error:#}")))?;

    let mut subscribe = json!({
        "op": "subscribe", "id": SUBSCRIPTION_ID, "topic": args.topic,
        "from": from, "credit": CREDIT,
    });
    if let Some(partition) = args.partition {
        subscribe["partition"] = json!(partition);
    }
    if args.decode {
        subscribe["decode"] = json!("json");
    }
    socket
        .send(Message::text(subscribe.to_string()))
        .await
        .map_err(lost)?;

    while let Some(frame) = socket.next().await {
        let text = match frame.map_err(lost)? {
            Message::Text(text) => text,
            Message::Close(close) => {
                let reason = close
                    .map(|close| format!("{}: {}", u16::from(close.code), close.reason))
                    .unwrap_or_else(|| "closed".into());
                return Ok(SessionEnd::Lost(reason));
            }
            _ => continue, // pings are answered by the library
        };
        let frame: Value = serde_json::from_str(&text).context("the server sent a bad frame")?;
        match frame["op"].as_str() {
            Some("messages") => {
                let messages = frame["messages"].as_array().cloned().unwrap_or_default();
                for message in &messages {
                    if let Err(error) = write_message(out, message, args.format) {
                        if error.kind() == std::io::ErrorKind::BrokenPipe {
                            return Ok(SessionEnd::Done);
                        }
                        return Err(error).context("could not write to stdout");
                    }
                    *resume = message["resume"].as_str().map(str::to_string);
                    *printed += 1;
                    if args.count.is_some_and(|count| *printed >= count) {
                        let _ = out.flush();
                        let _ = socket.close(None).await;
                        return Ok(SessionEnd::Done);
                    }
                }
                match out.flush() {
                    Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                        return Ok(SessionEnd::Done)
                    }
                    other => other.context("could not write to stdout")?,
                }
                let credit =
                    json!({"op": "credit", "id": SUBSCRIPTION_ID, "messages": messages.len()});
                socket
                    .send(Message::text(credit.to_string()))
                    .await
                    .map_err(lost)?;
            }
            Some("error") => {
                let problem = &frame["error"];
                anyhow::bail!(
                    "{} ({})",
                    problem["detail"]
                        .as_str()
                        .unwrap_or("the subscription was refused"),
                    problem["code"].as_str().unwrap_or("error")
                );
            }
            _ => {} // `ok`: subscribed
        }
    }
    Ok(SessionEnd::Lost("the connection ended".into()))
}
