//! Cluster state and readiness, as the broker reports them.

use super::{Broker, BrokerResult, ClusterInfo, NodeInfo, Readiness};

impl Broker {
    pub async fn cluster_info(&self) -> BrokerResult<ClusterInfo> {
        let cluster = self.cluster();
        let metadata = cluster.metadata();
        let local_leads = cluster
            .local_replicas()
            .iter()
            .filter(|replica| replica.leader() == Some(cluster.node_id()))
            .count();
        let nodes = metadata
            .nodes
            .iter()
            .map(|(&id, record)| NodeInfo {
                id,
                http_addr: record.http_addr.clone(),
                raft_addr: record.raft_addr.clone(),
                status: if id == cluster.node_id() {
                    "up".into()
                } else {
                    "unknown".into()
                },
                leader_of: if id == cluster.node_id() {
                    local_leads as u32
                } else {
                    0
                },
            })
            .collect();
        Ok(ClusterInfo {
            cluster_id: metadata.cluster_id.clone().unwrap_or_default(),
            nodes,
            metadata_leader: cluster.metadata_leader(),
        })
    }

    pub async fn readiness(&self) -> Readiness {
        let cluster = self.cluster();
        let mut reasons = Vec::new();
        if cluster.metadata_leader().is_none() {
            reasons.push("the metadata group has no leader".to_string());
        }
        let metadata = cluster.metadata();
        for topic in metadata.topics.values() {
            for (index, assignment) in topic.partitions.iter().enumerate() {
                if !assignment.replicas.contains(&cluster.node_id()) {
                    continue;
                }
                match cluster.local_replica(assignment.group_id) {
                    Some(replica) if replica.leader().is_some() => {}
                    Some(_) => reasons.push(format!("{}/{index} has no leader", topic.name)),
                    None => reasons.push(format!("{}/{index} is not started", topic.name)),
                }
            }
        }
        Readiness {
            ready: reasons.is_empty(),
            reasons,
        }
    }
}
