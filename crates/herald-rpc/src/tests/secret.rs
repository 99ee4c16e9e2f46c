//! The cluster secret in the hello: nodes with the same secret talk; a client without it, or
//! with another, is refused by the server, and a client does not talk to a server that cannot
//! prove it; a node the peer filter does not admit is refused, and its open connection is
//! closed once it leaves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;
use crate::{HelloKey, PeerAdmission, PeerFilter};

fn with_key(byte: u8) -> RpcLimits {
    RpcLimits {
        hello_key: Some(HelloKey::new(&[byte; 32])),
        ..RpcLimits::default()
    }
}

fn refused(outcome: &Result<Bytes, RpcError>, because: &str) -> bool {
    matches!(outcome, Err(RpcError::Unreachable { reason, .. }) if reason.contains(because))
}

#[tokio::test]
async fn nodes_with_the_same_secret_talk_and_others_are_refused() {
    let server = TestServer::start(2, with_key(1)).await;
    let friend = client_of(2, &server, with_key(1));
    let answer = call(&friend, 2, ECHO, b"hi").await.unwrap();
    assert_eq!(&answer[..], b"1:1:hi");

    // No secret: the server asks for a proof, gets none, and refuses.
    let stranger = client_of(2, &server, RpcLimits::default());
    let outcome = call(&stranger, 2, ECHO, b"hi").await;
    assert!(refused(&outcome, "did not prove"), "{outcome:?}");
    // Another secret: the client sees the server cannot prove its own and walks away.
    let other = client_of(2, &server, with_key(9));
    let outcome = call(&other, 2, ECHO, b"hi").await;
    assert!(refused(&outcome, "does not know"), "{outcome:?}");
    assert_eq!(server.calls(), 1, "only the friend's request ran");

    // A server without a secret is not talked to by a node that has one.
    let open = TestServer::start(3, RpcLimits::default()).await;
    let careful = client_of(3, &open, with_key(1));
    let outcome = call(&careful, 3, ECHO, b"hi").await;
    assert!(refused(&outcome, "without asking"), "{outcome:?}");
    assert_eq!(open.calls(), 0);
    server.stop().await;
    open.stop().await;
}

#[tokio::test]
async fn only_members_connect_and_a_node_that_leaves_is_let_go() {
    let member = Arc::new(AtomicBool::new(true));
    let filter = {
        let member = member.clone();
        PeerFilter::new(move |node| match node {
            1 if member.load(Ordering::SeqCst) => PeerAdmission::Member,
            7 => PeerAdmission::Unknown,
            _ => PeerAdmission::NotMember,
        })
    };
    let server = TestServer::start(
        2,
        RpcLimits {
            peers: Some(filter),
            ..with_key(1)
        },
    )
    .await;
    let node_1 = client_of(2, &server, with_key(1));
    assert!(call(&node_1, 2, ECHO, b"a").await.is_ok());
    let node_5 = RpcClient::new(5, with_key(1));
    node_5.set_address(2, &server.address);
    let outcome = call(&node_5, 2, ECHO, b"a").await;
    assert!(refused(&outcome, "not a member"), "{outcome:?}");
    let node_7 = RpcClient::new(7, with_key(1));
    node_7.set_address(2, &server.address);
    let outcome = call(&node_7, 2, ECHO, b"a").await;
    assert!(refused(&outcome, "starting"), "{outcome:?}");

    // Node 1 leaves: its open connection is closed at its next request after the recheck.
    member.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let outcome = call(&node_1, 2, ECHO, b"b").await;
    assert!(outcome.is_err(), "{outcome:?}");
    let outcome = call(&node_1, 2, ECHO, b"c").await;
    assert!(outcome.is_err(), "{outcome:?}");
    server.stop().await;
}
