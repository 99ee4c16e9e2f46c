//! Cluster membership: waiting until every live member is ready and lists exactly the expected
//! nodes, `up` at their addresses, with a metadata leader; and adding a node (`--join`, then
//! `POST /v1/cluster/nodes`) until every member lists it.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::cluster::{TestCluster, CATCH_UP_DEADLINE, POLL, START_ATTEMPTS};
use super::{free_ports_on, poll, StartError, Wait, READY_DEADLINE};

impl TestCluster {
    /// Waits until every live member is ready and its `GET /v1/cluster` lists exactly
    /// `expected`, each `up` with the addresses the harness gave it, with a metadata leader
    /// among them. Returns the last view of the first live member.
    pub async fn wait_for_members(&self, expected: &BTreeSet<u64>, within: Duration) -> Value {
        poll(within, POLL, || async {
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
                None => Ok(first_view.expect("a live member")),
                Some(problem) => Err(problem),
            }
        })
        .await
        .unwrap_or_else(|problem| {
            self.fail(&format!(
                "the cluster did not settle on members {expected:?} within {within:?}; last: {problem}"
            ))
        })
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

    /// Starts node `max id + 1` with `--join` and waits only until it serves `/healthz` (it is
    /// not ready before it is added). Returns its id; it is not a member yet.
    pub async fn start_joining_node(&mut self) -> u64 {
        let id = self.nodes.keys().max().copied().unwrap_or(0) + 1;
        let mut args = super::cluster::args_for(&self.common_args, id);
        args.push("--join".into());
        let mut last_bind_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let ip = self.net.ip_of(id);
            let ports = free_ports_on(ip, 2);
            let mut server = super::cluster::prepare_node(ip, id, ports[0], ports[1], args.clone());
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

    /// After node `id` was accepted by `POST /v1/cluster/nodes`: makes it a member and waits
    /// until it is ready and every live member (itself included) lists all members `up`.
    pub async fn finish_adding(&mut self, id: u64) {
        self.members.insert(id);
        let expected = self.members.clone();
        self.wait_for_members(&expected, CATCH_UP_DEADLINE).await;
    }
}
