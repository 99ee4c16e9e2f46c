//! Nodes started on data a release wrote before (a format fixture, `migrations/<N>/`) instead of
//! an empty directory: each node's archive unpacked into its own temporary data directory, then
//! the real binary started on it with the fixture's arguments and environment.
//!
//! A node that must come back on a given raft address (a cluster's nodes find each other by the
//! addresses stored in the cluster metadata) gets it, with a free HTTP port on the same
//! loopback address; a node without one (a lone node may change both) gets free ports on
//! 127.0.0.1. A cluster takes this test binary's turn to run one, as `TestCluster` does.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::sync::SemaphorePermit;

use super::{free_ports_on, Server, StartError};

/// How long a fixture's nodes get to be ready, a port taken by someone else included.
const START_DEADLINE: Duration = Duration::from_secs(90);

/// One node of a fixture.
#[derive(Debug, Clone)]
pub struct FixtureNode {
    pub id: u64,
    /// A `.tar.gz` of the node's data directory (its contents at the archive's top).
    pub archive: PathBuf,
    /// Where the node must listen for raft; `None`: a free port of 127.0.0.1.
    pub raft_addr: Option<SocketAddr>,
}

/// A fixture's running nodes, in the order given; dropping them SIGKILLs them.
pub struct FixtureNodes {
    pub nodes: Vec<Server>,
    _turn: Option<SemaphorePermit<'static>>,
}

/// Unpacks a `.tar.gz` into `into` (created 0700, as a node keeps its data directory).
pub fn unpack(archive: &Path, into: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(into).unwrap_or_else(|err| panic!("create {}: {err}", into.display()));
    std::fs::set_permissions(into, std::fs::Permissions::from_mode(0o700)).unwrap();
    let output = Command::new("tar")
        .arg("-xzf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .output()
        .unwrap_or_else(|err| panic!("run tar: {err}"));
    assert!(
        output.status.success(),
        "tar -xzf {} failed: {}",
        archive.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl FixtureNodes {
    /// Unpacks every node's archive and starts them all at once, each with `args` (after the
    /// harness's `--data-dir`, `--http-addr`, `--raft-addr` and `--node-id`) and `env`, and
    /// waits until every one is ready. A start that fails on a taken port is tried again
    /// (fresh directories, new HTTP ports) until the deadline.
    pub async fn start(nodes: &[FixtureNode], args: &[String], env: &[(&str, &str)]) -> Self {
        let turn = if nodes.len() > 1 {
            Some(super::cluster::cluster_turn().await)
        } else {
            None
        };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            let mut servers: Vec<Server> =
                nodes.iter().map(|node| prepare(node, args, env)).collect();
            for server in &mut servers {
                server.spawn();
            }
            match wait_ready(&mut servers, deadline).await {
                Ok(()) => {
                    return FixtureNodes {
                        nodes: servers,
                        _turn: turn,
                    }
                }
                Err(StartError::Bind(log)) if Instant::now() < deadline => {
                    eprintln!("a fixture node could not bind its addresses, trying again:\n{log}");
                    drop(servers);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(StartError::Bind(log)) => {
                    panic!("the fixture's nodes could not bind their addresses:\n{log}")
                }
                Err(StartError::Other(message)) => panic!("{message}"),
            }
        }
    }
}

fn prepare(node: &FixtureNode, args: &[String], env: &[(&str, &str)]) -> Server {
    let (ip, raft_port) = match node.raft_addr {
        Some(addr) => (addr.ip(), addr.port()),
        None => {
            let ip = IpAddr::from([127, 0, 0, 1]);
            (ip, free_ports_on(ip, 1)[0])
        }
    };
    let http_port = loop {
        let port = free_ports_on(ip, 1)[0];
        if port != raft_port {
            break port;
        }
    };
    let mut server = Server::prepare_on(ip, node.id, http_port, raft_port, args.to_vec());
    for (name, value) in env {
        server.set_env(name, value);
    }
    unpack(&node.archive, &server.data_dir());
    server
}

/// Waits until every server answers `/readyz` with 200, watching all of them at once: the
/// first that exits ends the wait.
async fn wait_ready(servers: &mut [Server], deadline: Instant) -> Result<(), StartError> {
    let probe = super::http::client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("build the HTTP client");
    let mut ready = vec![false; servers.len()];
    loop {
        for (index, server) in servers.iter_mut().enumerate() {
            if let Some(error) = server.check_exited() {
                return Err(error);
            }
            if !ready[index] {
                if let Ok(response) = probe.get(server.url("/readyz")).send().await {
                    ready[index] = response.status() == reqwest::StatusCode::OK;
                }
            }
        }
        if ready.iter().all(|&ready| ready) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(StartError::Other(format!(
                "the fixture's nodes were not all ready (GET /readyz == 200) within \
                 {START_DEADLINE:?}: ready {ready:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
