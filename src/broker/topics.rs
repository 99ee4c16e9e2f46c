//! Topic administration: create, describe, grow, reconfigure, delete.

use super::{
    Broker, BrokerError, BrokerResult, CreateTopic, PartitionInfo, TopicInfo, UpdateTopic,
};
use crate::cluster::placement::place_partitions;
use crate::domain::metadata::{MetadataCommand, MetadataOutcome, TopicMeta};
use crate::domain::names::{is_internal, validate_name};
use crate::domain::topic::MAX_PARTITIONS;
use crate::domain::TopicConfig;

fn check_partitions(partitions: u32) -> BrokerResult<()> {
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(BrokerError::InvalidRequest(format!(
            "partitions must be between 1 and {MAX_PARTITIONS}"
        )));
    }
    Ok(())
}

fn outcome(name: &str, outcome: MetadataOutcome) -> BrokerResult<()> {
    match outcome {
        MetadataOutcome::Done => Ok(()),
        MetadataOutcome::TopicExists => Err(BrokerError::TopicExists(name.to_string())),
        MetadataOutcome::TopicNotFound => Err(BrokerError::TopicNotFound(name.to_string())),
        MetadataOutcome::Invalid(message) => Err(BrokerError::InvalidRequest(message)),
        other @ (MetadataOutcome::NodeExists
        | MetadataOutcome::NodeNotFound
        | MetadataOutcome::Groups(_)
        | MetadataOutcome::ProducerInitialized(_)) => Err(BrokerError::Internal(format!(
            "unexpected outcome for topic '{name}': {other:?}"
        ))),
    }
}

impl Broker {
    /// Nodes that take new replicas: registered, not draining, and up.
    fn placement_nodes(&self) -> Vec<u64> {
        let cluster = self.cluster();
        cluster
            .metadata()
            .active_nodes()
            .into_iter()
            .filter(|node| cluster.is_up(*node))
            .collect()
    }

    /// Spreads topics' first partitions over nodes: each placement starts where the cluster's
    /// partition count leaves off.
    fn placement_rotation(&self) -> u32 {
        self.cluster()
            .metadata()
            .topics
            .values()
            .map(|topic| topic.partitions.len() as u32)
            .sum()
    }

    pub async fn create_topic(&self, request: CreateTopic) -> BrokerResult<TopicInfo> {
        validate_name("topic", &request.name).map_err(BrokerError::InvalidRequest)?;
        if is_internal(&request.name) {
            return Err(BrokerError::InvalidRequest(format!(
                "topic name '{}' is reserved: names starting with '__' are internal",
                request.name
            )));
        }
        check_partitions(request.partitions)?;
        let config = TopicConfig::default()
            .patched(&request.config)
            .map_err(BrokerError::InvalidRequest)?;
        let replicas = place_partitions(
            &self.placement_nodes(),
            self.placement_rotation(),
            request.partitions,
            request.replication_factor,
        )
        .map_err(BrokerError::InvalidRequest)?;
        let command = MetadataCommand::CreateTopic {
            name: request.name.clone(),
            replication_factor: request.replication_factor,
            config,
            replicas,
            created_at_ms: now_ms(),
        };
        outcome(&request.name, self.cluster().propose(command).await?)?;
        self.wait_for_partitions(&request.name).await?;
        self.describe_topic(&request.name).await
    }

    pub async fn list_topics(&self) -> BrokerResult<Vec<TopicInfo>> {
        let metadata = self.cluster().metadata();
        Ok(metadata
            .topics
            .values()
            .filter(|topic| !is_internal(&topic.name))
            .map(|topic| self.topic_info(topic))
            .collect())
    }

    pub async fn describe_topic(&self, name: &str) -> BrokerResult<TopicInfo> {
        let topic = self.topic(name)?;
        Ok(self.topic_info(&topic))
    }

    pub async fn update_topic(&self, name: &str, update: UpdateTopic) -> BrokerResult<TopicInfo> {
        let topic = self.topic(name)?;
        let current = topic.partitions.len() as u32;
        let new_replicas = match update.partitions {
            Some(wanted) => {
                check_partitions(wanted)?;
                if wanted < current {
                    return Err(BrokerError::InvalidRequest(format!(
                        "partitions can only grow: topic '{name}' has {current}, asked for {wanted}"
                    )));
                }
                place_partitions(
                    &self.placement_nodes(),
                    self.placement_rotation(),
                    wanted - current,
                    topic.replication_factor,
                )
                .map_err(BrokerError::InvalidRequest)?
            }
            None => Vec::new(),
        };
        // Validate here too, for a clear error before anything is proposed.
        topic
            .config
            .patched(&update.config)
            .map_err(BrokerError::InvalidRequest)?;
        let command = MetadataCommand::UpdateTopic {
            name: name.to_string(),
            partitions: update.partitions,
            config: update.config,
            new_replicas,
        };
        outcome(name, self.cluster().propose(command).await?)?;
        self.wait_for_partitions(name).await?;
        self.describe_topic(name).await
    }

    pub async fn delete_topic(&self, name: &str) -> BrokerResult<()> {
        let topic = self.topic(name)?;
        outcome(
            name,
            self.cluster()
                .propose(MetadataCommand::DeleteTopic {
                    name: name.to_string(),
                })
                .await?,
        )?;
        let groups: Vec<u64> = topic
            .partitions
            .iter()
            .map(|partition| partition.group_id)
            .collect();
        self.cluster()
            .wait_until_gone(&groups, self.inner.options.leader_wait)
            .await?;
        self.inner.appenders.forget(&groups);
        Ok(())
    }

    /// Waits until every partition of the topic has a known leader, so a produce right after
    /// creation does not fail. Each partition gets the whole leader wait: a thousand new
    /// groups take a while to start, but each one that starts elects its leader quickly.
    async fn wait_for_partitions(&self, name: &str) -> BrokerResult<()> {
        let topic = self.topic(name)?;
        for assignment in &topic.partitions {
            let deadline = tokio::time::Instant::now() + self.inner.options.leader_wait;
            if let Err(error) = self.cluster().route(assignment.group_id, deadline).await {
                tracing::warn!(topic = name, %error, "a new partition has no leader yet");
                return Err(BrokerError::NoLeader(format!("topic '{name}'")));
            }
        }
        Ok(())
    }

    fn topic_info(&self, topic: &TopicMeta) -> TopicInfo {
        let partitions = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(index, assignment)| {
                let state = self.cluster().partition_state(assignment.group_id);
                PartitionInfo {
                    partition: index as u32,
                    leader: state.leader,
                    replicas: assignment.replicas.clone(),
                    in_sync: state.in_sync,
                    log_start_offset: state.watermarks.log_start_offset,
                    high_watermark: state.watermarks.high_watermark,
                }
            })
            .collect();
        TopicInfo {
            name: topic.name.clone(),
            partitions,
            replication_factor: topic.replication_factor,
            config: topic.config.clone(),
        }
    }
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
