//! What an import writes into: the target topic (created like the source when missing, refused
//! when it has fewer partitions than the export) and the idempotent producer it writes as.

use anyhow::Context;
use serde::Deserialize;
use serde_json::json;

use super::archive::ExportHeader;
use super::client::{Api, CreateTopic, ProblemError, TopicInfo};

/// An idempotent producer's identity, as `POST /v1/producers` answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Producer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl Api {
    /// `POST /v1/producers` with a name: the name's id, at its next epoch.
    pub async fn register_producer(&self, name: &str) -> anyhow::Result<Producer> {
        self.send_json(
            self.http()
                .post(self.url(&["v1", "producers"]))
                .json(&json!({ "name": name })),
        )
        .await
    }
}

/// Whether the import created the topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicState {
    Created,
    Existing,
}

/// The target topic `name`: created with the export's partition count and configuration when
/// it does not exist (with `replication_factor`, or the cluster's default); an existing one
/// must have at least the export's partitions, since each source partition goes to the one of
/// the same number.
pub async fn ensure_topic(
    api: &Api,
    name: &str,
    header: &ExportHeader,
    replication_factor: Option<u16>,
) -> anyhow::Result<(TopicInfo, TopicState)> {
    let (topic, state) = match api.get_topic(name).await {
        Ok(topic) => (topic, TopicState::Existing),
        Err(error) if problem_code(&error) == Some("topic_not_found") => {
            let spec = CreateTopic {
                name: name.to_string(),
                partitions: header.partition_count,
                replication_factor,
                config: header.config.clone(),
            };
            match api.create_topic(&spec).await {
                Ok(topic) => (topic, TopicState::Created),
                // Created meanwhile by someone else (another import of the same file?): use it.
                Err(error) if problem_code(&error) == Some("topic_exists") => {
                    (api.get_topic(name).await?, TopicState::Existing)
                }
                Err(error) => {
                    return Err(error).with_context(|| {
                        format!("cannot create the target topic `{name}` like the exported one")
                    })
                }
            }
        }
        Err(error) => {
            return Err(error).with_context(|| format!("cannot describe the target topic `{name}`"))
        }
    };
    check_partitions(&topic, header)?;
    Ok((topic, state))
}

/// An existing target needs a partition for each source partition.
fn check_partitions(topic: &TopicInfo, header: &ExportHeader) -> anyhow::Result<()> {
    let has = topic.partitions.len() as u32;
    anyhow::ensure!(
        has >= header.partition_count,
        "topic `{}` has {has} partition(s), fewer than the {} of the export (each source partition goes to the partition of the same number): add partitions or import into another topic; nothing was imported",
        topic.name,
        header.partition_count
    );
    Ok(())
}

fn problem_code(error: &anyhow::Error) -> Option<&str> {
    error.downcast_ref::<ProblemError>().map(ProblemError::code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::archive::PartitionRange;
    use crate::cli::client::PartitionInfo;

    fn header(partitions: u32) -> ExportHeader {
        ExportHeader {
            topic: "orders".into(),
            partition_count: partitions,
            replication_factor: 1,
            config: Default::default(),
            exported_at_ms: 0,
            export_id: "ab".into(),
            partitions: (0..partitions)
                .map(|partition| PartitionRange {
                    partition,
                    log_start_offset: 0,
                    high_watermark: 0,
                })
                .collect(),
        }
    }

    fn topic(partitions: u32) -> TopicInfo {
        TopicInfo {
            name: "copy".into(),
            partitions: (0..partitions)
                .map(|partition| PartitionInfo {
                    partition,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_target_needs_every_source_partition() {
        assert!(check_partitions(&topic(3), &header(3)).is_ok());
        assert!(check_partitions(&topic(4), &header(3)).is_ok());
        let error = check_partitions(&topic(2), &header(3)).unwrap_err();
        assert!(error.to_string().contains("fewer than the 3"), "{error}");
    }
}
