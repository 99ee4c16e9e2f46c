//! Nodes of two releases: a client and a server speaking different hello versions still
//! connect on the newest they share, and an operation the server does not know comes back as
//! `UnknownOperation`, not as a failure.

use super::*;
use crate::ProtocolVersions;

fn speaking(oldest: u16, newest: u16) -> RpcLimits {
    RpcLimits {
        protocol: ProtocolVersions { oldest, newest },
        ..RpcLimits::default()
    }
}

#[tokio::test]
async fn a_newer_client_connects_to_an_older_server_on_the_version_both_speak() {
    // This release's server (3 only, as the release before it) and a client of a next
    // release that offers 4 first.
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, speaking(3, 4));
    assert_eq!(
        call(&client, 2, ECHO, b"across").await.unwrap(),
        echo(1, ECHO, b"across")
    );
    // The refused first hello, then the accepted one.
    assert_eq!(server.accepted(), 2);
    server.stop().await;
}

#[tokio::test]
async fn an_older_client_connects_to_a_newer_server() {
    let server = TestServer::start(2, speaking(3, 4)).await;
    let client = client_of(2, &server, RpcLimits::default());
    assert_eq!(
        call(&client, 2, ECHO, b"up").await.unwrap(),
        echo(1, ECHO, b"up")
    );
    assert_eq!(server.accepted(), 1);
    server.stop().await;
}

#[tokio::test]
async fn nodes_without_a_version_in_common_say_so() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, speaking(5, 6));
    let error = call(&client, 2, ECHO, b"never").await.unwrap_err();
    assert!(
        matches!(&error, RpcError::Unreachable { reason, .. }
            if reason.contains("unsupported protocol version 6 (this node speaks 3)")),
        "{error}"
    );
    assert!(!error.maybe_delivered());
    assert_eq!(server.calls(), 0);
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_operation_is_told_apart_from_a_failure() {
    let server = TestServer::start(2, RpcLimits::default()).await;
    let client = client_of(2, &server, RpcLimits::default());
    let error = call(&client, 2, UNKNOWN_OPERATION, b"12345")
        .await
        .unwrap_err();
    assert!(
        matches!(error, RpcError::UnknownOperation { node: 2, tag: 5 }),
        "{error}"
    );
    // Nothing was done: the sender may fall back to an operation the node knows.
    assert!(!error.maybe_delivered());
    let error = call(&client, 2, FAIL, b"123").await.unwrap_err();
    assert!(matches!(error, RpcError::Remote(_)), "{error}");
    server.stop().await;
}
