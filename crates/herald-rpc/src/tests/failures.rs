//! What callers see when peers are missing, wrong, restarted or misbehaving.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::frame::{write_frame, FrameKind, FrameReader, Hello};
use crate::{Lane, RpcClient, RpcError, RpcLimits};

/// Far longer than a refused connect or a failing-fast call takes on a loaded machine, and
/// shorter than the connect timeout and the backoff below, so that a call that waited for
/// either (instead of failing fast) exceeds it.
const FAST: Duration = Duration::from_secs(2);

#[tokio::test]
async fn nothing_listening_is_unreachable_quickly_then_backs_off() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let limits = RpcLimits {
        connect_timeout: FAST * 2,
        reconnect_backoff: FAST + Duration::from_secs(1),
        ..RpcLimits::default()
    };
    let client = RpcClient::new(1, limits);
    client.set_address(2, &address.to_string());

    // Refused at once, not after the connect timeout.
    let started = Instant::now();
    let error = call(&client, 2, ECHO, b"anyone?").await.unwrap_err();
    assert!(
        matches!(error, RpcError::Unreachable { node: 2, .. }),
        "{error}"
    );
    assert!(!error.maybe_delivered());
    assert!(started.elapsed() < FAST, "{:?}", started.elapsed());

    // A server appears, but during the backoff the client does not even try to connect: the
    // call fails at once (not after the backoff) and the server accepts nothing.
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
    assert!(started.elapsed() < FAST, "{:?}", started.elapsed());
    assert_eq!(server.accepted(), 0);

    // Once the backoff is over, the next call connects.
    let deadline = Instant::now() + WAIT;
    let answer = loop {
        match call(&client, 2, ECHO, b"hi").await {
            Ok(answer) => break answer,
            Err(error) if Instant::now() < deadline => {
                assert!(error.to_string().contains("not retrying yet"), "{error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("still failing after the backoff: {error}"),
        }
    };
    assert_eq!(answer, echo(1, ECHO, b"hi"));
    assert_eq!(server.accepted(), 1);
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
    write_frame(
        &mut write_half,
        &Hello {
            version: 3,
            from: 7,
            to: 2,
            lane: Lane::Control,
            nonce: [0; 32],
        }
        .into_frame(),
    )
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
    write_frame(
        &mut bytes,
        &Hello {
            version: 3,
            from: 8,
            to: 2,
            lane: Lane::Control,
            nonce: [0; 32],
        }
        .into_frame(),
    )
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
        .call(2, Lane::Control, ECHO, Bytes::from(vec![0u8; 4096]), WAIT)
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
        .call(2, Lane::Control, ECHO, Bytes::from(vec![0u8; 2000]), WAIT)
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
