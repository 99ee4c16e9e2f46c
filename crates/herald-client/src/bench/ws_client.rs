//! The WebSocket client of `herald bench ws`: connect to a node's `/v1/ws` (subprotocol
//! `herald.v1`), subscribe, publish, and read the frames that come back.

use std::time::Duration;

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::cli::client::parse_server;

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a handshake, or an answer to a frame, may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most credit a subscription may hold: the bench grants it once and never runs out.
pub const ALL_CREDIT: u64 = 1 << 29;

/// `ws://host:port/v1/ws` of a node's `http://host:port`.
pub fn ws_url(server: &str) -> anyhow::Result<String> {
    let base = parse_server(server)?;
    let host = base.host_str().context("the server URL has no host")?;
    let port = base.port_or_known_default().unwrap_or(80);
    Ok(format!("ws://{host}:{port}/v1/ws"))
}

pub async fn connect(url: &str) -> anyhow::Result<Socket> {
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.v1".parse()?);
    let (socket, _) =
        tokio::time::timeout(ANSWER_TIMEOUT, tokio_tungstenite::connect_async(request))
            .await
            .context("WebSocket handshake timed out")?
            .with_context(|| format!("WebSocket handshake with {url}"))?;
    Ok(socket)
}

/// The next text frame as JSON; pings and pongs are skipped (tungstenite answers pings).
pub async fn next_frame(socket: &mut Socket, within: Duration) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .context("no frame within the deadline")?
            .context("the socket closed")??;
        match message {
            Message::Text(text) => return Ok(serde_json::from_str(text.as_str())?),
            Message::Close(frame) => anyhow::bail!("the node closed the socket: {frame:?}"),
            _ => continue,
        }
    }
}

/// Subscribes to `topic` (one partition or all) from `from` with all the credit it may need.
pub async fn subscribe(
    socket: &mut Socket,
    topic: &str,
    partition: Option<u32>,
    from: &str,
) -> anyhow::Result<()> {
    let mut frame = json!({"op": "subscribe", "id": "s", "topic": topic, "from": from,
                           "credit": ALL_CREDIT});
    if let Some(partition) = partition {
        frame["partition"] = json!(partition);
    }
    socket.send(Message::text(frame.to_string())).await?;
    let answer = next_frame(socket, ANSWER_TIMEOUT).await?;
    anyhow::ensure!(answer["op"] == "ok", "subscribe refused: {answer}");
    Ok(())
}

/// Connects and subscribes.
pub async fn subscriber(
    url: &str,
    topic: &str,
    partition: Option<u32>,
    from: &str,
) -> anyhow::Result<Socket> {
    let mut socket = connect(url).await?;
    subscribe(&mut socket, topic, partition, from).await?;
    Ok(socket)
}

/// Sends a prebuilt `publish` frame and waits for its answer; `Ok(false)` when the node
/// refused some of it.
pub async fn publish(socket: &mut Socket, frame: &str) -> anyhow::Result<bool> {
    socket.send(Message::text(frame.to_string())).await?;
    loop {
        let answer = next_frame(socket, ANSWER_TIMEOUT).await?;
        match answer["op"].as_str() {
            Some("published") => {
                let refused = answer["offsets"]
                    .as_array()
                    .is_some_and(|offsets| offsets.iter().any(|o| o.get("error").is_some()));
                return Ok(!refused);
            }
            Some("error") => return Ok(false),
            _ => continue,
        }
    }
}

/// The messages of a `messages` frame (none for other frames).
pub fn delivered(frame: &Value) -> &[Value] {
    if frame["op"] == "messages" {
        frame["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    } else {
        &[]
    }
}
