//! Lanes kept apart and calls cancelled: the control lane answers while the client lane is at
//! its limit with slow calls, and a call its caller drops stops running on the server.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::TcpStream;

use super::*;
use crate::frame::{cancel, write_frame, Frame, FrameKind, FrameReader, Hello};
use crate::{Lane, LaneLimits, RpcLimits};

/// Well above a loopback round trip on a loaded machine, far below a blocked call's `WAIT`.
const PROMPTLY: Duration = Duration::from_secs(2);

fn client_lane_limited_to(requests: usize) -> RpcLimits {
    RpcLimits {
        client: LaneLimits {
            max_concurrent_requests_per_connection: requests,
            ..LaneLimits::default()
        },
        ..RpcLimits::default()
    }
}

fn blocked_call(client: &RpcClient, lane: Lane, index: u8) -> JoinHandle<Result<Bytes, RpcError>> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call(2, lane, BLOCK, Bytes::from(vec![index]), WAIT)
            .await
    })
}

#[tokio::test]
async fn the_control_lane_answers_while_the_client_lane_is_saturated() {
    let limit = 4;
    let server = TestServer::start(2, client_lane_limited_to(limit)).await;
    let client = client_of(2, &server, client_lane_limited_to(limit));

    // Three times the client lane's limit of calls that do not finish.
    let slow: Vec<_> = (0..3 * limit as u8)
        .map(|index| blocked_call(&client, Lane::Client, index))
        .collect();
    assert!(eventually(|| server.calls() == limit).await);

    for round in 0..20u8 {
        let started = Instant::now();
        let body = [round];
        let answer = client
            .call(2, Lane::Control, ECHO, Bytes::copy_from_slice(&body), WAIT)
            .await
            .unwrap();
        assert_eq!(answer, echo(1, ECHO, &body));
        assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    }
    assert!(client.is_connected_on(2, Lane::Control));
    assert!(client.is_connected_on(2, Lane::Client));
    assert_eq!(server.accepted(), 2, "one connection per lane");
    assert_eq!(
        server.calls(),
        limit + 20,
        "client-lane calls past the limit wait at the client, unsent"
    );

    server.handler.gate.add_permits(slow.len());
    for (index, call) in slow.into_iter().enumerate() {
        let answer = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
        assert_eq!(answer.unwrap(), Bytes::from(vec![index as u8]));
    }
    server.stop().await;
}

#[tokio::test]
async fn a_dropped_call_stops_its_handler_on_the_server_and_frees_its_slot() {
    let server = TestServer::start(2, client_lane_limited_to(1)).await;
    let client = client_of(2, &server, client_lane_limited_to(1));

    // The caller goes away while the handler waits.
    let call = blocked_call(&client, Lane::Client, 1);
    assert!(eventually(|| server.calls() == 1).await);
    let dropped_at = Instant::now();
    call.abort();
    assert!(
        eventually(|| server.abandoned() == 1).await,
        "the handler still runs"
    );
    assert!(
        dropped_at.elapsed() < PROMPTLY,
        "{:?}",
        dropped_at.elapsed()
    );
    assert_eq!(client.pending_calls(2), 0);

    // A call that times out is cancelled the same way.
    let error = client
        .call(
            2,
            Lane::Client,
            BLOCK,
            Bytes::from_static(b"t"),
            Duration::from_millis(100),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, RpcError::Timeout { node: 2 }), "{error}");
    assert!(
        eventually(|| server.abandoned() == 2).await,
        "the handler still runs"
    );

    // The one slot is free again: a call runs and answers.
    server.handler.gate.add_permits(1);
    let answer = client
        .call(2, Lane::Client, BLOCK, Bytes::from_static(b"after"), WAIT)
        .await
        .unwrap();
    assert_eq!(answer, Bytes::from_static(b"after"));
    assert_eq!(server.calls(), 3);
    assert_eq!(server.accepted(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_lost_connection_aborts_every_handler_it_carried() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());
    let calls: Vec<_> = (0..5)
        .map(|index| blocked_call(&client, Lane::Client, index))
        .collect();
    assert!(eventually(|| server.calls() == 5).await);

    client.forget(2);

    for call in calls {
        let error = tokio::time::timeout(WAIT, call)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(matches!(error, RpcError::ConnectionLost { .. }), "{error}");
    }
    assert!(
        eventually(|| server.abandoned() == 5).await,
        "{}",
        server.abandoned()
    );
    server.stop().await;
}

/// A raw client on the client lane: says hello, then writes frames by hand.
async fn raw_client(
    server: &TestServer,
) -> (
    FrameReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
    u32,
) {
    let stream = TcpStream::connect(&server.address).await.unwrap();
    let (read_half, mut write_half) = stream.into_split();
    let hello = Hello {
        version: 3,
        from: 7,
        to: 2,
        lane: Lane::Client,
        nonce: [0; 32],
    };
    write_frame(&mut write_half, &hello.into_frame())
        .await
        .unwrap();
    let mut reader = FrameReader::new(read_half, 1 << 20);
    let ack = tokio::time::timeout(WAIT, reader.read_frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ack.kind, FrameKind::HelloAck);
    let ack = crate::frame::HelloAck::decode(&ack.body).unwrap();
    (reader, write_half, ack.max_concurrent_requests)
}

#[tokio::test]
async fn the_server_announces_its_limit_and_a_cancel_frees_a_slot_at_once() {
    let server = TestServer::start(2, client_lane_limited_to(2)).await;
    let (_reader, mut writer, announced) = raw_client(&server).await;
    assert_eq!(announced, 2);
    let request = |id: u64| Frame::new(FrameKind::Request, id, BLOCK, Bytes::from(vec![id as u8]));

    write_frame(&mut writer, &request(1)).await.unwrap();
    write_frame(&mut writer, &request(2)).await.unwrap();
    assert!(eventually(|| server.calls() == 2).await);
    // At the limit the server still reads: the cancel gets through and frees a slot.
    write_frame(&mut writer, &cancel(1, BLOCK)).await.unwrap();
    assert!(eventually(|| server.abandoned() == 1).await);
    write_frame(&mut writer, &request(3)).await.unwrap();
    assert!(eventually(|| server.calls() == 3).await);

    // A client that ignores the limit: the request past it waits unread for a slot.
    write_frame(&mut writer, &request(4)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.calls(), 3, "a request past the limit must wait");
    server.handler.gate.add_permits(1);
    assert!(eventually(|| server.calls() == 4).await);
    server.handler.gate.add_permits(2);
    server.stop().await;
}
