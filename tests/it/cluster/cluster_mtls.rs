//! Authentication between nodes. Mutual TLS (`--rpc-tls-cert/key/ca`): a three-node cluster
//! whose every RPC connection is TLS both ways forms, elects, replicates and forwards; a peer
//! with a certificate from another CA, or none, cannot open a connection to a node's RPC port,
//! and neither can a node removed from the cluster with its own valid certificate. Without
//! mutual TLS, the cluster secret: a process that speaks the RPC framing without it is refused
//! at the hello and cannot propose metadata (the authorization policy).

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::auth::{create_client, token};
use crate::common::cluster::{
    create_replicated, messages_url, produce_client, produce_retrying, TestCluster,
    CATCH_UP_DEADLINE,
};
use crate::common::tls::TestCa;
use crate::common::Server;
use bytes::Bytes;
use herald::domain::auth::{AuthCommand, PolicyRule};
use herald::domain::metadata::MetadataCommand;
use herald::rpc::{Lane, PeerTls, PeerTlsFiles, RpcClient, RpcError, RpcLimits};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

/// The service number of cluster requests (`cluster::service::CLUSTER_SERVICE`).
const CLUSTER_SERVICE: u8 = 2;
/// A cluster `Ping` on the wire: its operation kind (tag 1, a big-endian `u16`), then the
/// request itself, which postcard encodes as nothing.
const PING: &[u8] = &[0, 1];
/// How long one RPC call of these tests may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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

/// A `ClusterRequest::Propose` of `command`, as postcard encodes it: the variant index (0),
/// the command, then `hops` (0).
fn propose_body(command: &MetadataCommand) -> Bytes {
    let mut body = vec![0u8];
    body.extend(postcard::to_stdvec(command).expect("encode the command"));
    body.push(0);
    Bytes::from(body)
}

/// The hello of a refused peer fails the call before anything is sent.
fn assert_refused(outcome: &Result<Bytes, RpcError>) {
    match outcome {
        Err(RpcError::Unreachable { reason, .. }) if reason.contains("refused") => {}
        other => panic!("the RPC call was not refused at the hello: {other:?}"),
    }
}

#[tokio::test]
async fn a_peer_without_the_cluster_secret_cannot_propose_a_policy() {
    // The admin client is made with authentication off, then the node runs with `--auth` and
    // plain (not mutual TLS) RPC on loopback: the default.
    let mut server = Server::start().await;
    let admin_secret = create_client(&server, "admin", &["admin"]).await;
    server.set_extra_args(vec!["--auth".into()]);
    server.restart().await;
    let admin = token(&server, "admin", &admin_secret).await;

    // A local process that speaks the framing, claiming to be node 2 and knowing no secret,
    // proposes a policy that makes every consumer an admin.
    let intruder = RpcClient::new(2, RpcLimits::default());
    intruder.set_address(1, &server.raft_addr());
    let escalation = MetadataCommand::Auth(AuthCommand::SetPolicy {
        rules: vec![PolicyRule {
            role: "consumer".into(),
            resource: "*".into(),
            action: "*".into(),
        }],
    });
    let outcome = intruder
        .call(
            1,
            Lane::Control,
            CLUSTER_SERVICE,
            propose_body(&escalation),
            CALL_TIMEOUT,
        )
        .await;
    assert_refused(&outcome);

    // The policy is still the built-in one.
    let response = server
        .http_client()
        .get(server.url("/v1/auth/policies"))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("read the policy");
    let (status, policy) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    assert_eq!(policy["built_in"], json!(true), "{policy}");

    // The refusal is counted and logged.
    let refused = server
        .metric("herald_rpc_handshakes_refused_total", &[])
        .await
        .unwrap_or(0.0);
    assert!(refused >= 1.0, "refused handshakes: {refused}");
    let logs = server.logs().concat();
    assert!(
        logs.contains("rpc handshake refused"),
        "{}",
        server.log_tail()
    );
}

#[tokio::test]
async fn a_removed_nodes_own_certificate_is_refused() {
    let ca = TestCa::new("Herald cluster CA");
    let args = cluster_pki(&ca, 3);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cluster = TestCluster::start_with(3, &args).await;
    let raft_1 = cluster.node(1).raft_addr();

    // Node 3's certificate is valid, issued by the cluster CA; as a member it is let in.
    let dir = ca.dir().to_path_buf();
    let as_node = |id: u64| {
        let tls = PeerTls::load(PeerTlsFiles {
            cert_file: dir.join(format!("node-{id}.pem")),
            key_file: dir.join(format!("node-{id}.key")),
            ca_file: ca.write_ca(),
            reload_check_interval: Duration::from_secs(60),
        })
        .expect("load the node's certificate");
        let client = RpcClient::new(
            id,
            RpcLimits {
                tls: Some(tls),
                ..RpcLimits::default()
            },
        );
        client.set_address(1, &raft_1);
        client
    };
    let pong = as_node(3)
        .call(
            1,
            Lane::Control,
            CLUSTER_SERVICE,
            Bytes::from_static(PING),
            CALL_TIMEOUT,
        )
        .await;
    assert!(pong.is_ok(), "a member's certificate is accepted: {pong:?}");

    // Node 3 is drained and removed, then stopped.
    let (status, draining) = cluster
        .node(1)
        .json(cluster.node(1).delete("/v1/cluster/nodes/3").await)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{draining}");
    cluster.mark_removed(3);
    cluster
        .wait_for_members(&BTreeSet::from([1, 2]), CATCH_UP_DEADLINE)
        .await;
    cluster.kill(3);

    // Its certificate still verifies against the CA, but it names a node that is no member.
    let outcome = as_node(3)
        .call(
            1,
            Lane::Control,
            CLUSTER_SERVICE,
            Bytes::from_static(PING),
            CALL_TIMEOUT,
        )
        .await;
    assert_refused(&outcome);
    let pong = as_node(2)
        .call(
            1,
            Lane::Control,
            CLUSTER_SERVICE,
            Bytes::from_static(PING),
            CALL_TIMEOUT,
        )
        .await;
    assert!(pong.is_ok(), "a member's certificate is accepted: {pong:?}");
    let refused: Value = json!(
        cluster
            .node(1)
            .metric(
                "herald_rpc_handshakes_refused_total",
                &[("reason", "not_a_member")]
            )
            .await
    );
    assert!(
        refused.as_f64().is_some_and(|count| count >= 1.0),
        "{refused}"
    );
}
