//! Mutual TLS between nodes: calls work when both certificates come from the cluster CA and
//! name the nodes, and fail when the client's certificate names another node than its hello,
//! when the server is not the node the client meant, when a certificate comes from another CA,
//! or when one side speaks plain TCP.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use super::*;
use crate::{PeerTls, PeerTlsFiles};

struct TestPki {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
}

impl TestPki {
    fn new() -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        TestPki {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The files of a node whose certificate names `herald-node-<named>`.
    fn node(&self, named: u64) -> PeerTlsFiles {
        let dir = self.dir.path();
        let params = CertificateParams::new(vec![crate::node_name(named)]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let write = |name: String, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        PeerTlsFiles {
            cert_file: write(format!("node-{named}.pem"), cert.pem()),
            key_file: write(format!("node-{named}.key"), key.serialize_pem()),
            ca_file: write("ca.pem".into(), self.issuer.pem()),
            reload_check_interval: Duration::from_secs(60),
        }
    }
}

fn limits_with(files: Option<PeerTlsFiles>) -> RpcLimits {
    RpcLimits {
        tls: files.map(|files| PeerTls::load(files).unwrap()),
        ..RpcLimits::default()
    }
}

fn client(own_id: u64, server: &TestServer, files: Option<PeerTlsFiles>) -> RpcClient {
    let client = RpcClient::new(own_id, limits_with(files));
    client.set_address(1, &server.address);
    client
}

#[tokio::test]
async fn calls_between_nodes_with_certificates_naming_them_work() {
    let pki = TestPki::new();
    let server = TestServer::start(1, limits_with(Some(pki.node(1)))).await;
    let answer = call(&client(2, &server, Some(pki.node(2))), 1, ECHO, b"hi")
        .await
        .expect("a call over mutual TLS");
    assert_eq!(&answer[..], b"2:1:hi");
    server.stop().await;
}

#[tokio::test]
async fn a_node_cannot_speak_for_another_or_reach_the_wrong_node() {
    let pki = TestPki::new();
    let server = TestServer::start(1, limits_with(Some(pki.node(1)))).await;
    // Node 3 with node 2's certificate: the hello names node 3, the certificate does not.
    let error = call(&client(3, &server, Some(pki.node(2))), 1, ECHO, b"x")
        .await
        .expect_err("refused");
    assert!(
        format!("{error:?}").contains("does not name node 3"),
        "{error:?}"
    );
    assert_eq!(server.calls(), 0);
    server.stop().await;

    // A server whose certificate names node 5, reached as node 1: the client refuses it.
    let impostor = TestServer::start(1, limits_with(Some(pki.node(5)))).await;
    assert!(
        call(&client(2, &impostor, Some(pki.node(2))), 1, ECHO, b"x")
            .await
            .is_err()
    );
    assert_eq!(impostor.calls(), 0);
    impostor.stop().await;
}

#[tokio::test]
async fn other_cas_and_plain_tcp_are_refused() {
    let pki = TestPki::new();
    let other = TestPki::new();
    let server = TestServer::start(1, limits_with(Some(pki.node(1)))).await;
    // A client certificate from another CA (trusting the right CA for the server).
    let mut stranger = other.node(2);
    stranger.ca_file = pki.node(9).ca_file;
    assert!(call(&client(2, &server, Some(stranger)), 1, ECHO, b"x")
        .await
        .is_err());
    // Plain TCP to a TLS node, and TLS to a plain node.
    assert!(call(&client(2, &server, None), 1, ECHO, b"x")
        .await
        .is_err());
    assert_eq!(server.calls(), 0);
    server.stop().await;
    let plain = TestServer::start(1, limits_with(None)).await;
    assert!(call(&client(2, &plain, Some(pki.node(2))), 1, ECHO, b"x")
        .await
        .is_err());
    assert_eq!(plain.calls(), 0);
    plain.stop().await;
}
