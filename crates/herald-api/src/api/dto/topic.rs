//! Topic DTOs: the wire form of `POST/GET/PATCH /v1/topics...`, separate from the domain's
//! `TopicInfo`/`TopicConfig` so either can change without breaking the other.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::problem::ApiError;
use crate::broker::{CreateTopic, PartitionInfo, SubjectsPatch, TopicInfo, UpdateTopic};
use crate::domain::names::validate_public_topic_name;
use crate::domain::topic::MAX_PARTITIONS;
use crate::domain::{CleanupPolicy, Compression, TopicConfig, TopicConfigPatch};

/// What happens to old data of a topic: `delete` removes whole batches past `retention_ms` /
/// `retention_bytes`; `compact` keeps the latest message of every key (a `null` value deletes
/// the key; messages need a key); `compact,delete` does both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = CleanupPolicy)]
pub enum CleanupPolicyDto {
    #[serde(rename = "delete")]
    Delete,
    #[serde(rename = "compact")]
    Compact,
    #[serde(rename = "compact,delete", alias = "delete,compact")]
    CompactDelete,
}

/// How stored batches are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = Compression)]
pub enum CompressionDto {
    None,
    Lz4,
    Zstd,
}

/// The effective configuration of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "retention_ms": 604800000, "retention_bytes": -1, "cleanup_policy": "delete",
    "max_message_bytes": 1048576, "compression": "none",
    "delete_retention_ms": 86400000, "min_compaction_lag_ms": 0,
    "idempotency_window_ms": 86400000, "idempotency_window_entries": 10000
}))]
#[schema(as = TopicConfig)]
pub struct TopicConfigDto {
    /// How long data is kept, in ms; -1 keeps it forever.
    pub retention_ms: i64,
    /// How many bytes one partition keeps; -1 is unlimited.
    pub retention_bytes: i64,
    pub cleanup_policy: CleanupPolicyDto,
    /// The largest message (key + value + headers) accepted, in bytes.
    pub max_message_bytes: u32,
    pub compression: CompressionDto,
    /// How long a tombstone (a message with a null value) stays on a compacted topic after the
    /// cleaner first passed it, in ms.
    #[schema(minimum = 0, example = 86400000)]
    pub delete_retention_ms: i64,
    /// Messages younger than this, in ms, are never compacted.
    #[schema(minimum = 0, example = 0)]
    pub min_compaction_lag_ms: i64,
    /// How long each partition remembers an `Idempotency-Key` or an idempotent producer, in ms.
    #[schema(minimum = 1000, example = 86400000)]
    pub idempotency_window_ms: i64,
    /// How many idempotency keys (and, apart, producers) each partition remembers at most.
    #[schema(minimum = 1, maximum = 1000000, example = 10000)]
    pub idempotency_window_entries: u32,
    /// The schema registry subject every message key must follow (left out: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_subject: Option<String>,
    /// The schema registry subject every message value must follow (left out: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_subject: Option<String>,
}

/// Configuration to set on create or update; absent keys keep their current (or default) value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"retention_ms": 86400000, "cleanup_policy": "compact"}))]
#[schema(as = TopicConfigPatch)]
pub struct TopicConfigPatchDto {
    /// How long data is kept, in ms; -1 keeps it forever.
    #[serde(default)]
    #[schema(schema_with = minus_one_or_positive)]
    pub retention_ms: Option<i64>,
    /// How many bytes one partition keeps; -1 is unlimited.
    #[serde(default)]
    #[schema(schema_with = minus_one_or_positive)]
    pub retention_bytes: Option<i64>,
    #[serde(default)]
    pub cleanup_policy: Option<CleanupPolicyDto>,
    /// The largest message (key + value + headers) accepted, 1 to 67108864 bytes.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 67108864)]
    pub max_message_bytes: Option<u32>,
    #[serde(default)]
    pub compression: Option<CompressionDto>,
    /// How long a tombstone (a message with a null value) stays on a compacted topic after the
    /// cleaner first passed it, in ms; 0 or more (default 86400000, one day).
    #[serde(default)]
    #[schema(minimum = 0, example = 86400000)]
    pub delete_retention_ms: Option<i64>,
    /// Messages younger than this, in ms, are never compacted; 0 or more (default 0).
    #[serde(default)]
    #[schema(minimum = 0, example = 60000)]
    pub min_compaction_lag_ms: Option<i64>,
    /// How long each partition remembers an `Idempotency-Key` or an idempotent producer, in
    /// ms; at least 1000 (default 86400000, one day).
    #[serde(default)]
    #[schema(minimum = 1000, example = 86400000)]
    pub idempotency_window_ms: Option<i64>,
    /// How many idempotency keys (and, apart, producers) each partition remembers at most;
    /// 1 to 1000000 (default 10000). The oldest go first.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000, example = 10000)]
    pub idempotency_window_entries: Option<u32>,
    /// A schema registry subject every message key must follow (it must exist); `null` clears
    /// it. Produces of keys that do not follow it are refused (400 `schema_validation_failed`).
    #[serde(default, deserialize_with = "super::nullable")]
    #[schema(value_type = Option<String>, nullable, min_length = 1, max_length = 255)]
    pub key_subject: Option<Option<String>>,
    /// A schema registry subject every message value must follow (it must exist); `null`
    /// clears it.
    #[serde(default, deserialize_with = "super::nullable")]
    #[schema(value_type = Option<String>, nullable, min_length = 1, max_length = 255)]
    pub value_subject: Option<Option<String>>,
}

/// `POST /v1/topics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "orders", "partitions": 3, "replication_factor": 1, "config": {"retention_ms": 86400000}}))]
pub struct CreateTopicRequest {
    /// 1-249 characters of `[A-Za-z0-9._-]`, not `.` or `..`, not starting with `__`.
    #[schema(schema_with = crate::api::openapi::rules::public_name_schema)]
    pub name: String,
    /// 1 to 1024; default 1.
    #[serde(default = "one_u32")]
    #[schema(default = 1, minimum = 1, maximum = 1024)]
    pub partitions: u32,
    /// 1 to 65535, at most the nodes that take replicas (409 `not_enough_nodes` past them).
    /// Absent: the cluster's `default_replication_factor` (3 unless configured), capped at the
    /// nodes that take replicas, so one node alone creates topics of one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub replication_factor: Option<u16>,
    #[serde(default, deserialize_with = "super::object_only")]
    pub config: TopicConfigPatchDto,
}

/// `PATCH /v1/topics/{topic}`: partitions only grow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"partitions": 6, "config": {"retention_ms": -1}}))]
pub struct UpdateTopicRequest {
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1024)]
    pub partitions: Option<u32>,
    #[serde(default, deserialize_with = "super::object_only")]
    pub config: TopicConfigPatchDto,
}

/// One partition of a topic and where it lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = Partition)]
pub struct PartitionDto {
    pub partition: u32,
    /// The node leading the partition, `null` while none is known.
    pub leader: Option<u64>,
    pub replicas: Vec<u64>,
    pub in_sync: Vec<u64>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "name": "orders",
    "partitions": [{"partition": 0, "leader": 1, "replicas": [1], "in_sync": [1], "log_start_offset": 0, "high_watermark": 17}],
    "replication_factor": 1,
    "config": {"retention_ms": 604800000, "retention_bytes": -1, "cleanup_policy": "delete",
               "max_message_bytes": 1048576, "compression": "none",
               "delete_retention_ms": 86400000, "min_compaction_lag_ms": 0,
               "idempotency_window_ms": 86400000, "idempotency_window_entries": 10000}
}))]
#[schema(as = Topic)]
pub struct TopicDto {
    pub name: String,
    pub partitions: Vec<PartitionDto>,
    pub replication_factor: u16,
    pub config: TopicConfigDto,
}

/// `-1` (no limit) or a positive number: what `retention_ms` and `retention_bytes` take.
fn minus_one_or_positive() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
    let minus_one = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .enum_values(Some([-1]));
    let positive = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(1));
    let null = ObjectBuilder::new().schema_type(Type::Null);
    OneOfBuilder::new()
        .item(minus_one)
        .item(positive)
        .item(null)
        .description(Some("-1 for no limit, or a positive number"))
        .into()
}

fn one_u32() -> u32 {
    1
}

/// Checks a topic name from a path or body: the name rules, and not internal (for reads as for
/// writes: internal topics are the node's own; the audit log is read at `GET /v1/audit`).
pub fn check_topic_name(name: &str) -> Result<(), ApiError> {
    validate_public_topic_name("topic name", name).map_err(ApiError::invalid_request)
}

fn check_partitions(partitions: u32) -> Result<(), ApiError> {
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(ApiError::invalid_request(format!(
            "partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}"
        )));
    }
    Ok(())
}

impl TopicConfigPatchDto {
    /// The subjects part of the patch.
    fn subjects(&self) -> SubjectsPatch {
        SubjectsPatch {
            key_subject: self.key_subject.clone(),
            value_subject: self.value_subject.clone(),
        }
    }

    /// The domain patch, with each value checked (ranges, -1 meaning unlimited).
    pub fn into_domain(self) -> Result<TopicConfigPatch, ApiError> {
        let patch = TopicConfigPatch {
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            cleanup_policy: self.cleanup_policy.map(CleanupPolicy::from),
            max_message_bytes: self.max_message_bytes,
            compression: self.compression.map(Compression::from),
            delete_retention_ms: self.delete_retention_ms,
            min_compaction_lag_ms: self.min_compaction_lag_ms,
            idempotency_window_ms: self.idempotency_window_ms,
            idempotency_window_entries: self.idempotency_window_entries,
        };
        // Value checks do not depend on the current configuration, so the default will do.
        TopicConfig::default()
            .patched(&patch)
            .map_err(ApiError::invalid_request)?;
        Ok(patch)
    }
}

impl CreateTopicRequest {
    pub fn into_domain(self) -> Result<CreateTopic, ApiError> {
        check_topic_name(&self.name)?;
        check_partitions(self.partitions)?;
        if self.replication_factor == Some(0) {
            return Err(ApiError::invalid_request(
                "replication_factor must be at least 1",
            ));
        }
        let subjects = self.config.subjects();
        Ok(CreateTopic {
            name: self.name,
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            config: self.config.into_domain()?,
            subjects,
        })
    }
}

impl UpdateTopicRequest {
    pub fn into_domain(self) -> Result<UpdateTopic, ApiError> {
        if let Some(partitions) = self.partitions {
            check_partitions(partitions)?;
        }
        let subjects = self.config.subjects();
        Ok(UpdateTopic {
            partitions: self.partitions,
            config: self.config.into_domain()?,
            subjects,
        })
    }
}

impl From<CleanupPolicyDto> for CleanupPolicy {
    fn from(dto: CleanupPolicyDto) -> Self {
        match dto {
            CleanupPolicyDto::Delete => CleanupPolicy::Delete,
            CleanupPolicyDto::Compact => CleanupPolicy::Compact,
            CleanupPolicyDto::CompactDelete => CleanupPolicy::CompactDelete,
        }
    }
}

impl From<CleanupPolicy> for CleanupPolicyDto {
    fn from(policy: CleanupPolicy) -> Self {
        match policy {
            CleanupPolicy::Delete => CleanupPolicyDto::Delete,
            CleanupPolicy::Compact => CleanupPolicyDto::Compact,
            CleanupPolicy::CompactDelete => CleanupPolicyDto::CompactDelete,
        }
    }
}

impl From<CompressionDto> for Compression {
    fn from(dto: CompressionDto) -> Self {
        match dto {
            CompressionDto::None => Compression::None,
            CompressionDto::Lz4 => Compression::Lz4,
            CompressionDto::Zstd => Compression::Zstd,
        }
    }
}

impl From<Compression> for CompressionDto {
    fn from(compression: Compression) -> Self {
        match compression {
            Compression::None => CompressionDto::None,
            Compression::Lz4 => CompressionDto::Lz4,
            Compression::Zstd => CompressionDto::Zstd,
        }
    }
}

impl From<TopicConfig> for TopicConfigDto {
    fn from(config: TopicConfig) -> Self {
        TopicConfigDto {
            retention_ms: config.retention_ms,
            retention_bytes: config.retention_bytes,
            cleanup_policy: config.cleanup_policy.into(),
            max_message_bytes: config.max_message_bytes,
            compression: config.compression.into(),
            delete_retention_ms: config.delete_retention_ms,
            min_compaction_lag_ms: config.min_compaction_lag_ms,
            idempotency_window_ms: config.idempotency_window_ms,
            idempotency_window_entries: config.idempotency_window_entries,
            key_subject: None,
            value_subject: None,
        }
    }
}

impl From<PartitionInfo> for PartitionDto {
    fn from(info: PartitionInfo) -> Self {
        PartitionDto {
            partition: info.partition,
            leader: info.leader,
            replicas: info.replicas,
            in_sync: info.in_sync,
            log_start_offset: info.log_start_offset,
            high_watermark: info.high_watermark,
        }
    }
}

impl From<TopicInfo> for TopicDto {
    fn from(info: TopicInfo) -> Self {
        TopicDto {
            name: info.name,
            partitions: info
                .partitions
                .into_iter()
                .map(PartitionDto::from)
                .collect(),
            replication_factor: info.replication_factor,
            config: TopicConfigDto {
                key_subject: info.subjects.key_subject,
                value_subject: info.subjects.value_subject,
                ..info.config.into()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(json: &str) -> Result<CreateTopic, ApiError> {
        let request: CreateTopicRequest =
            serde_json::from_str(json).map_err(|e| ApiError::invalid_request(e.to_string()))?;
        request.into_domain()
    }

    #[test]
    fn create_defaults() {
        let request = create(r#"{"name":"orders"}"#).expect("valid");
        assert_eq!(request.name, "orders");
        assert_eq!(request.partitions, 1);
        assert_eq!(request.replication_factor, None);
        assert_eq!(request.config, TopicConfigPatch::default());
    }

    #[test]
    fn create_with_config() {
        let request = create(
            r#"{"name":"orders","partitions":3,"replication_factor":2,
                "config":{"retention_ms":-1,"cleanup_policy":"compact,delete","compression":"zstd","max_message_bytes":100}}"#,
        )
        .expect("valid");
        assert_eq!(request.partitions, 3);
        assert_eq!(request.replication_factor, Some(2));
        assert_eq!(request.config.retention_ms, Some(-1));
        assert_eq!(
            request.config.cleanup_policy,
            Some(CleanupPolicy::CompactDelete)
        );
        assert_eq!(request.config.compression, Some(Compression::Zstd));
        assert_eq!(request.config.max_message_bytes, Some(100));
    }

    #[test]
    fn create_refuses_bad_input() {
        for json in [
            r#"{"name":"a b"}"#,
            r#"{"name":""}"#,
            r#"{"name":"__internal"}"#,
            r#"{"name":"orders","partitions":0}"#,
            r#"{"name":"orders","partitions":1025}"#,
            r#"{"name":"orders","partitions":-1}"#,
            r#"{"name":"orders","replication_factor":0}"#,
            r#"{"name":"orders","config":{"retention_ms":0}}"#,
            r#"{"name":"orders","config":{"max_message_bytes":0}}"#,
            r#"{"name":"orders","config":{"delete_retention_ms":-1}}"#,
            r#"{"name":"orders","config":{"min_compaction_lag_ms":-1}}"#,
            r#"{"name":"orders","config":{"min_compaction_lag_ms":"1h"}}"#,
            r#"{"name":"orders","config":{"idempotency_window_ms":999}}"#,
            r#"{"name":"orders","config":{"idempotency_window_entries":0}}"#,
            r#"{"name":"orders","config":{"idempotency_window_entries":1000001}}"#,
            r#"{"name":"orders","config":{"cleanup_policy":"forever"}}"#,
            r#"{"name":"orders","config":{"compression":"gzip"}}"#,
            r#"{"name":"orders","config":{"colour":"blue"}}"#,
            r#"{"name":"orders","config":[null,null]}"#,
            r#"{"name":"orders","config":[86400000]}"#,
            r#"{"name":"orders","config":null}"#,
            r#"{"name":"orders","shards":2}"#,
        ] {
            let error = create(json).expect_err(json);
            assert_eq!(error.code.as_str(), "invalid_request", "{json}");
        }
    }

    #[test]
    fn create_with_compaction_config() {
        let request = create(
            r#"{"name":"users","config":{"cleanup_policy":"compact","delete_retention_ms":0,"min_compaction_lag_ms":60000}}"#,
        )
        .expect("valid");
        assert_eq!(request.config.delete_retention_ms, Some(0));
        assert_eq!(request.config.min_compaction_lag_ms, Some(60_000));
        let error = create(r#"{"name":"users","config":{"delete_retention_ms":-1}}"#)
            .expect_err("negative");
        assert_eq!(error.code.as_str(), "invalid_request");
        assert!(
            error.detail.contains("delete_retention_ms"),
            "{}",
            error.detail
        );
    }

    #[test]
    fn update_checks_partitions_and_config() {
        let ok: UpdateTopicRequest = serde_json::from_str(r#"{"partitions":4}"#).expect("json");
        assert_eq!(ok.into_domain().expect("valid").partitions, Some(4));
        let zero: UpdateTopicRequest = serde_json::from_str(r#"{"partitions":0}"#).expect("json");
        assert!(zero.into_domain().is_err());
        assert!(serde_json::from_str::<UpdateTopicRequest>(r#"{"name":"x"}"#).is_err());
    }

    #[test]
    fn topic_dto_wire_form() {
        let info = TopicInfo {
            name: "orders".into(),
            partitions: vec![PartitionInfo {
                partition: 0,
                leader: None,
                replicas: vec![1, 2],
                in_sync: vec![1],
                log_start_offset: 3,
                high_watermark: 9,
            }],
            replication_factor: 2,
            config: TopicConfig {
                cleanup_policy: CleanupPolicy::CompactDelete,
                ..TopicConfig::default()
            },
            subjects: Default::default(),
        };
        let json = serde_json::to_value(TopicDto::from(info)).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "name": "orders",
                "partitions": [{"partition": 0, "leader": null, "replicas": [1, 2], "in_sync": [1],
                                "log_start_offset": 3, "high_watermark": 9}],
                "replication_factor": 2,
                "config": {"retention_ms": 604800000, "retention_bytes": -1, "cleanup_policy": "compact,delete",
                           "max_message_bytes": 1048576, "compression": "none",
                           "delete_retention_ms": 86400000, "min_compaction_lag_ms": 0,
                           "idempotency_window_ms": 86400000, "idempotency_window_entries": 10000}
            })
        );
    }
}
