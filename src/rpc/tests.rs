//! Client and server together over loopback TCP. Every wait is bounded by [`WAIT`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

use super::frame::{write_frame, FrameKind, FrameReader, Hello};
use super::server::serve_counting;
use super::{RpcClient, RpcError, RpcHandler, RpcLimits, ServiceId};

const WAIT: Duration = Duration::from_secs(5);

const ECHO: ServiceId = 1;
const FAIL: ServiceId = 2;
const PANIC_AT_CALL: ServiceId = 3;
const PANIC_IN_FUTURE: ServiceId = 4;
const SLOW: ServiceId = 5;
const BLOCK: ServiceId = 6;

const SLOW_HANDLER: Duration = Duration::from_millis(500);

struct TestHandler {
    calls: AtomicUsize,
    /// `BLOCK` requests wait for a permit here.
    gate: Arc<Semaphore>,
}

impl RpcHandler for TestHandler {
    fn handle(
        &self,
        from: u64,
        service: ServiceId,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match service {
            ECHO => async move { Ok(echo(from, service, &body)) }.boxed(),
            FAIL => async move { Err(format!("no such group {}", body.len())) }.boxed(),
            PANIC_AT_CALL => panic!("handler bug at call"),
            PANIC_IN_FUTURE => async move { panic!("handler bug in future") }.boxed(),
            SLOW => async move {
                tokio::time::sleep(SLOW_HANDLER).await;
                Ok(body)
            }
            .boxed(),
            BLOCK => {
                let gate = self.gate.clone();
                async move {
                    let _permit = gate.acquire().await.map_err(|error| error.to_string())?;
                    Ok(body)
                }
                .boxed()
            }
            other => async move { Err(format!("unknown service {other}")) }.boxed(),
        }
    }
}

fn echo(from: u64, service: ServiceId, body: &[u8]) -> Bytes {
    let mut answer = format!("{from}:{service}:").into_bytes();
    answer.extend_from_slice(body);
    Bytes::from(answer)
}

struct TestServer {
    address: String,
    accepted: Arc<AtomicUsize>,
    handler: Arc<TestHandler>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl TestServer {
    async fn start(node_id: u64, limits: RpcLimits) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        TestServer::start_on(listener, node_id, limits)
    }

    fn start_on(listener: TcpListener, node_id: u64, limits: RpcLimits) -> TestServer {
        let address = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(TestHandler {
            calls: AtomicUsize::new(0),
            gate: Arc::new(Semaphore::new(0)),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_counting(
            listener,
            node_id,
            handler.clone(),
            limits,
            async move {
                let _ = stopped.await;
            },
            accepted.clone(),
        ));
        TestServer {
            address,
            accepted,
            handler,
            stop,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn calls(&self) -> usize {
        self.handler.calls.load(Ordering::SeqCst)
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the server stops in time")
            .unwrap();
    }
}

fn client_of(node: u64, server: &TestServer, limits: RpcLimits) -> RpcClient {
    let client = RpcClient::new(1, limits);
    client.set_address(node, &server.address);
    client
}

async fn call(
    client: &RpcClient,
    node: u64,
    service: ServiceId,
    body: &'static [u8],
) -> Result<Bytes, RpcError> {
    client
        .call(node, service, Bytes::from_static(body), WAIT)
        .await
}

async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    condition()
}

/// Reads until the server closes the stream; false if it is still open after [`WAIT`].
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 1024];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_elapsed) => return false,
        }
    }
}

#[tokio::test]
async fn echo_round_trip_carries_service_and_sender() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());
    assert_eq!(client.address(2).as_deref(), Some(server.address.as_str()));
    assert!(client.last_answer(2).is_none());

    let answer = call(&client, 2, ECHO, b"ping").await.unwrap();

    assert_eq!(answer, Bytes::from_static(b"1:1:ping"));
    assert!(client.last_answer(2).is_some());
    assert!(client.is_connected(2));
    server.stop().await;
}

#[tokio::test]
async fn concurrent_calls_share_one_connection() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());

    let calls = (0..1000u32).map(|index| {
        let client = client.clone();
        async move {
            let body = Bytes::copy_from_slice(&index.to_be_bytes());
            let answer = client.call(2, ECHO, body.clone(), WAIT).await;
            (body, answer)
        }
    });
    let answers = join_all(calls).await;

    for (body, answer) in answers {
        assert_eq!(answer.unwrap(), echo(1, ECHO, &body));
    }
    assert_eq!(server.accepted(), 1);
    assert_eq!(server.calls(), 1000);
    assert_eq!(client.pending_calls(2), 0);
    server.stop().await;
}

#[tokio::test]
async fn handler_error_arrives_as_remote() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());

    let error = call(&client, 2, FAIL, b"abc").await.unwrap_err();

    assert!(
        matches!(&error, RpcError::Remote(message) if message == "no such group 3"),
        "{error}"
    );
    assert!(error.maybe_delivered());
    server.stop().await;
}

#[tokio::test]
async fn panicking_handler_answers_an_error_and_the_server_keeps_serving() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());

    for service in [PANIC_AT_CALL, PANIC_IN_FUTURE] {
        let error = call(&client, 2, service, b"").await.unwrap_err();
        assert!(
            matches!(&error, RpcError::Remote(message) if message.contains("panicked")),
            "{error}"
        );
    }

    assert_eq!(
        call(&client, 2, ECHO, b"still").await.unwrap(),
        echo(1, ECHO, b"still")
    );
    assert_eq!(server.accepted(), 1);
    server.stop().await;
}

#[tokio::test]
async fn slow_handler_times_out_without_leaking_the_pending_call() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());
    call(&client, 2, ECHO, b"warm up").await.unwrap();
    let timeout = Duration::from_millis(100);

    let started = Instant::now();
    let error = client
        .call(2, SLOW, Bytes::from_static(b"zzz"), timeout)
        .await
        .unwrap_err();
    let elapsed = started.elapsed();

    assert!(matches!(error, RpcError::Timeout { node: 2 }), "{error}");
    assert!(error.maybe_delivered());
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_millis(200),
        "{elapsed:?}"
    );
    assert_eq!(client.pending_calls(2), 0);
    assert_eq!(
        call(&client, 2, ECHO, b"after").await.unwrap(),
        echo(1, ECHO, b"after")
    );
    // The late answer to the abandoned call is dropped without harm.
    tokio::time::sleep(SLOW_HANDLER).await;
    assert_eq!(
        call(&client, 2, ECHO, b"later").await.unwrap(),
        echo(1, ECHO, b"later")
    );
    assert_eq!(server.accepted(), 1);
    server.stop().await;
}

#[tokio::test]
async fn nothing_listening_is_unreachable_quickly_then_backs_off() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let limits = RpcLimits {
        reconnect_backoff: Duration::from_millis(300),
        ..RpcLimits::default()
    };
    let client = RpcClient::new(1, limits);
    client.set_address(2, &address.to_string());

    let started = Instant::now();
    let error = call(&client, 2, ECHO, b"anyone?").await.unwrap_err();
    assert!(
        matches!(error, RpcError::Unreachable { node: 2, .. }),
        "{error}"
    );
    assert!(!error.maybe_delivered());
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );

    // A server appears, but during the backoff the client does not even try to connect.
    let server = TestServer::start_on(
        TcpListener::bind(address).await.unwrap(),
        2,
        RpcLimits::default(),
    );
    let started = Instant::now();
    let error = call(&client, 2, ECHO, b"anyone?").await.unwrap_err();
    assert!(
        matches!(&error, RpcError::Unreachable { reason, .. } if reason.contains("not retrying yet")),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.accepted(), 0);

    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        call(&client, 2, ECHO, b"hi").await.unwrap(),
        echo(1, ECHO, b"hi")
    );
    server.stop().await;
}

#[tokio::test]
async fn reaching_the_wrong_node_is_refused_in_the_handshake() {
    let server = TestServer::start(3, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());

    let error = call(&client, 2, ECHO, b"hello?").await.unwrap_err();

    assert!(
        matches!(&error, RpcError::Unreachable { node: 2, reason } if reason.contains("this is node 3, not node 2")),
        "{error}"
    );
    assert!(!error.maybe_delivered());
    assert_eq!(server.calls(), 0);
    server.stop().await;
}

#[tokio::test]
async fn client_reconnects_after_the_server_restarts() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let address = server.address.clone();
    let client = client_of(2, &server, RpcLimits::default());
    call(&client, 2, ECHO, b"one").await.unwrap();

    server.stop().await;
    assert!(eventually(|| !client.is_connected(2)).await);
    let listener = TcpListener::bind(&address).await.unwrap();
    let restarted = TestServer::start_on(listener, 2, RpcLimits::default());

    assert_eq!(
        call(&client, 2, ECHO, b"two").await.unwrap(),
        echo(1, ECHO, b"two")
    );
    assert_eq!(restarted.accepted(), 1);
    restarted.stop().await;
}

#[tokio::test]
async fn changing_the_address_moves_the_connection() {
    let first = TestServer::start(2, RpcLimits::default()).await;
    let second = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &first, RpcLimits::default());
    call(&client, 2, ECHO, b"first").await.unwrap();

    client.set_address(2, &second.address);
    assert!(!client.is_connected(2));
    call(&client, 2, ECHO, b"second").await.unwrap();

    assert_eq!((first.calls(), second.calls()), (1, 1));
    assert_eq!(second.accepted(), 1);
    client.forget(2);
    assert_eq!(client.address(2), None);
    assert!(matches!(
        call(&client, 2, ECHO, b"").await,
        Err(RpcError::NoAddress(2))
    ));
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn garbage_and_oversized_frames_close_only_that_connection() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());
    call(&client, 2, ECHO, b"before").await.unwrap();

    // Not our protocol at all: "GET " read as a length prefix claims about 1.2 GB.
    let mut stranger = TcpStream::connect(&server.address).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stranger, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_by_server(&mut stranger).await);

    // A proper handshake, then a length prefix of 4 GiB.
    let stream = TcpStream::connect(&server.address).await.unwrap();
    let (read_half, mut write_half) = stream.into_split();
    write_frame(&mut write_half, &Hello { from: 7, to: 2 }.into_frame())
        .await
        .unwrap();
    let mut reader = FrameReader::new(read_half, 1024);
    let ack = tokio::time::timeout(WAIT, reader.read_frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ack.kind, FrameKind::HelloAck);
    tokio::io::AsyncWriteExt::write_all(&mut write_half, &[0xff, 0xff, 0xff, 0xff, 0, 1, 2, 3])
        .await
        .unwrap();
    let end = tokio::time::timeout(WAIT, reader.read_frame())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");

    // Garbage after the handshake: a well-sized frame of an unknown kind.
    let mut confused = TcpStream::connect(&server.address).await.unwrap();
    let mut bytes = Vec::new();
    write_frame(&mut bytes, &Hello { from: 8, to: 2 }.into_frame())
        .await
        .unwrap();
    bytes.extend_from_slice(&[0, 0, 0, 10, 77, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
    tokio::io::AsyncWriteExt::write_all(&mut confused, &bytes)
        .await
        .unwrap();
    assert!(closed_by_server(&mut confused).await);

    assert_eq!(
        call(&client, 2, ECHO, b"after").await.unwrap(),
        echo(1, ECHO, b"after")
    );
    assert_eq!(server.calls(), 2);
    server.stop().await;
}

#[tokio::test]
async fn a_frame_over_the_servers_limit_loses_that_connection_only() {
    let server = TestServer::start(
        2,
        RpcLimits {
            max_frame_bytes: 1024,
            ..RpcLimits::default()
        },
    )
    .await;
    let client = client_of(2, &server, RpcLimits::default());

    let error = client
        .call(2, ECHO, Bytes::from(vec![0u8; 4096]), WAIT)
        .await
        .unwrap_err();

    assert!(
        matches!(error, RpcError::ConnectionLost { node: 2, .. }),
        "{error}"
    );
    assert!(error.maybe_delivered());
    assert_eq!(
        call(&client, 2, ECHO, b"small").await.unwrap(),
        echo(1, ECHO, b"small")
    );
    server.stop().await;
}

#[tokio::test]
async fn body_over_the_frame_limit_is_too_large_and_not_sent() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(
        2,
        &server,
        RpcLimits {
            max_frame_bytes: 1024,
            ..RpcLimits::default()
        },
    );

    let error = client
        .call(2, ECHO, Bytes::from(vec![0u8; 2000]), WAIT)
        .await
        .unwrap_err();

    assert!(
        matches!(
            error,
            RpcError::TooLarge {
                size: 2014,
                max: 1024
            }
        ),
        "{error}"
    );
    assert!(!error.maybe_delivered());
    assert_eq!(server.accepted(), 0);
    assert!(matches!(
        call(&client, 9, ECHO, b"").await,
        Err(RpcError::NoAddress(9))
    ));
    server.stop().await;
}

#[tokio::test]
async fn in_flight_budget_makes_a_second_big_call_wait() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let limits = RpcLimits {
        max_in_flight_bytes_per_peer: 1000,
        ..RpcLimits::default()
    };
    let client = client_of(2, &server, limits);
    let big = Bytes::from(vec![7u8; 800]);

    let first = tokio::spawn({
        let client = client.clone();
        let big = big.clone();
        async move { client.call(2, BLOCK, big, WAIT).await }
    });
    assert!(eventually(|| server.calls() == 1).await);

    let error = client
        .call(2, BLOCK, big.clone(), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(error, RpcError::Timeout { node: 2 }), "{error}");
    assert_eq!(server.calls(), 1, "the second big call must not be sent");
    // A small call still fits beside the first one.
    assert_eq!(
        call(&client, 2, ECHO, &[1; 100]).await.unwrap(),
        echo(1, ECHO, &[1; 100])
    );

    server.handler.gate.add_permits(10);
    let answer = tokio::time::timeout(WAIT, first).await.unwrap().unwrap();
    assert_eq!(answer.unwrap(), big);
    assert_eq!(client.call(2, BLOCK, big.clone(), WAIT).await.unwrap(), big);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_running_requests_answer() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());
    call(&client, 2, ECHO, b"warm up").await.unwrap();

    let slow = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call(2, SLOW, Bytes::from_static(b"done"), WAIT)
                .await
        }
    });
    assert!(eventually(|| server.calls() == 2).await);
    server.stop().await;

    let answer = tokio::time::timeout(WAIT, slow).await.unwrap().unwrap();
    assert_eq!(answer.unwrap(), Bytes::from_static(b"done"));
    assert!(eventually(|| !client.is_connected(2)).await);
}

#[tokio::test]
async fn a_server_that_never_says_hello_is_unreachable_after_the_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let silent = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::time::sleep(WAIT).await;
        drop(stream);
    });
    let limits = RpcLimits {
        connect_timeout: Duration::from_millis(200),
        ..RpcLimits::default()
    };
    let client = RpcClient::new(1, limits);
    client.set_address(2, &address);

    let started = Instant::now();
    let error = call(&client, 2, ECHO, b"hello?").await.unwrap_err();

    assert!(
        matches!(&error, RpcError::Unreachable { reason, .. } if reason.contains("no handshake")),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    silent.abort();
}

#[tokio::test]
async fn a_connection_past_its_concurrent_requests_is_not_read() {
    let limits = RpcLimits {
        max_concurrent_requests_per_connection: 2,
        ..RpcLimits::default()
    };
    let server = TestServer::start(2, limits).await;
    let client = client_of(2, &server, RpcLimits::default());

    let calls: Vec<_> = (0..5u8)
        .map(|index| {
            let client = client.clone();
            tokio::spawn(async move { client.call(2, BLOCK, Bytes::from(vec![index]), WAIT).await })
        })
        .collect();
    assert!(eventually(|| server.calls() == 2).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.calls(),
        2,
        "requests past the limit must wait unread"
    );

    server.handler.gate.add_permits(5);
    for (index, call) in calls.into_iter().enumerate() {
        let answer = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
        assert_eq!(answer.unwrap(), Bytes::from(vec![index as u8]));
    }
    assert_eq!(server.calls(), 5);
    server.stop().await;
}
