//! Multi-node black-box harness: N real `herald serve` processes on free loopback ports, each
//! with its own temporary data directory, formed into one cluster with `--initial-cluster`.
//!
//! Nodes are addressed by their node id (1..=N, then N+1 for an added node). Every wait has a
//! deadline; a failing test prints the tail of every node's log (each [`Server`] does so when it
//! is dropped during a panic). Dropping the cluster SIGKILLs every process, paused ones included.
//!
//! Only one cluster runs at a time within a test binary (a cluster is 3-4 processes with raft
//! timers; on a small machine two of them at once make elections flap), so the tests of one
//! file run one after the other even though the test runner starts them in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{free_port_list, FetchAnswer, Server, StartError, Wait, READY_DEADLINE};

/// How long a new cluster gets until every node is ready and agrees on the membership.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(60);
/// How long an election (partition or metadata) may take to show in the answers of the nodes.
pub const ELECTION_DEADLINE: Duration = Duration::from_secs(30);
/// How long a restarted or added replica gets to catch up and be in sync again.
pub const CATCH_UP_DEADLINE: Duration = Duration::from_secs(60);
/// The timeout of the polling client: polls of a node that forwards to a dead peer end early.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
/// The timeout of one produce attempt by the retrying helpers.
pub const PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);
const START_ATTEMPTS: usize = 5;

static ONE_CLUSTER_AT_A_TIME: Semaphore = Semaphore::const_new(1);

/// A client for polls: shorter timeout than the tests' requests.
pub fn probe_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

/// A client for produce attempts made while nodes fail.
pub fn produce_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(PRODUCE_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

pub struct TestCluster {
    /// Every node ever started, by node id. Declared first: dropped (killed) first.
    nodes: BTreeMap<u64, Server>,
    /// The node ids that are members (not removed by a drain).
    members: BTreeSet<u64>,
    /// `serve` arguments every node gets (besides its own addresses and id).
    common_args: Vec<String>,
    probe: reqwest::Client,
    _turn: SemaphorePermit<'static>,
}

/// One stored message as read back: offset, key, value (parsed JSON) and headers.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub offset: u64,
    pub key: Option<String>,
    pub value: Value,
    pub headers: Option<serde_json::Map<String, Value>>,
}

/// A produce that finally succeeded: the offsets of its acknowledged attempt and what went
/// wrong with the attempts before it.
#[derive(Clone, Debug)]
pub struct Produced {
    pub offsets: Vec<(u32, u64)>,
    /// One line per failed attempt (status and body, or the transport error). Non-empty means
    /// the messages were sent more than once and an earlier attempt's outcome is unknown.
    pub failures: Vec<String>,
}

/// How one produce attempt went.
#[derive(Clone, Debug)]
pub enum Attempt {
    Acknowledged(Vec<(u32, u64)>),
    /// A failure after which the messages may or may not be stored (5xx, timeout, connection
    /// error, 409 `not_leader`, 429): retrying is right, and may store them twice.
    Retryable(String),
    /// Any other answer: a bug of the server or of the test.
    Fatal(String),
}

/// One produce attempt of a JSON body at `url`.
pub async fn produce_once(client: &reqwest::Client, url: &str, body: &Value) -> Attempt {
    let response = match client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
    {
        Ok(response) => response,
        Err(err) => return Attempt::Retryable(format!("POST {url}: {err}")),
    };
    let status = response.status();
    let text = match response.text().await {
        Ok(text) => text,
        Err(err) => return Attempt::Retryable(format!("POST {url}: {status}, body lost: {err}")),
    };
    if status == StatusCode::OK {
        let answer: Value = match serde_json::from_str(&text) {
            Ok(answer) => answer,
            Err(err) => {
                return Attempt::Fatal(format!("POST {url}: 200 but not JSON ({err}): {text}"))
            }
        };
        return Attempt::Acknowledged(super::parse_offsets(&answer));
    }
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    let retryable = status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::CONFLICT && code == "not_leader");
    let line = format!("POST {url}: {status}: {text}");
    if retryable {
        Attempt::Retryable(line)
    } else {
        Attempt::Fatal(line)
    }
}

/// Produces `body` until one attempt is acknowledged, going round `urls` (one node after the
/// other) after each failure, for at most `within`. `Err` on a non-retryable answer or when
/// time is up.
pub async fn produce_retrying(
    client: &reqwest::Client,
    urls: &[String],
    body: &Value,
    within: Duration,
) -> Result<Produced, String> {
    assert!(!urls.is_empty());
    let deadline = Instant::now() + within;
    let mut failures = Vec::new();
    let mut next = 0;
    loop {
        let url = &urls[next % urls.len()];
        next += 1;
        match produce_once(client, url, body).await {
            Attempt::Acknowledged(offsets) => return Ok(Produced { offsets, failures }),
            Attempt::Fatal(line) => {
                return Err(format!(
                    "{line}\n(after {} failed attempts: {failures:#?})",
                    failures.len()
                ))
            }
            Attempt::Retryable(line) => failures.push(line),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not acknowledged within {within:?}; attempts: {failures:#?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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
        assert!(n >= 1);
        let turn = ONE_CLUSTER_AT_A_TIME
            .acquire()
            .await
            .expect("the cluster semaphore is never closed");
        let common_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let mut last_bind_error = String::new();
        let mut turn = Some(turn);
        for _ in 0..START_ATTEMPTS {
            let ports = free_port_list(2 * n as usize);
            let initial_cluster = (1..=n)
                .map(|id| format!("{id}=127.0.0.1:{}", ports[2 * (id - 1) as usize + 1]))
                .collect::<Vec<_>>()
                .join(",");
            let mut nodes = BTreeMap::new();
            for id in 1..=n {
                let mut args = common_args.clone();
                args.push("--initial-cluster".into());
                args.push(initial_cluster.clone());
                let http = ports[2 * (id - 1) as usize];
                let raft = ports[2 * (id - 1) as usize + 1];
                nodes.insert(id, Server::prepare(id, http, raft, args));
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
            for server in nodes.values_mut() {
                server.set_extra_args(common_args.clone());
            }
            let cluster = TestCluster {
                nodes,
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

    /// The `--initial-cluster` value of the nodes' first start is gone; this is what every
    /// node is started with besides its own addresses.
    pub fn common_args(&self) -> &[String] {
        &self.common_args
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

    fn first_live(&self) -> u64 {
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
        let probe = reqwest::Client::builder()
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

    // ---- HTTP without panics -----------------------------------------------------------

    /// `GET path` on node `via` as (status, JSON or Null); `Err` on a transport failure.
    pub async fn try_get(&self, via: u64, path: &str) -> Result<(StatusCode, Value), String> {
        let url = self.node(via).url(path);
        let response = self
            .probe
            .get(&url)
            .send()
            .await
            .map_err(|err| format!("GET {url}: {err}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| format!("GET {url}: {status}, body lost: {err}"))?;
        if text.is_empty() {
            return Ok((status, Value::Null));
        }
        let body = serde_json::from_str(&text)
            .map_err(|err| format!("GET {url}: {status}, not JSON ({err}): {text}"))?;
        Ok((status, body))
    }

    /// `GET path` on node `via` when it answers 200, else `Err` with what it answered.
    pub async fn get_ok(&self, via: u64, path: &str) -> Result<Value, String> {
        match self.try_get(via, path).await? {
            (StatusCode::OK, body) => Ok(body),
            (status, body) => Err(format!("GET {path} on node {via}: {status}: {body}")),
        }
    }

    /// `GET /v1/cluster` on node `via`, 200 or `Err`.
    pub async fn cluster_view(&self, via: u64) -> Result<Value, String> {
        self.get_ok(via, "/v1/cluster").await
    }

    /// `GET /v1/topics/{topic}` on node `via`, 200 or `Err`.
    pub async fn topic_view(&self, via: u64, topic: &str) -> Result<Value, String> {
        self.get_ok(via, &format!("/v1/topics/{topic}")).await
    }

    /// Partition `partition` of `GET /v1/topics/{topic}` on node `via`.
    pub async fn partition_view(
        &self,
        via: u64,
        topic: &str,
        partition: u32,
    ) -> Result<Value, String> {
        let topic_view = self.topic_view(via, topic).await?;
        partition_of(&topic_view, partition)
    }

    // ---- waits --------------------------------------------------------------------------

    /// Waits until every live member is ready and its `GET /v1/cluster` lists exactly
    /// `expected`, each `up` with the addresses the harness gave it, with a metadata leader
    /// among them. Returns the last view of the first live member.
    pub async fn wait_for_members(&self, expected: &BTreeSet<u64>, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let mut problem = None;
            let mut first_view = None;
            for id in self.live_ids() {
                match self.try_get(id, "/readyz").await {
                    Ok((StatusCode::OK, _)) => {}
                    Ok((status, body)) => {
                        problem = Some(format!("node {id} /readyz: {status}: {body}"));
                        break;
                    }
                    Err(err) => {
                        problem = Some(err);
                        break;
                    }
                }
                match self.cluster_view(id).await {
                    Ok(view) => {
                        if let Err(why) = self.check_members(&view, expected) {
                            problem = Some(format!("node {id}: {why}: {view}"));
                            break;
                        }
                        first_view.get_or_insert(view);
                    }
                    Err(err) => {
                        problem = Some(err);
                        break;
                    }
                }
            }
            match problem {
                None => return first_view.expect("a live member"),
                Some(problem) if Instant::now() >= deadline => self.fail(&format!(
                    "the cluster did not settle on members {expected:?} within {within:?}; last: {problem}"
                )),
                Some(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// `Ok` when a cluster view lists exactly `expected`, all `up` at their addresses, and a
    /// metadata leader among them.
    fn check_members(&self, view: &Value, expected: &BTreeSet<u64>) -> Result<(), String> {
        let nodes = view["nodes"].as_array().ok_or("no nodes array")?;
        let ids: BTreeSet<u64> = nodes.iter().filter_map(|n| n["id"].as_u64()).collect();
        if &ids != expected || nodes.len() != expected.len() {
            return Err(format!("lists nodes {ids:?}, not {expected:?}"));
        }
        for node in nodes {
            let id = node["id"].as_u64().unwrap();
            if node["status"] != "up" {
                return Err(format!("node {id} is not up"));
            }
            if let Some(server) = self.nodes.get(&id) {
                if node["http_addr"] != server.http_addr()
                    || node["raft_addr"] != server.raft_addr()
                {
                    return Err(format!("node {id} has other addresses"));
                }
            }
        }
        match view["metadata_leader"].as_u64() {
            Some(leader) if expected.contains(&leader) => Ok(()),
            _ => Err("no metadata leader among the members".into()),
        }
    }

    /// The metadata leader, once every live member names the same one.
    pub async fn metadata_leader(&self) -> u64 {
        let deadline = Instant::now() + ELECTION_DEADLINE;
        loop {
            let mut leaders = BTreeSet::new();
            let mut problem = None;
            for id in self.live_ids() {
                match self.cluster_view(id).await {
                    Ok(view) => match view["metadata_leader"].as_u64() {
                        Some(leader) => {
                            leaders.insert(leader);
                        }
                        None => problem = Some(format!("node {id}: no metadata leader: {view}")),
                    },
                    Err(err) => problem = Some(err),
                }
            }
            if problem.is_none() && leaders.len() == 1 {
                return leaders.into_iter().next().unwrap();
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "the live nodes did not agree on a metadata leader within {ELECTION_DEADLINE:?}: {leaders:?} {problem:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The leader of a partition as a live node reports it, once it is not null (and is a live
    /// member: a paused or dead node's claim is not taken).
    pub async fn leader_of(&self, topic: &str, partition: u32) -> u64 {
        self.wait_for_leader(topic, partition, None).await
    }

    /// The leader of a partition once every live node has reported the same live leader, with
    /// every replica in sync, for `LEADER_SETTLE` in a row: a leader that is about to hand its
    /// leadership on (e.g. back to a preferred replica) is not taken for the leader.
    pub async fn stable_leader(&self, topic: &str, partition: u32) -> u64 {
        const LEADER_SETTLE: Duration = Duration::from_millis(2500);
        let deadline = Instant::now() + CATCH_UP_DEADLINE;
        let mut candidate: Option<(u64, Instant)> = None;
        loop {
            let live = self.live_ids();
            let mut leaders = BTreeSet::new();
            let mut last = String::new();
            for &via in &live {
                match self.partition_view(via, topic, partition).await {
                    Ok(view) => {
                        let all_in_sync = view["in_sync"].as_array().map(Vec::len)
                            == view["replicas"].as_array().map(Vec::len);
                        match view["leader"].as_u64() {
                            Some(leader) if all_in_sync && live.contains(&leader) => {
                                leaders.insert(leader);
                            }
                            _ => {
                                leaders.insert(0);
                            }
                        }
                        last = format!("node {via}: {view}");
                    }
                    Err(err) => {
                        leaders.insert(0);
                        last = err;
                    }
                }
            }
            let agreed = match leaders.iter().collect::<Vec<_>>()[..] {
                [&leader] if leader != 0 => Some(leader),
                _ => None,
            };
            candidate = match (agreed, candidate) {
                (Some(leader), Some((same, since))) if leader == same => {
                    if since.elapsed() >= LEADER_SETTLE {
                        return leader;
                    }
                    Some((same, since))
                }
                (Some(leader), _) => Some((leader, Instant::now())),
                (None, _) => None,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "{topic}/{partition}: the live nodes did not agree on one leader with all \
                     replicas in sync for {LEADER_SETTLE:?} within {CATCH_UP_DEADLINE:?}; \
                     reported {leaders:?}; last: {last}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the live nodes report a leader of the partition other than `old`.
    pub async fn wait_for_leader_change(&self, topic: &str, partition: u32, old: u64) -> u64 {
        self.wait_for_leader(topic, partition, Some(old)).await
    }

    async fn wait_for_leader(&self, topic: &str, partition: u32, not: Option<u64>) -> u64 {
        let deadline = Instant::now() + ELECTION_DEADLINE;
        loop {
            let live = self.live_ids();
            let mut last = String::new();
            for &via in &live {
                match self.partition_view(via, topic, partition).await {
                    Ok(view) => match view["leader"].as_u64() {
                        Some(leader) if Some(leader) != not && live.contains(&leader) => {
                            return leader
                        }
                        _ => last = format!("node {via}: {view}"),
                    },
                    Err(err) => last = err,
                }
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "{topic}/{partition}: no live leader (other than {not:?}) within {ELECTION_DEADLINE:?}; last: {last}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until a live node reports the partition with a leader and `n` replicas in sync.
    pub async fn wait_until_in_sync(&self, topic: &str, partition: u32, n: usize) -> Value {
        let via = self.first_live();
        self.wait_for_partition(via, topic, partition, CATCH_UP_DEADLINE, |p| {
            p["leader"].is_u64() && p["in_sync"].as_array().map(Vec::len) == Some(n)
        })
        .await
    }

    /// Waits until node `via` reports the partition so that `pred` holds; returns it.
    pub async fn wait_for_partition(
        &self,
        via: u64,
        topic: &str,
        partition: u32,
        within: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let last = match self.partition_view(via, topic, partition).await {
                Ok(view) if pred(&view) => return view,
                Ok(view) => view.to_string(),
                Err(err) => err,
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "{topic}/{partition} via node {via}: not as expected within {within:?}; last: {last}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    // ---- reading ------------------------------------------------------------------------

    /// Every message of a partition read through node `via`, from `earliest` to the high
    /// watermark. Failed pages (e.g. 503 during an election) are retried for a while.
    pub async fn read_partition(&self, via: u64, topic: &str, partition: u32) -> Vec<Stored> {
        let deadline = Instant::now() + ELECTION_DEADLINE;
        let mut stored = Vec::new();
        let mut offset = "earliest".to_string();
        loop {
            let path = format!(
                "/v1/topics/{topic}/partitions/{partition}/messages?offset={offset}&max_messages=1000"
            );
            let page = match self.get_page(via, &path).await {
                Ok(page) => page,
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(err) => self.fail(&format!(
                    "reading {topic}/{partition} via node {via}: {err}"
                )),
            };
            let done = page.messages.is_empty() || page.next_offset >= page.high_watermark;
            offset = page.next_offset.to_string();
            for message in page.messages {
                let value = serde_json::from_str(message.value_text()).unwrap_or_else(|err| {
                    self.fail(&format!(
                        "{topic}/{partition}@{}: value is not JSON ({err})",
                        message.offset
                    ))
                });
                stored.push(Stored {
                    offset: message.offset,
                    key: message.key,
                    value,
                    headers: message.headers,
                });
            }
            if done {
                return stored;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "reading {topic}/{partition} via node {via} did not finish"
                ));
            }
        }
    }

    async fn get_page(&self, via: u64, path: &str) -> Result<FetchAnswer, String> {
        let url = self.node(via).url(path);
        let response = self
            .probe
            .get(&url)
            .send()
            .await
            .map_err(|err| format!("GET {url}: {err}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| format!("GET {url}: {err}"))?;
        if status != StatusCode::OK {
            return Err(format!("GET {url}: {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|err| format!("GET {url}: bad answer ({err}): {text}"))
    }

    // ---- membership changes -------------------------------------------------------------

    /// Starts node `max id + 1` with `--join` and waits only until it serves `/healthz` (it is
    /// not ready before it is added). Returns its id; it is not a member yet.
    pub async fn start_joining_node(&mut self) -> u64 {
        let id = self.nodes.keys().max().copied().unwrap_or(0) + 1;
        let mut args = self.common_args.clone();
        args.push("--join".into());
        let mut last_bind_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports = free_port_list(2);
            let mut server = Server::prepare(id, ports[0], ports[1], args.clone());
            server.spawn();
            match server.wait_started(Wait::Healthy, READY_DEADLINE).await {
                Ok(()) => {
                    self.nodes.insert(id, server);
                    return id;
                }
                Err(StartError::Bind(log)) => last_bind_error = log,
                Err(StartError::Other(message)) => server.fail(&message),
            }
        }
        panic!("node {id} could not bind its ports after {START_ATTEMPTS} attempts:\n{last_bind_error}");
    }

    /// The body of `POST /v1/cluster/nodes` that adds node `id` at its addresses.
    pub fn add_request(&self, id: u64) -> Value {
        let node = self.node(id);
        json!({"node_id": id, "http_addr": node.http_addr(), "raft_addr": node.raft_addr()})
    }

    /// Starts node N+1 with `--join`, adds it through a live member (retrying 503s), and waits
    /// until it is ready and every live member lists it. Returns its id.
    pub async fn add_node(&mut self) -> u64 {
        let id = self.start_joining_node().await;
        let via = self.first_live();
        let body = self.add_request(id);
        let deadline = Instant::now() + ELECTION_DEADLINE;
        loop {
            let attempt = self
                .node(via)
                .http_client()
                .post(self.node(via).url("/v1/cluster/nodes"))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await;
            let last = match attempt {
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    if status == StatusCode::CREATED || status == StatusCode::OK {
                        break;
                    }
                    if !status.is_server_error() {
                        self.fail(&format!(
                            "adding node {id} via node {via}: {status}: {text}"
                        ));
                    }
                    format!("{status}: {text}")
                }
                Err(err) => err.to_string(),
            };
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "adding node {id} via node {via} failed until the deadline: {last}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.finish_adding(id).await;
        id
    }

    /// After node `id` was accepted by `POST /v1/cluster/nodes`: makes it a member and waits
    /// until it is ready and every live member (itself included) lists all members `up`.
    pub async fn finish_adding(&mut self, id: u64) {
        self.members.insert(id);
        let expected = self.members.clone();
        self.wait_for_members(&expected, CATCH_UP_DEADLINE).await;
    }
}

/// Waits until every node answers `/readyz` with 200, watching all of them at once so a node
/// that died (e.g. on a taken port) is noticed at once.
async fn wait_all_ready(
    nodes: &mut BTreeMap<u64, Server>,
    within: Duration,
) -> Result<(), StartError> {
    let deadline = Instant::now() + within;
    let probe = reqwest::Client::builder()
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

/// The entry of `partition` in a topic answer.
pub fn partition_of(topic: &Value, partition: u32) -> Result<Value, String> {
    topic["partitions"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["partition"] == partition))
        .cloned()
        .ok_or_else(|| format!("no partition {partition} in {topic}"))
}

/// A JSON array of node ids, sorted.
pub fn sorted_ids(value: &Value) -> Vec<u64> {
    let mut ids: Vec<u64> = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array of node ids: {value}"))
        .iter()
        .map(|v| v.as_u64().unwrap_or_else(|| panic!("not a node id: {v}")))
        .collect();
    ids.sort_unstable();
    ids
}

/// The produce URL (`acks=all`) of `topic` on node `via`.
pub fn messages_url(cluster: &TestCluster, via: u64, topic: &str) -> String {
    cluster
        .node(via)
        .url(&format!("/v1/topics/{topic}/messages?acks=all"))
}

/// Creates a topic through node `via`; asserts 201 and the replication factor.
pub async fn create_replicated(
    cluster: &TestCluster,
    via: u64,
    name: &str,
    partitions: u32,
    replication_factor: u16,
) -> Value {
    let topic = cluster
        .node(via)
        .create_topic_with(&json!({
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
        }))
        .await;
    assert_eq!(topic["replication_factor"], replication_factor, "{topic}");
    assert_eq!(
        topic["partitions"].as_array().map(Vec::len),
        Some(partitions as usize),
        "{topic}"
    );
    topic
}

/// Asserts that a partition's replicas are `rf` distinct nodes among `nodes`.
pub fn assert_placement(partition: &Value, rf: usize, nodes: &[u64]) {
    let replicas = sorted_ids(&partition["replicas"]);
    let mut distinct = replicas.clone();
    distinct.dedup();
    assert_eq!(replicas.len(), rf, "replica count: {partition}");
    assert_eq!(distinct.len(), rf, "replicas are not distinct: {partition}");
    for id in &replicas {
        assert!(
            nodes.contains(id),
            "replica {id} is not one of {nodes:?}: {partition}"
        );
    }
}
