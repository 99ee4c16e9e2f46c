//! Mutual TLS between nodes (`--rpc-tls-cert/key/ca`): a three-node cluster whose every RPC
//! connection is TLS both ways forms, elects, replicates and forwards; a peer with a certificate
//! from another CA, or none, cannot open a connection to a node's RPC port.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::cluster::{
    create_replicated, messages_url, produce_client, produce_retrying, TestCluster,
};
use common::tls::TestCa;
use serde_json::json;
use tokio::io::AsyncReadExt;

const PRODUCE_DEADLINE: Duration = Duration::from_secs(30);

/// Certificates for nodes 1..=n (`node-<id>.pem`, naming `herald-node-<id>`) and the CA file.
fn cluster_pki(ca: &TestCa, n: u64) -> Vec<String> {
    for id in 1..=n {
        ca.issue_with_names(
            &format!("node-{id}"),
            &format!("herald node {id}"),
            &[&format!("herald-node-{id}")],
        );
    }
    let dir = ca.dir().display().to_string();
    vec![
        "--rpc-tls-cert".into(),
        format!("{dir}/node-{{id}}.pem"),
        "--rpc-tls-key".into(),
        format!("{dir}/node-{{id}}.key"),
        "--rpc-tls-ca".into(),
        ca.write_ca().display().to_string(),
    ]
}

/// Whether a TLS client with `config` completes a handshake with `address` and is then kept
/// (a refused client certificate ends the connection at once after the handshake in TLS 1.3).
async fn rpc_tls_accepted(
    address: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    node: u64,
) -> bool {
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(address).await?;
        let name = rustls::pki_types::ServerName::try_from(format!("herald-node-{node}")).unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await?;
        // The server reads a hello next; a refused certificate makes it close (an alert).
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(500), tls.read(&mut byte)).await {
            Err(_) => Ok::<bool, std::io::Error>(true), // still open, waiting for a hello
            Ok(Ok(0)) | Ok(Err(_)) => Ok(false),
            Ok(Ok(_)) => Ok(true),
        }
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .map(|outcome| outcome.unwrap_or(false))
        .unwrap_or(false)
}

#[tokio::test]
async fn a_cluster_over_mutual_tls_replicates_and_refuses_strangers() {
    let ca = TestCa::new("Herald cluster CA");
    let args = cluster_pki(&ca, 3);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = TestCluster::start_with(3, &args).await;

    // Replication and forwarding run over the TLS connections: produce through node 2, read
    // every message back through node 3.
    create_replicated(&cluster, 1, "secured", 1, 3).await;
    let client = produce_client();
    let body = json!({"messages": (0..20).map(|n| json!({"value": n})).collect::<Vec<_>>()});
    produce_retrying(
        &client,
        &[messages_url(&cluster, 2, "secured")],
        &body,
        PRODUCE_DEADLINE,
    )
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
    let read: serde_json::Value = client
        .get(
            cluster
                .node(3)
                .url("/v1/topics/secured/partitions/0/messages?offset=0&max_messages=100"),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let values: Vec<i64> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["value"].as_i64().unwrap())
        .collect();
    assert_eq!(values, (0..20).collect::<Vec<_>>());

    let raft_1: SocketAddr = cluster.node(1).raft_addr().parse().unwrap();
    // A client certificate from the cluster CA is let in (it may then say hello).
    let member = ca.issue_with_names("member", "a member", &["herald-node-9"]);
    let trusted = client_config(&ca, Some(&member));
    assert!(rpc_tls_accepted(raft_1, trusted, 1).await);
    // One from another CA, or none, is not.
    let stranger_ca = TestCa::new("Another CA");
    let stranger = stranger_ca.issue_with_names("stranger", "a stranger", &["herald-node-2"]);
    assert!(!rpc_tls_accepted(raft_1, client_config(&ca, Some(&stranger)), 1).await);
    assert!(!rpc_tls_accepted(raft_1, client_config(&ca, None), 1).await);

    // The cluster is still whole after the strangers' attempts.
    produce_retrying(
        &client,
        &[messages_url(&cluster, 3, "secured")],
        &body,
        PRODUCE_DEADLINE,
    )
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
}

/// A client trusting `roots_ca` (for the node's certificate), presenting `identity` (a client
/// certificate, from whichever CA) if given.
fn client_config(
    roots_ca: &TestCa,
    identity: Option<&common::tls::IssuedFiles>,
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(roots_ca.cert_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(files) => {
            let chain = rustls::pki_types::CertificateDer::pem_file_iter(&files.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&files.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}
