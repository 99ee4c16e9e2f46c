//! What callers see when things work: answers, errors from handlers, limits doing their job.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::join_all;

use super::*;
use crate::{Lane, LaneLimits, RpcError, RpcLimits};

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
            let answer = client
                .call(2, Lane::Control, ECHO, body.clone(), WAIT)
                .await;
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
        .call(2, Lane::Control, SLOW, Bytes::from_static(b"zzz"), timeout)
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
async fn in_flight_budget_makes_a_second_big_call_wait() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let limits = RpcLimits {
        control: LaneLimits {
            max_in_flight_bytes_per_peer: 1000,
            ..LaneLimits::default()
        },
        ..RpcLimits::default()
    };
    let client = client_of(2, &server, limits);
    let big = Bytes::from(vec![7u8; 800]);

    let first = tokio::spawn({
        let client = client.clone();
        let big = big.clone();
        async move { client.call(2, Lane::Control, BLOCK, big, WAIT).await }
    });
    assert!(eventually(|| server.calls() == 1).await);

    let error = client
        .call(
            2,
            Lane::Control,
            BLOCK,
            big.clone(),
            Duration::from_millis(200),
        )
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
    assert_eq!(
        client
            .call(2, Lane::Control, BLOCK, big.clone(), WAIT)
            .await
            .unwrap(),
        big
    );
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
                .call(2, Lane::Control, SLOW, Bytes::from_static(b"done"), WAIT)
                .await
        }
    });
    assert!(eventually(|| server.calls() == 2).await);
    server.stop().await;

    let answer = tokio::time::timeout(WAIT, slow).await.unwrap().unwrap();
    assert_eq!(answer.unwrap(), Bytes::from_static(b"done"));
    assert!(eventually(|| !client.is_connected(2)).await);
}

/// The server announces its limit in the handshake; the client keeps calls past it waiting,
/// unsent (`lanes` tests a client that ignores it).
#[tokio::test]
async fn calls_past_the_servers_concurrent_limit_wait_unsent() {
    let limits = RpcLimits {
        control: LaneLimits {
            max_concurrent_requests_per_connection: 2,
            ..LaneLimits::default()
        },
        ..RpcLimits::default()
    };
    let server = TestServer::start(2, limits).await;
    let client = client_of(2, &server, RpcLimits::default());

    let calls: Vec<_> = (0..5u8)
        .map(|index| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .call(2, Lane::Control, BLOCK, Bytes::from(vec![index]), WAIT)
                    .await
            })
        })
        .collect();
    assert!(eventually(|| server.calls() == 2).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.calls(), 2, "calls past the limit must wait");

    server.handler.gate.add_permits(5);
    for (index, call) in calls.into_iter().enumerate() {
        let answer = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
        assert_eq!(answer.unwrap(), Bytes::from(vec![index as u8]));
    }
    assert_eq!(server.calls(), 5);
    server.stop().await;
}
