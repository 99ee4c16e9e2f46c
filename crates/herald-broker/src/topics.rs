//! Topic administration: create, describe, grow, reconfigure, delete.
//!
//! Every change is safe to retry after an unknown outcome (a 504, a dropped connection): a
//! create of a topic that exists with exactly the requested partitions, replication factor and
//! configuration answers that topic (not created by this call), a grow to the partition count
//! the topic already has and a config patch to the values it already has change nothing and
//! succeed, and a delete of a topic deleted moments ago answers success again (the metadata
//! remembers recently deleted names). Once the metadata change is committed, the answer is
//! success: waiting for the new partitions' leaders is bounded (all partitions together) and
//! only delays it.

use herald_domain::RaftGroupId;
use std::sync::Arc;

use futures::future::join_all;
use tokio::time::Instant;

use super::{
    BrokerError, BrokerResult, CreateTopic, CreatedTopic, ErrorCode, PartitionInfo, ProduceService,
    SchemaService, SubjectsPatch, TopicInfo, UpdateTopic,
};
use crate::broker_core::Core;
use herald_cluster::placement::{place_partitions, PlacementError};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, TopicMeta};
use herald_domain::names::{is_internal, validate_name};
use herald_domain::schemas::TopicSchemas;
use herald_domain::topic::MAX_PARTITIONS;
use herald_domain::TopicConfig;

fn check_partitions(partitions: u32) -> BrokerResult<()> {
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(BrokerError::InvalidRequest(format!(
            "partitions must be between 1 and {MAX_PARTITIONS}"
        )));
    }
    Ok(())
}

impl From<PlacementError> for BrokerError {
    fn from(error: PlacementError) -> Self {
        match error {
            PlacementError::ZeroFactor => BrokerError::InvalidRequest(error.to_string()),
            PlacementError::NotEnoughNodes { .. } => BrokerError::Conflict {
                code: ErrorCode::NotEnoughNodes,
                message: error.to_string(),
            },
        }
    }
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
        | MetadataOutcome::ProducerInitialized(_)
        | MetadataOutcome::Subscription(_)
        | MetadataOutcome::Redrive(_)
        | MetadataOutcome::Auth(_)
        | MetadataOutcome::Schemas(_)) => Err(BrokerError::Internal(format!(
            "unexpected outcome for topic '{name}': {other:?}"
        ))),
    }
}

/// Topic administration: create (placing the partitions), describe, grow, reconfigure,
/// delete. A deleted topic's appenders go with it, through [`ProduceService`].
#[derive(Clone)]
pub struct TopicService {
    core: Arc<Core>,
    produce: ProduceService,
    schemas: SchemaService,
}

impl TopicService {
    pub(crate) fn new(
        core: Arc<Core>,
        produce: ProduceService,
        schemas: SchemaService,
    ) -> TopicService {
        TopicService {
            core,
            produce,
            schemas,
        }
    }

    /// Nodes that take new replicas: registered, not draining, and up.
    pub(super) fn placement_nodes(&self) -> Vec<u64> {
        let cluster = self.core.cluster();
        cluster
            .metadata()
            .current()
            .active_nodes()
            .into_iter()
            .filter(|node| cluster.membership().is_up(*node))
            .collect()
    }

    /// The replication factor of a topic created without one: the configured default, capped
    /// at the nodes that take replicas (at least 1, so placement explains a cluster with none).
    fn default_replication_factor(&self, nodes: usize) -> u16 {
        let nodes = u16::try_from(nodes.max(1)).unwrap_or(u16::MAX);
        self.core.options.default_replication_factor.clamp(1, nodes)
    }

    /// Spreads topics' first partitions over nodes: each placement starts where the cluster's
    /// partition count leaves off.
    fn placement_rotation(&self) -> u32 {
        self.core
            .cluster()
            .metadata()
            .current()
            .topics
            .values()
            .map(|topic| topic.partitions.len() as u32)
            .sum()
    }

    /// Creates a topic; `created` is false when an identical topic already existed (a retry).
    pub async fn create_topic(&self, request: CreateTopic) -> BrokerResult<CreatedTopic> {
        validate_name("topic", &request.name).map_err(BrokerError::InvalidRequest)?;
        if is_internal(&request.name) {
            return Err(BrokerError::InvalidRequest(format!(
                "topic name '{}' is reserved: names starting with '__' are internal",
                request.name
            )));
        }
        self.create_any_topic(request).await
    }

    /// Creates a topic whatever its name: the broker's own internal topics (`__audit`) come
    /// through here, users' requests through [`TopicService::create_topic`].
    pub(super) async fn create_any_topic(
        &self,
        request: CreateTopic,
    ) -> BrokerResult<CreatedTopic> {
        validate_name("topic", &request.name).map_err(BrokerError::InvalidRequest)?;
        check_partitions(request.partitions)?;
        let config = TopicConfig::default()
            .patched(&request.config)
            .map_err(BrokerError::InvalidRequest)?;
        if let Some(existing) = self.existing_as_requested(&request, &config)? {
            return Ok(existing);
        }
        self.check_subjects(&request.subjects).await?;
        let nodes = self.placement_nodes();
        let replication_factor = request
            .replication_factor
            .unwrap_or_else(|| self.default_replication_factor(nodes.len()));
        let replicas = place_partitions(
            &nodes,
            &self.core.cluster().metadata().current().zones,
            self.placement_rotation(),
            request.partitions,
            replication_factor,
        )?;
        let command = MetadataCommand::CreateTopic {
            name: request.name.clone(),
            replication_factor,
            config: config.clone(),
            replicas,
            created_at_ms: now_ms(),
        };
        match outcome(
            &request.name,
            self.core.cluster().metadata().propose(command).await?,
        ) {
            Ok(()) => {}
            // Proposed again after an earlier attempt committed (or raced with an identical
            // create): the same topic is a success, another one a conflict.
            Err(BrokerError::TopicExists(name)) => {
                return self
                    .existing_as_requested(&request, &config)?
                    .ok_or(BrokerError::TopicExists(name))
            }
            Err(error) => return Err(error),
        }
        if !request.subjects.is_empty() {
            let subjects = request.subjects.applied_to(&TopicSchemas::default());
            self.schemas.bind_topic(&request.name, subjects).await?;
        }
        self.wait_for_partitions(&request.name).await;
        Ok(CreatedTopic {
            topic: self.describe_topic(&request.name).await?,
            created: true,
        })
    }

    /// The topic named by a create, when it exists exactly as requested; a conflict when it
    /// exists otherwise.
    fn existing_as_requested(
        &self,
        request: &CreateTopic,
        config: &TopicConfig,
    ) -> BrokerResult<Option<CreatedTopic>> {
        let metadata = self.core.cluster().metadata().current();
        let Some(existing) = metadata.topics.get(&request.name) else {
            return Ok(None);
        };
        // A create that named no replication factor matches whatever the topic got: the
        // default's cap may have moved with the nodes since the first attempt.
        let same = existing.partitions.len() == request.partitions as usize
            && request
                .replication_factor
                .is_none_or(|wanted| existing.replication_factor == wanted)
            && existing.config == *config
            && (request.subjects.is_empty()
                || request.subjects.applied_to(&TopicSchemas::default())
                    == self.schemas.topic_schemas(&request.name));
        if !same {
            return Err(BrokerError::TopicExists(request.name.clone()));
        }
        Ok(Some(CreatedTopic {
            topic: self.topic_info(existing),
            created: false,
        }))
    }

    /// Up to `limit` topics in name order after `after` (exclusive), with `prefix`, and
    /// whether more follow. Walks the sorted metadata from `after` on: a page costs its own
    /// size, not the number of topics.
    pub async fn list_topics_page(
        &self,
        after: Option<&str>,
        prefix: Option<&str>,
        limit: usize,
    ) -> BrokerResult<(Vec<TopicInfo>, bool)> {
        use std::ops::Bound;
        let metadata = self.core.cluster().metadata().current();
        let start = match (after, prefix) {
            (Some(after), _) => Bound::Excluded(after.to_string()),
            (None, Some(prefix)) => Bound::Included(prefix.to_string()),
            (None, None) => Bound::Unbounded,
        };
        let mut matching = metadata
            .topics
            .range((start, Bound::Unbounded))
            .map(|(_, topic)| topic)
            .filter(|topic| !is_internal(&topic.name))
            .take_while(|topic| prefix.is_none_or(|prefix| topic.name.starts_with(prefix)));
        let page: Vec<TopicInfo> = matching
            .by_ref()
            .take(limit)
            .map(|topic| self.topic_info(topic))
            .collect();
        let more = matching.next().is_some();
        Ok((page, more))
    }

    pub async fn describe_topic(&self, name: &str) -> BrokerResult<TopicInfo> {
        let topic = self.core.topic(name)?;
        Ok(self.topic_info(&topic))
    }

    pub async fn update_topic(&self, name: &str, update: UpdateTopic) -> BrokerResult<TopicInfo> {
        let topic = self.core.topic(name)?;
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
                    &self.core.cluster().metadata().current().zones,
                    self.placement_rotation(),
                    wanted - current,
                    topic.replication_factor,
                )?
            }
            None => Vec::new(),
        };
        // Validate here too, for a clear error before anything is proposed.
        topic
            .config
            .patched(&update.config)
            .map_err(BrokerError::InvalidRequest)?;
        self.check_subjects(&update.subjects).await?;
        let subjects = update
            .subjects
            .applied_to(&self.schemas.topic_schemas(name));
        let command = MetadataCommand::UpdateTopic {
            name: name.to_string(),
            partitions: update.partitions,
            config: update.config,
            new_replicas,
        };
        outcome(name, self.core.cluster().metadata().propose(command).await?)?;
        if !update.subjects.is_empty() {
            self.schemas.bind_topic(name, subjects).await?;
        }
        self.wait_for_partitions(name).await;
        self.describe_topic(name).await
    }

    /// Deletes a topic. A delete of a topic deleted moments ago (a retry whose first answer was
    /// lost) succeeds again; see [`herald_domain::metadata::MetadataState::recently_deleted`].
    pub async fn delete_topic(&self, name: &str) -> BrokerResult<()> {
        let topic = match self.core.topic(name) {
            Ok(topic) => topic,
            Err(error @ BrokerError::TopicNotFound(_)) => {
                return match self
                    .core
                    .cluster()
                    .metadata()
                    .current()
                    .recently_deleted(name)
                {
                    true => Ok(()),
                    false => Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        let command = MetadataCommand::DeleteTopic {
            name: name.to_string(),
            deleted_at_ms: now_ms(),
        };
        match outcome(name, self.core.cluster().metadata().propose(command).await?) {
            Ok(()) => {}
            Err(BrokerError::TopicNotFound(_))
                if self
                    .core
                    .cluster()
                    .metadata()
                    .current()
                    .recently_deleted(name) => {}
            Err(error) => return Err(error),
        }
        let groups: Vec<RaftGroupId> = topic
            .partitions
            .iter()
            .map(|partition| partition.group_id)
            .collect();
        // The delete is committed: what is left is this node stopping its replicas, which
        // delays the answer but cannot undo it.
        if let Err(error) = self
            .core
            .cluster()
            .replicas()
            .wait_until_gone(&groups, self.core.options.leader_wait)
            .await
        {
            tracing::warn!(topic = name, %error, "the deleted topic's replicas are still stopping");
        }
        self.produce.forget_partitions(&groups);
        Ok(())
    }

    /// Waits, up to the leader wait in all, until every partition of the topic has a known
    /// leader, so a produce right after creation does not fail. All partitions are awaited
    /// together: a thousand new groups take a while to start, but not a thousand times as long.
    /// A partition still without a leader at the end is logged, not an error: the topic exists,
    /// and its describe shows which partitions have no leader yet.
    async fn wait_for_partitions(&self, name: &str) {
        let Ok(topic) = self.core.topic(name) else {
            return;
        };
        let deadline = Instant::now() + self.core.options.leader_wait;
        let waits = topic.partitions.iter().map(|assignment| {
            self.core
                .cluster()
                .routing()
                .route(assignment.group_id, deadline)
        });
        let missing = join_all(waits)
            .await
            .into_iter()
            .filter(Result::is_err)
            .count();
        if missing > 0 {
            tracing::warn!(
                topic = name,
                missing,
                "new partitions have no leader yet; the topic is answered as it is"
            );
        }
    }

    /// A topic may follow only subjects that exist (404 `subject_not_found` otherwise): a
    /// subject without versions would refuse every message.
    async fn check_subjects(&self, patch: &SubjectsPatch) -> BrokerResult<()> {
        for subject in [&patch.key_subject, &patch.value_subject]
            .into_iter()
            .flatten()
            .flatten()
        {
            self.schemas.versions(subject, false).await?;
        }
        Ok(())
    }

    fn topic_info(&self, topic: &TopicMeta) -> TopicInfo {
        let partitions = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(index, assignment)| {
                let state = self
                    .core
                    .cluster()
                    .routing()
                    .partition_state(assignment.group_id);
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
            subjects: self.schemas.topic_schemas(&topic.name),
        }
    }
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
