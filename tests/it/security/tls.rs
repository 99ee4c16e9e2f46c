//! TLS on the client port (`[tls]`, `--tls-cert`/`--tls-key`): HTTPS with HTTP/2 and HTTP/1.1
//! offered by ALPN, plaintext refused in TLS-only mode (and served when allowed), WebSocket over
//! TLS, and a certificate replaced on disk (picked up on SIGHUP, and on its own) while an open
//! WebSocket keeps working. Slow and silent clients (slowloris): connections that send an
//! unfinished request head, nothing at all (after the TLS handshake too), or nothing after an
//! answer are closed after `header_read_timeout_ms`, so they cannot hold `max_connections`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::tls::{connect, https_get, parse_answer, TestCa};
use crate::common::{poll, Server};
use futures::{SinkExt, StreamExt};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

async fn tls_server(ca: &TestCa, extra: &[&str]) -> Server {
    tls_server_with_env(ca, extra, &[]).await
}

async fn tls_server_with_env(ca: &TestCa, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let files = ca.issue("node", "herald-node-first");
    let mut args = vec![
        "--tls-cert".to_string(),
        files.cert.display().to_string(),
        "--tls-key".to_string(),
        files.key.display().to_string(),
    ];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let mut server = Server::prepare(1, 0, 0, args);
    for (name, value) in env {
        server.set_env(name, value);
    }
    server.set_https(ca.client_config(&[b"http/1.1"]));
    server.start_on_free_ports().await
}

type TlsSocket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// The next text frame, as JSON.
async fn next_text(socket: &mut TlsSocket) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .expect("a frame");
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

fn address(server: &Server) -> SocketAddr {
    server.http_addr().parse().unwrap()
}

/// The common name of the certificate a new connection is shown.
async fn served_common_name(server: &Server, ca: &TestCa) -> String {
    let stream = connect(address(server), ca.client_config(&[]))
        .await
        .expect("TLS connect");
    let certificate = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
    let text = String::from_utf8_lossy(certificate.as_ref()).into_owned();
    ["herald-node-first", "herald-node-second"]
        .into_iter()
        .find(|name| text.contains(name))
        .unwrap_or("unknown")
        .to_string()
}

#[tokio::test]
async fn https_alpn_and_plaintext_refused_in_tls_only_mode() {
    let ca = TestCa::new("Herald test CA");
    let server = tls_server(&ca, &[]).await;

    let (status, body) = https_get(address(&server), ca.client_config(&[]), "/healthz")
        .await
        .expect("GET /healthz over TLS");
    assert_eq!(status, 200, "{body}");

    // ALPN: HTTP/2 is chosen when offered, HTTP/1.1 otherwise.
    let h2 = connect(address(&server), ca.client_config(&[b"h2", b"http/1.1"]))
        .await
        .unwrap();
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let h1 = connect(address(&server), ca.client_config(&[b"http/1.1"]))
        .await
        .unwrap();
    assert_eq!(h1.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));

    // A client that does not trust the CA fails the handshake; the node keeps serving.
    let stranger = TestCa::new("Some other CA");
    assert!(connect(address(&server), stranger.client_config(&[]))
        .await
        .is_err());

    // Plaintext on the TLS-only port: one 400 problem saying to use https, then closed.
    let mut plain = tokio::net::TcpStream::connect(address(&server))
        .await
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer))
        .await
        .expect("the refusal comes and the connection closes")
        .unwrap();
    let (status, body) = parse_answer(&answer).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("https://"), "{body}");

    let (status, _) = https_get(address(&server), ca.client_config(&[]), "/readyz")
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn plaintext_is_served_beside_tls_when_allowed() {
    let ca = TestCa::new("Herald test CA");
    let server = tls_server(&ca, &["--tls-allow-plaintext"]).await;
    let plain = herald_client::cli::http_client::builder()
        .build()
        .unwrap()
        .get(format!("http://{}/healthz", server.http_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    let (status, _) = https_get(address(&server), ca.client_config(&[]), "/healthz")
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_replaced_certificate_is_served_to_new_connections_and_open_sockets_stay() {
    let ca = TestCa::new("Herald test CA");
    let server = tls_server(&ca, &[]).await;
    let (status, _) = https_get(address(&server), ca.client_config(&[]), "/v1/topics")
        .await
        .unwrap();
    assert_eq!(status, 200);
    let created = {
        let mut stream = connect(address(&server), ca.client_config(&[]))
            .await
            .unwrap();
        let body = json!({"name": "secure", "partitions": 1}).to_string();
        let request = format!(
            "POST /v1/topics HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        parse_answer(&answer).unwrap().0
    };
    assert_eq!(created, 201);

    // A WebSocket over TLS (wss), subscribed before the certificate changes.
    let tls = connect(address(&server), ca.client_config(&[b"http/1.1"]))
        .await
        .unwrap();
    let mut request = format!("wss://{}/v1/ws", server.http_addr())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.v1".parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::client_async(request, tls)
        .await
        .expect("WebSocket handshake over TLS");
    socket
        .send(Message::text(
            json!({"op": "subscribe", "id": "s", "topic": "secure", "from": "earliest"})
                .to_string(),
        ))
        .await
        .unwrap();
    assert_eq!(next_text(&mut socket).await["op"], "ok");
    assert_eq!(served_common_name(&server, &ca).await, "herald-node-first");

    // Replace the files and send SIGHUP: new connections get the new certificate.
    ca.issue("node", "herald-node-second");
    kill(Pid::from_raw(server.pid().unwrap() as i32), Signal::SIGHUP).unwrap();
    let switched = poll(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            match served_common_name(&server, &ca).await.as_str() {
                "herald-node-second" => Ok(()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;
    assert!(switched.is_ok(), "{switched:?}");

    // The socket opened under the old certificate still publishes and receives.
    socket
        .send(Message::text(
            json!({"op": "publish", "id": "p", "topic": "secure", "messages": [{"value": 1}]})
                .to_string(),
        ))
        .await
        .unwrap();
    let mut ops = Vec::new();
    for _ in 0..2 {
        ops.push(
            next_text(&mut socket).await["op"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    ops.sort();
    assert_eq!(ops, vec!["messages", "published"]);

    // And without a signal: a changed file is noticed on its own.
    ca.issue("node", "herald-node-first");
    let switched_back = poll(
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            match served_common_name(&server, &ca).await.as_str() {
                "herald-node-first" => Ok(()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;
    assert!(switched_back.is_ok(), "{switched_back:?}");
}

/// How a slow client misbehaves once connected.
#[derive(Clone, Copy, Debug)]
enum Slow {
    /// Sends nothing at all.
    Silent,
    /// Sends the start of a request head and never finishes it.
    UnfinishedHead,
    /// Sends one whole request, reads the answer, then keeps the connection open and idle.
    IdleAfterAnswer,
    /// Sends the HTTP/2 connection preface and nothing more.
    Http2Preface,
}

impl Slow {
    /// Misbehaves on `stream`; an error when the node did not take it (a 503 at the limit).
    async fn act<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        self,
        stream: &mut S,
    ) -> Result<(), String> {
        let sent: &[u8] = match self {
            Slow::Silent => return Ok(()),
            Slow::UnfinishedHead => b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: 1",
            Slow::IdleAfterAnswer => b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
            Slow::Http2Preface => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        };
        stream
            .write_all(sent)
            .await
            .map_err(|error| format!("send: {error}"))?;
        if let Slow::IdleAfterAnswer = self {
            let mut answer = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
                .await
                .map_err(|_| "no answer in time".to_string())?
                .map_err(|error| format!("read the answer: {error}"))?;
            if !answer[..read].starts_with(b"HTTP/1.1 200") {
                return Err(String::from_utf8_lossy(&answer[..read]).into_owned());
            }
        }
        Ok(())
    }
}

/// Whether the node closes `stream` (end of stream or a reset) within `within`, reading and
/// dropping whatever it sends before.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, within: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_elapsed) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Whether the node holds a new plain connection open (admitted under `max_connections`)
/// rather than answering it at once with its 503 and closing it.
async fn admitted<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut byte = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(400), stream.read(&mut byte))
        .await
        .is_err()
}

/// `GET /healthz` on a fresh plain connection answers 200 within `within`.
async fn healthz_within(server: &Server, within: Duration) -> Result<(), String> {
    let client = herald_client::cli::http_client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    poll(within, Duration::from_millis(100), || async {
        match client.get(server.url("/healthz")).send().await {
            Ok(response) if response.status() == 200 => Ok(()),
            Ok(response) => Err(format!("GET /healthz: {}", response.status())),
            Err(error) => Err(format!("GET /healthz: {error}")),
        }
    })
    .await
}

#[tokio::test]
async fn slow_silent_and_idle_connections_are_closed_and_do_not_lock_out_healthz() {
    let server = Server::start_with_env(
        &["--max-connections", "4"],
        &[("HERALD_HEADER_READ_TIMEOUT_MS", "1000")],
    )
    .await;
    // Four slow clients take every place the node has.
    let kinds = [
        Slow::Silent,
        Slow::UnfinishedHead,
        Slow::IdleAfterAnswer,
        Slow::Http2Preface,
    ];
    let mut held = Vec::new();
    for kind in kinds {
        let stream = poll(
            Duration::from_secs(10),
            Duration::from_millis(100),
            || async {
                let mut stream = tokio::net::TcpStream::connect(address(&server))
                    .await
                    .map_err(|error| error.to_string())?;
                // An idle client's answer proves its admission; the others are not answered.
                if !matches!(kind, Slow::IdleAfterAnswer) && !admitted(&mut stream).await {
                    return Err(format!("{kind:?} was not admitted"));
                }
                kind.act(&mut stream).await?;
                Ok(stream)
            },
        )
        .await
        .unwrap_or_else(|seen| server.fail(&seen));
        held.push((kind, stream));
    }

    // Within a few header timeouts every one is closed and the node answers again.
    healthz_within(&server, Duration::from_secs(10))
        .await
        .unwrap_or_else(|seen| server.fail(&seen));
    for (kind, stream) in &mut held {
        assert!(
            closed_within(stream, Duration::from_secs(5)).await,
            "{kind:?} is still open"
        );
    }
    let closed = server
        .metric(
            "herald_http_connections_closed_total",
            &[("reason", "header_timeout")],
        )
        .await
        .unwrap_or(0.0);
    assert!(closed >= 4.0, "connections closed for their head: {closed}");
}

#[tokio::test]
async fn silent_connections_after_the_tls_handshake_are_closed() {
    let ca = TestCa::new("Herald test CA");
    let server = tls_server_with_env(
        &ca,
        &["--max-connections", "2"],
        &[("HERALD_HEADER_READ_TIMEOUT_MS", "1000")],
    )
    .await;
    let mut held = Vec::new();
    for kind in [Slow::Silent, Slow::UnfinishedHead] {
        let mut stream = poll(
            Duration::from_secs(10),
            Duration::from_millis(100),
            || async {
                connect(address(&server), ca.client_config(&[b"http/1.1"]))
                    .await
                    .map_err(|error| error.to_string())
            },
        )
        .await
        .unwrap_or_else(|seen| server.fail(&seen));
        kind.act(&mut stream)
            .await
            .unwrap_or_else(|seen| server.fail(&seen));
        held.push((kind, stream));
    }
    let healthy = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            match https_get(address(&server), ca.client_config(&[]), "/healthz").await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("GET /healthz: {other:?}")),
            }
        },
    )
    .await;
    healthy.unwrap_or_else(|seen| server.fail(&seen));
    for (kind, stream) in &mut held {
        assert!(
            closed_within(stream, Duration::from_secs(5)).await,
            "{kind:?} is still open"
        );
    }
}
