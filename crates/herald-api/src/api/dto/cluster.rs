//! Cluster and health DTOs: `GET /v1/cluster`, `/healthz`, `/readyz`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::broker::{ClusterInfo, NodeInfo, Readiness};

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = Node)]
pub struct NodeDto {
    pub id: u64,
    pub http_addr: String,
    pub raft_addr: String,
    /// `up`, `down` or `draining`.
    pub status: String,
    /// The partitions this node leads.
    pub leader_of: Vec<PartitionRefDto>,
    /// The wire version the node reported last: which internal requests and replicated
    /// entries its release knows (docs/clustering.md, "Mixed versions and the cluster
    /// version"). `0`: a release from before wire versions; `null`: not heard yet.
    pub wire_version: Option<u16>,
    /// The node's zone (availability zone, rack), as it named it (`zone`); `null`: none.
    /// Partitions' replicas spread over zones.
    pub zone: Option<String>,
}

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = PartitionRef)]
pub struct PartitionRefDto {
    pub topic: String,
    pub partition: u32,
}

/// `POST /v1/cluster/nodes`: a node to add. Start it first with `herald serve --join`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"node_id": 4, "http_addr": "127.0.0.1:8084", "raft_addr": "127.0.0.1:7004"}))]
#[schema(as = AddNode)]
pub struct AddNodeDto {
    /// Its node id, 1 to 9223372036854775807, never used before in this cluster.
    #[schema(minimum = 1, maximum = 9223372036854775807_u64)]
    pub node_id: u64,
    /// Where clients reach its HTTP API: `HOST:PORT`.
    #[schema(
        max_length = 255,
        pattern = "^[\\s\\S]+:([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"
    )]
    pub http_addr: String,
    /// Where other nodes reach its internal RPC: `HOST:PORT`.
    #[schema(
        max_length = 255,
        pattern = "^[\\s\\S]+:([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"
    )]
    pub raft_addr: String,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "cluster_id": "herald-7f3a",
    "nodes": [{"id": 1, "http_addr": "127.0.0.1:8080", "raft_addr": "127.0.0.1:8081", "status": "up", "leader_of": [{"topic": "orders", "partition": 0}], "wire_version": 1}],
    "metadata_leader": 1,
    "cluster_version": 1
}))]
#[schema(as = Cluster)]
pub struct ClusterDto {
    pub cluster_id: String,
    pub nodes: Vec<NodeDto>,
    /// The node leading the metadata group, `null` while none is known.
    pub metadata_leader: Option<u64>,
    /// The wire version every node is known to speak, raised by the metadata leader once
    /// every node reports a newer one and never lowered: what needs every node upgraded is
    /// enabled from it on. Lower than the nodes' `wire_version` during a rolling upgrade.
    pub cluster_version: u16,
}

impl From<NodeInfo> for NodeDto {
    fn from(node: NodeInfo) -> Self {
        NodeDto {
            id: node.id,
            http_addr: node.http_addr,
            raft_addr: node.raft_addr,
            status: node.status,
            leader_of: node
                .leader_of
                .into_iter()
                .map(|partition| PartitionRefDto {
                    topic: partition.topic,
                    partition: partition.partition,
                })
                .collect(),
            wire_version: node.wire_version,
            zone: node.zone,
        }
    }
}

impl From<ClusterInfo> for ClusterDto {
    fn from(info: ClusterInfo) -> Self {
        ClusterDto {
            cluster_id: info.cluster_id,
            nodes: info.nodes.into_iter().map(NodeDto::from).collect(),
            metadata_leader: info.metadata_leader,
            cluster_version: info.cluster_version,
        }
    }
}

/// `GET /healthz`: the process is alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"status": "ok"}))]
#[schema(as = Health)]
pub struct HealthDto {
    /// Always `ok`.
    pub status: String,
}

/// `GET /readyz`: `ready`, or `not_ready` with the reasons.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"status": "not_ready", "reasons": ["partition orders/0 has no leader"]}))]
#[schema(as = Readiness)]
pub struct ReadinessDto {
    /// `ready` or `not_ready`.
    pub status: String,
    /// Why not, when not ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// What a ready node refuses, if anything: e.g. its data directory is under its disk
    /// reserve, so produce requests answer 507 while reads, groups and admin go on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl From<Readiness> for ReadinessDto {
    fn from(readiness: Readiness) -> Self {
        let status = if readiness.ready {
            "ready"
        } else {
            "not_ready"
        };
        ReadinessDto {
            status: status.to_string(),
            reasons: readiness.reasons,
            warnings: readiness.warnings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_wire_form() {
        let ready = ReadinessDto::from(Readiness {
            ready: true,
            reasons: Vec::new(),
            warnings: Vec::new(),
        });
        assert_eq!(
            serde_json::to_value(ready).expect("json"),
            serde_json::json!({"status": "ready"})
        );
        let not_ready = ReadinessDto::from(Readiness {
            ready: false,
            reasons: vec!["storage closed".into()],
            warnings: Vec::new(),
        });
        assert_eq!(
            serde_json::to_value(not_ready).expect("json"),
            serde_json::json!({"status": "not_ready", "reasons": ["storage closed"]})
        );
        let limited = ReadinessDto::from(Readiness {
            ready: true,
            reasons: Vec::new(),
            warnings: vec!["disk full".into()],
        });
        assert_eq!(
            serde_json::to_value(limited).expect("json"),
            serde_json::json!({"status": "ready", "warnings": ["disk full"]})
        );
    }

    #[test]
    fn cluster_wire_form() {
        let info = ClusterInfo {
            cluster_id: "c1".into(),
            nodes: vec![NodeInfo {
                id: 1,
                http_addr: "127.0.0.1:8080".into(),
                raft_addr: "127.0.0.1:8081".into(),
                status: "up".into(),
                leader_of: vec![crate::broker::PartitionRef {
                    topic: "orders".into(),
                    partition: 3,
                }],
                wire_version: Some(1),
                zone: Some("eu-west-1a".into()),
            }],
            metadata_leader: None,
            cluster_version: 0,
        };
        assert_eq!(
            serde_json::to_value(ClusterDto::from(info)).expect("json"),
            serde_json::json!({
                "cluster_id": "c1",
                "nodes": [{"id": 1, "http_addr": "127.0.0.1:8080", "raft_addr": "127.0.0.1:8081", "status": "up",
                    "leader_of": [{"topic": "orders", "partition": 3}], "wire_version": 1,
                    "zone": "eu-west-1a"}],
                "metadata_leader": null,
                "cluster_version": 0
            })
        );
    }
}
