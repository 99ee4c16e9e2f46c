//! Fan-out of live streams against the real binary: many WebSocket subscribers of one
//! partition on one node all get every message in order, while the node reads the partition
//! about once per write for all of them (one shared reader), not once per subscriber.

use std::time::Duration;

use crate::common::ws::{batch, connect, receive, subscribe, values, Socket};
use crate::common::{poll, Server};
use serde_json::json;

const SUBSCRIBERS: usize = 50;
const WRITES: i64 = 20;

async fn tail_reads(server: &Server, kind: &str) -> f64 {
    server
        .metric("herald_tail_reads_total", &[("kind", kind)])
        .await
        .unwrap_or(0.0)
}

async fn wait_for_gauge(server: &Server, name: &str, expected: f64) {
    poll(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            match server.metric(name, &[]).await {
                Some(value) if value == expected => Ok(()),
                other => Err(format!("{name} is {other:?}, expected {expected}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
}

#[tokio::test]
async fn fifty_subscribers_of_one_partition_get_every_message_through_one_shared_reader() {
    let server = Server::start().await;
    server.create_topic("fan", 1).await;
    server.wait_for_leaders("fan").await;
    server.produce_ok("fan", &batch(0..5, None)).await;

    let mut sockets: Vec<Socket> = Vec::with_capacity(SUBSCRIBERS);
    for index in 0..SUBSCRIBERS {
        let mut socket = connect(&server).await;
        // Half start at the beginning (catching up on their own first), half at the end.
        let from = if index % 2 == 0 { "earliest" } else { "latest" };
        subscribe(
            &mut socket,
            json!({"op": "subscribe", "id": "s", "topic": "fan", "partition": 0, "from": from}),
        )
        .await;
        sockets.push(socket);
    }
    for socket in sockets.iter_mut().step_by(2) {
        assert_eq!(values(&receive(socket, "s", 5).await), vec![0, 1, 2, 3, 4]);
    }
    wait_for_gauge(&server, "herald_tail_attached_streams", SUBSCRIBERS as f64).await;
    wait_for_gauge(&server, "herald_tail_shared_readers", 1.0).await;

    let shared_before = tail_reads(&server, "shared").await;
    let own_before = tail_reads(&server, "own").await;
    // One write at a time: each wakes the partition's readers once.
    for n in 5..5 + WRITES {
        server.produce_ok("fan", &batch(n..n + 1, None)).await;
    }
    let expected: Vec<i64> = (5..5 + WRITES).collect();
    for socket in &mut sockets {
        let received = receive(socket, "s", WRITES as usize).await;
        assert_eq!(values(&received), expected);
        let offsets: Vec<u64> = received
            .iter()
            .map(|m| m["offset"].as_u64().expect("an offset"))
            .collect();
        assert_eq!(offsets, (5..5 + WRITES as u64).collect::<Vec<_>>());
    }

    let shared = tail_reads(&server, "shared").await - shared_before;
    let own = tail_reads(&server, "own").await - own_before;
    // A reader per subscriber would read at least once per write each: 50 x 20 = 1000.
    assert!(
        shared <= (2 * WRITES) as f64,
        "{shared} shared reads for {WRITES} writes"
    );
    assert!(
        own <= 5.0,
        "{own} reads of their own by attached subscribers"
    );

    // The shared reader stops with its last subscriber.
    for socket in &mut sockets {
        socket.close(None).await.expect("close");
    }
    wait_for_gauge(&server, "herald_tail_attached_streams", 0.0).await;
    wait_for_gauge(&server, "herald_tail_shared_readers", 0.0).await;
}
