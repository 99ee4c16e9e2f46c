//! Multi-node black-box harness: N real `herald serve` processes, each on a loopback address of
//! its own (`loopback`) and free ports, each with its own temporary data directory, formed into
//! one cluster with `--initial-cluster`.
//!
//! Nodes are addressed by their node id (1..=N, then N+1 for an added node). Every wait has a
//! deadline; a failing test prints the tail of every node's log (each [`Server`] does so when it
//! is dropped during a panic). Dropping the cluster SIGKILLs every process, paused ones included.
//!
//! Only one cluster runs at a time within a test binary (a cluster is 3-4 processes with raft
//! timers; on a small machine two of them at once make elections flap), so the tests of one
//! file run one after the other even though the test runner starts them in parallel.
//!
//! This file holds the cluster's lifecycle (start, node access, kill/pause/restart) and
//! re-exports the rest, so tests write `common::cluster::...` whichever file holds the item:
//! `cluster_reads` (GETs that return `Err` instead of panicking, reading a partition back),
//! `cluster_members` (waiting for the membership, adding a node), `cluster_leaders` (waiting for
//! metadata and partition leaders and in-sync replicas), `cluster_produce` (produce attempts
//! that survive failovers), `cluster_topics` (replicated topics and their placement) and
//! `cluster_partitions` (cutting and healing the links between nodes).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::loopback::ClusterNet;
use super::nft::Firewall;
use super::{free_ports_on, Server, StartError, Wait};

pub use super::cluster_produce::{
    messages_url, produce_client, produce_once, produce_retrying, Attempt,
};
pub use super::cluster_reads::{partition_of, sorted_ids, Stored};
pub use super::cluster_topics::{assert_placement, create_replicated};

/// The cluster secret every node of a test cluster shares (`HERALD_CLUSTER_SECRET`): it seals
/// the signing keys the nodes replicate and authenticates the nodes to each other.
pub const CLUSTER_SECRET: &str = "test-cluster-secret-shared-by-every-node";

/// A node of a test cluster, not started yet: its own directory and addresses, the cluster's
/// secret.
pub(super) fn prepare_node(
    ip: std::net::IpAddr,
    id: u64,
    http: u16,
    raft: u16,
    args: Vec<String>,
) -> Server {
    let mut server = Server::prepare_on(ip, id, http, raft, args);
    server.set_env("HERALD_CLUSTER_SECRET", CLUSTER_SECRET);
    server
}

/// How long a new cluster gets until every node is ready and agrees on the membership.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(60);
/// How long an election (partition or metadata) may take to show in the answers of the nodes.
pub const ELECTION_DEADLINE: Duration = Duration::from_secs(30);
/// How long a restarted or added replica gets to catch up and be in sync again.
pub const CATCH_UP_DEADLINE: Duration = Duration::from_secs(60);
/// The timeout of the polling client: polls of a node that forwards to a dead peer end early.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
pub(super) const POLL: Duration = Duration::from_millis(100);
pub(super) const START_ATTEMPTS: usize = 5;

static ONE_CLUSTER_AT_A_TIME: Semaphore = Semaphore::const_new(1);

/// A client for polls: shorter timeout than the tests' requests.
pub fn probe_client() -> reqwest::Client {
    herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

/// A running cluster of `herald serve` nodes, holding this test binary's turn to run one.
pub struct TestCluster {
    /// Every node ever started, by node id. Declared first: dropped (killed) first.
    pub(super) nodes: BTreeMap<u64, Server>,
    /// The loopback addresses of this cluster's nodes.
    pub(super) net: ClusterNet,
    /// The drop rules of the links cut now; made at the first cut.
    pub(super) firewall: Option<Firewall>,
    /// Directed links `(from, to)` cut now.
    pub(super) cut_links: BTreeSet<(u64, u64)>,
    /// The node ids that are members (not removed by a drain).
    pub(super) members: BTreeSet<u64>,
    /// `serve` arguments every node gets (besides its own addresses and id).
    pub(super) common_args: Vec<String>,
    pub(super) probe: reqwest::Client,
    _turn: SemaphorePermit<'static>,
}

/// The common arguments as node `id` gets them: `{id}` in an argument becomes the node's id
/// (for per-node files such as certificates).
pub fn args_for(common_args: &[String], id: u64) -> Vec<String> {
    common_args
        .iter()
        .map(|arg| arg.replace("{id}", &id.to_string()))
        .collect()
}

impl Drop for TestCluster {
    /// In a failed test: every node's log tail (as each is dropped), then the failure once more,
    /// last, where a reader of the output's end finds it.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in self.nodes.values_mut() {
            node.repeats_failure = false;
        }
        drop(std::mem::take(&mut self.nodes));
        if let Some(failure) = super::failure::this_threads_failure() {
            eprintln!("---- the test failed {failure}");
        }
    }
}

impl TestCluster {
    /// Starts `n` nodes with default settings and waits until they form one cluster.
    pub async fn start(n: u64) -> TestCluster {
        TestCluster::start_with(n, &[]).await
    }

    /// Starts `n` nodes, each with these extra `serve` arguments, and waits until every node is
    /// ready and lists all `n` nodes with a metadata leader.
    pub async fn start_with(n: u64, extra_args: &[&str]) -> TestCluster {
        TestCluster::start_with_env(n, extra_args, &[]).await
    }

    /// Like [`TestCluster::start_with`], and node `id` of each `(id, name, value)` gets the
    /// environment variable `name` from its first start on (until `remove_env`).
    pub async fn start_with_env(
        n: u64,
        extra_args: &[&str],
        node_env: &[(u64, &str, &str)],
    ) -> TestCluster {
        assert!(n >= 1);
        let turn = ONE_CLUSTER_AT_A_TIME
            .acquire()
            .await
            .expect("the cluster semaphore is never closed");
        let common_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let mut last_bind_error = String::new();
        let mut turn = Some(turn);
        let net = ClusterNet::next();
        for _ in 0..START_ATTEMPTS {
            // (http, raft) ports of each node, free on its own address.
            let ports: BTreeMap<u64, (u16, u16)> = (1..=n)
                .map(|id| {
                    let pair = free_ports_on(net.ip_of(id), 2);
                    (id, (pair[0], pair[1]))
                })
                .collect();
            let initial_cluster = ports
                .iter()
                .map(|(id, (_, raft))| format!("{id}={}:{raft}", net.ip_of(*id)))
                .collect::<Vec<_>>()
                .join(",");
            let mut nodes = BTreeMap::new();
            for (&id, &(http, raft)) in &ports {
                let mut args = args_for(&common_args, id);
                args.push("--initial-cluster".into());
                args.push(initial_cluster.clone());
                let mut node = prepare_node(net.ip_of(id), id, http, raft, args);
                for (_, name, value) in node_env.iter().filter(|(node, _, _)| *node == id) {
                    node.set_env(name, value);
                }
                nodes.insert(id, node);
            }
            for server in nodes.values_mut() {
                server.spawn();
            }
            match wait_all_ready(&mut nodes, CLUSTER_DEADLINE).await {
                Ok(()) => {}
                Err(StartError::Bind(log)) => {
                    last_bind_error = log;
                    drop(nodes); // kills the others; a new attempt gets new ports and dirs
                    continue;
                }
                Err(StartError::Other(message)) => panic!("{message}"),
            }
            // Restarts use the node's own flags only.
            for (&id, server) in nodes.iter_mut() {
                server.set_extra_args(args_for(&common_args, id));
            }
            let cluster = TestCluster {
                nodes,
                net,
                firewall: None,
                cut_links: BTreeSet::new(),
                members: (1..=n).collect(),
                common_args,
                probe: probe_client(),
                _turn: turn.take().unwrap(),
            };
            let expected = cluster.members.clone();
            cluster.wait_for_members(&expected, CLUSTER_DEADLINE).await;
            return cluster;
        }
        panic!(
            "the cluster could not bind its ports after {START_ATTEMPTS} attempts:\n{last_bind_error}"
        );
    }

    pub fn node(&self, id: u64) -> &Server {
        self.nodes
            .get(&id)
            .unwrap_or_else(|| panic!("no node {id} in this cluster"))
    }

    pub fn node_mut(&mut self, id: u64) -> &mut Server {
        self.nodes
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no node {id} in this cluster"))
    }

    /// Member ids (nodes not removed by a drain), running or not.
    pub fn ids(&self) -> Vec<u64> {
        self.members.iter().copied().collect()
    }

    /// Every member but `id` (e.g. a partition's followers, given its leader).
    pub fn others_than(&self, id: u64) -> Vec<u64> {
        self.ids()
            .into_iter()
            .filter(|&other| other != id)
            .collect()
    }

    /// Members whose process runs and is not paused.
    pub fn live_ids(&self) -> Vec<u64> {
        self.members
            .iter()
            .copied()
            .filter(|id| {
                let node = &self.nodes[id];
                node.is_running() && !node.is_paused()
            })
            .collect()
    }

    pub(super) fn first_live(&self) -> u64 {
        *self
            .live_ids()
            .first()
            .unwrap_or_else(|| panic!("no live node in the cluster"))
    }

    /// Panics with `message`; every node's log tail follows as the nodes are dropped.
    pub fn fail(&self, message: &str) -> ! {
        panic!("{message}")
    }

    /// SIGKILL node `id` and wait until it is gone.
    pub fn kill(&mut self, id: u64) {
        self.node_mut(id).kill();
    }

    /// SIGSTOP node `id`.
    pub fn pause(&mut self, id: u64) {
        self.node_mut(id).pause();
    }

    /// SIGCONT node `id`.
    pub fn resume(&mut self, id: u64) {
        self.node_mut(id).resume();
    }

    /// Starts node `id` again (after `kill`) on its ports and data directory, with its own
    /// flags only, and waits until it is ready.
    pub async fn restart(&mut self, id: u64) {
        self.node_mut(id).restart_until(Wait::Ready).await;
    }

    /// SIGTERM node `id` and wait until it has exited (SIGKILL and panic after the deadline).
    pub async fn stop(&mut self, id: u64) -> ExitStatus {
        self.node_mut(id).stop().await
    }

    /// Starts the nodes `ids` again (after `kill` or `stop`) on their ports and data
    /// directories, with their own flags only, all at once, and waits until every one of them
    /// is ready. Unlike [`TestCluster::restart`] one after the other, this brings back a
    /// cluster that lost its quorum: a lone node is not ready before a majority is back.
    pub async fn restart_all(&mut self, ids: &[u64]) {
        for &id in ids {
            let node = self.node_mut(id);
            if node.is_running() {
                node.kill();
            }
            node.spawn();
        }
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        let probe = herald_client::cli::http_client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("build the HTTP client");
        let mut waiting: BTreeSet<u64> = ids.iter().copied().collect();
        loop {
            for &id in ids {
                let node = self.node_mut(id);
                match node.check_exited() {
                    None => {}
                    // The old process's sockets may linger for a moment; the ports are ours.
                    Some(StartError::Bind(_)) if Instant::now() < deadline => {
                        node.spawn();
                        continue;
                    }
                    Some(StartError::Bind(log)) => {
                        node.fail(&format!("restart could not bind:\n{log}"))
                    }
                    Some(StartError::Other(message)) => {
                        node.fail(&format!("{message} while the cluster was restarting"))
                    }
                }
                if waiting.contains(&id) {
                    if let Ok(response) = probe.get(node.url("/readyz")).send().await {
                        if response.status() == StatusCode::OK {
                            waiting.remove(&id);
                        }
                    }
                }
            }
            if waiting.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "restarted nodes {waiting:?} were not ready (GET /readyz == 200) within {CLUSTER_DEADLINE:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Node `id` was removed from the cluster (drained): helpers no longer talk to it. Its
    /// process, if any, keeps running until the cluster is dropped.
    pub fn mark_removed(&mut self, id: u64) {
        self.members.remove(&id);
    }
}

/// Waits until every node answers `/readyz` with 200, watching all of them at once so a node
/// that died (e.g. on a taken port) is noticed at once.
async fn wait_all_ready(
    nodes: &mut BTreeMap<u64, Server>,
    within: Duration,
) -> Result<(), StartError> {
    let deadline = Instant::now() + within;
    let probe = herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut waiting: BTreeSet<u64> = nodes.keys().copied().collect();
    loop {
        for (&id, server) in nodes.iter_mut() {
            if let Some(error) = server.check_exited() {
                return Err(match error {
                    StartError::Bind(log) => StartError::Bind(log),
                    StartError::Other(message) => {
                        StartError::Other(format!("{message} while the cluster was starting"))
                    }
                });
            }
            if waiting.contains(&id) {
                if let Ok(response) = probe.get(server.url("/readyz")).send().await {
                    if response.status() == StatusCode::OK {
                        waiting.remove(&id);
                    }
                }
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(StartError::Other(format!(
                "nodes {waiting:?} were not ready (GET /readyz == 200) within {within:?}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

// ---- For helpers that start a cluster's nodes themselves (`fixture_nodes`) ----------------

/// This test binary's turn to run a cluster (see [`TestCluster`]), for nodes started by other
/// helpers; held as long as the permit lives.
pub(super) async fn cluster_turn() -> SemaphorePermit<'static> {
    ONE_CLUSTER_AT_A_TIME
        .acquire()
        .await
        .expect("the cluster semaphore is never closed")
}
