//! Golden bytes of the metadata commands and outcomes (they are raft entries and raft replies
//! of the metadata group): one sample of every variant, checked against
//! `migrations/wire/<version>/` (see `herald_wire_fixtures`). Each enum's names come from an
//! exhaustive `match`, so a new variant does not compile without a name, and its samples must
//! cover every variant, so it does not pass without a sample and a fixture.

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;

use herald_wire_fixtures::{assert_covers_every_variant, Golden};

use crate::auth::{AuthCommand, AuthOutcome, PolicyRule, SigningKeyRecord};
use crate::batch::Compression;
use crate::groups::{GroupCommand, GroupOutcome, OffsetReset, OffsetSwap, TopicPartition};
use crate::metadata::{MetadataCommand, MetadataOutcome};
use crate::producers::ProducerRegistration;
use crate::redrive::{RedriveCommand, RedriveJob, RedriveOutcome, RedrivePartition, RedriveState};
use crate::replica_moves::ReplicaMove;
use crate::schemas::{
    Compatibility, SchemaCommand, SchemaFormat, SchemaOutcome, SchemaReference, StoredSchema,
    TopicSchemas,
};
use crate::subscriptions::{
    DeadLetterPolicy, Ordering, RetryPolicy, StartPosition, SubscriptionCommand,
    SubscriptionConfig, SubscriptionMeta, SubscriptionOutcome,
};
use crate::topic::{CleanupPolicy, TopicConfig, TopicConfigPatch};
use crate::wire_version::{WireVersion, WIRE_VERSION};

/// Checks `samples` of one enum against the fixtures of `area`.
fn check_enum<T: Serialize + DeserializeOwned + Debug>(
    area: &str,
    samples: &[T],
    name: fn(&T) -> &'static str,
) {
    assert_covers_every_variant(samples);
    let mut golden = Golden::new(area, WIRE_VERSION.get());
    for sample in samples {
        golden.check(name(sample), sample);
    }
    golden.finish();
}

// Sample values are spelled out, never taken from a `Default` that a release may change.

fn topic_config() -> TopicConfig {
    TopicConfig {
        retention_ms: 604_800_000,
        retention_bytes: -1,
        cleanup_policy: CleanupPolicy::CompactDelete,
        max_message_bytes: 1_048_576,
        compression: Compression::Zstd,
        delete_retention_ms: 86_400_000,
        min_compaction_lag_ms: 0,
        idempotency_window_ms: 86_400_000,
        idempotency_window_entries: 10_000,
    }
}

fn counts() -> BTreeMap<String, u32> {
    BTreeMap::from([("orders".to_string(), 3)])
}

fn partition() -> TopicPartition {
    TopicPartition {
        topic: "orders".into(),
        partition: 1,
    }
}

fn subscription_config() -> SubscriptionConfig {
    SubscriptionConfig {
        topic: "orders".into(),
        ack_deadline_ms: 30_000,
        retry_policy: RetryPolicy {
            min_backoff_ms: 1_000,
            max_backoff_ms: 60_000,
        },
        dead_letter_policy: Some(DeadLetterPolicy {
            topic: "orders-dead".into(),
            max_delivery_attempts: 5,
        }),
        start: StartPosition::Latest,
        ordering: Ordering::Key,
    }
}

fn subscription_meta() -> SubscriptionMeta {
    SubscriptionMeta {
        name: "billing".into(),
        id: 4,
        config: subscription_config(),
        created_at_ms: 1_700_000_000_000,
    }
}

fn redrive_job() -> RedriveJob {
    RedriveJob {
        id: 2,
        subscription: "billing".into(),
        subscription_id: 4,
        source_topic: "orders".into(),
        dead_letter_topic: "orders-dead".into(),
        from_offset: Some(10),
        to_offset: None,
        max_per_second: 100,
        batch_size: 50,
        partitions: vec![RedrivePartition {
            partition: 0,
            start: 10,
            next: 12,
            end: 20,
        }],
        state: RedriveState::Running,
        reason: None,
        redriven: 2,
        skipped: 0,
        started_at_ms: 1_700_000_000_000,
        finished_at_ms: None,
    }
}

fn metadata_command_name(command: &MetadataCommand) -> &'static str {
    match command {
        MetadataCommand::InitCluster { .. } => "init-cluster",
        MetadataCommand::RegisterNode { .. } => "register-node",
        MetadataCommand::CreateTopic { .. } => "create-topic",
        MetadataCommand::UpdateTopic { .. } => "update-topic",
        MetadataCommand::DeleteTopic { .. } => "delete-topic",
        MetadataCommand::AddNode { .. } => "add-node",
        MetadataCommand::DrainNode { .. } => "drain-node",
        MetadataCommand::RemoveNode { .. } => "remove-node",
        MetadataCommand::Groups(_) => "groups",
        MetadataCommand::InitProducer { .. } => "init-producer",
        MetadataCommand::Subscription(_) => "subscription",
        MetadataCommand::Redrive(_) => "redrive",
        MetadataCommand::Auth(_) => "auth",
        MetadataCommand::RaiseClusterVersion { .. } => "raise-cluster-version",
        MetadataCommand::Schemas(_) => "schemas",
        MetadataCommand::SetNodeZone { .. } => "set-node-zone",
        MetadataCommand::MoveReplicas { .. } => "move-replicas",
    }
}

fn metadata_commands() -> Vec<MetadataCommand> {
    vec![
        MetadataCommand::InitCluster {
            cluster_id: "herald-00000000000000a1".into(),
        },
        MetadataCommand::RegisterNode {
            node_id: 2,
            http_addr: "10.0.0.2:8080".into(),
            raft_addr: "10.0.0.2:7000".into(),
        },
        MetadataCommand::CreateTopic {
            name: "orders".into(),
            replication_factor: 3,
            config: topic_config(),
            replicas: vec![vec![1, 2, 3], vec![2, 3, 1]],
            created_at_ms: 1_700_000_000_000,
        },
        MetadataCommand::UpdateTopic {
            name: "orders".into(),
            partitions: Some(3),
            config: TopicConfigPatch {
                retention_ms: Some(3_600_000),
                cleanup_policy: Some(CleanupPolicy::Compact),
                compression: Some(Compression::Lz4),
                ..TopicConfigPatch::default()
            },
            new_replicas: vec![vec![3, 1, 2]],
        },
        MetadataCommand::DeleteTopic {
            name: "orders".into(),
            deleted_at_ms: 1_700_000_000_000,
        },
        MetadataCommand::AddNode {
            node_id: 4,
            http_addr: "10.0.0.4:8080".into(),
            raft_addr: "10.0.0.4:7000".into(),
        },
        MetadataCommand::DrainNode {
            node_id: 1,
            moves: vec![("orders".into(), 0, vec![4, 2, 3])],
        },
        MetadataCommand::RemoveNode { node_id: 1 },
        MetadataCommand::Groups(GroupCommand::Delete {
            group: "readers".into(),
        }),
        MetadataCommand::InitProducer {
            name: Some("ingest".into()),
        },
        MetadataCommand::Subscription(SubscriptionCommand::Delete {
            name: "billing".into(),
        }),
        MetadataCommand::Redrive(RedriveCommand::Cancel {
            subscription: "billing".into(),
            now_ms: 1_700_000_000_000,
        }),
        MetadataCommand::Auth(AuthCommand::DeleteClient {
            client_id: "ingest".into(),
        }),
        MetadataCommand::RaiseClusterVersion {
            version: WireVersion(1),
        },
        MetadataCommand::Schemas(SchemaCommand::DeleteSubject {
            subject: "orders-value".into(),
            permanent: false,
        }),
        MetadataCommand::SetNodeZone {
            node_id: 2,
            zone: Some("eu-west-1b".into()),
        },
        MetadataCommand::MoveReplicas {
            moves: vec![ReplicaMove {
                topic: "orders".into(),
                partition: 1,
                from: vec![2, 3, 1],
                to: vec![4, 3, 1],
            }],
        },
    ]
}

fn metadata_outcome_name(outcome: &MetadataOutcome) -> &'static str {
    match outcome {
        MetadataOutcome::Done => "done",
        MetadataOutcome::TopicExists => "topic-exists",
        MetadataOutcome::TopicNotFound => "topic-not-found",
        MetadataOutcome::Invalid(_) => "invalid",
        MetadataOutcome::NodeExists => "node-exists",
        MetadataOutcome::NodeNotFound => "node-not-found",
        MetadataOutcome::Groups(_) => "groups",
        MetadataOutcome::ProducerInitialized(_) => "producer-initialized",
        MetadataOutcome::Subscription(_) => "subscription",
        MetadataOutcome::Redrive(_) => "redrive",
        MetadataOutcome::Auth(_) => "auth",
        MetadataOutcome::Schemas(_) => "schemas",
    }
}

fn metadata_outcomes() -> Vec<MetadataOutcome> {
    vec![
        MetadataOutcome::Done,
        MetadataOutcome::TopicExists,
        MetadataOutcome::TopicNotFound,
        MetadataOutcome::Invalid("partitions must be between 1 and 1024".into()),
        MetadataOutcome::NodeExists,
        MetadataOutcome::NodeNotFound,
        MetadataOutcome::Groups(GroupOutcome::Done),
        MetadataOutcome::ProducerInitialized(ProducerRegistration {
            producer_id: 7,
            producer_epoch: 2,
        }),
        MetadataOutcome::Subscription(SubscriptionOutcome::Deleted),
        MetadataOutcome::Redrive(RedriveOutcome::Stale),
        MetadataOutcome::Auth(AuthOutcome::Done),
        MetadataOutcome::Schemas(SchemaOutcome::Done),
    ]
}

fn schema_reference() -> SchemaReference {
    SchemaReference {
        name: "com.acme.Address".into(),
        subject: "address-value".into(),
        version: 2,
    }
}

fn schema_command_name(command: &SchemaCommand) -> &'static str {
    match command {
        SchemaCommand::Register { .. } => "register",
        SchemaCommand::DeleteVersion { .. } => "delete-version",
        SchemaCommand::DeleteSubject { .. } => "delete-subject",
        SchemaCommand::SetCompatibility { .. } => "set-compatibility",
        SchemaCommand::BindTopic { .. } => "bind-topic",
    }
}

fn schema_commands() -> Vec<SchemaCommand> {
    vec![
        SchemaCommand::Register {
            subject: "orders-value".into(),
            schema: StoredSchema {
                format: SchemaFormat::Avro,
                text: r#"{"type":"record","name":"Order","fields":[{"name":"a","type":"com.acme.Address"}]}"#.into(),
                references: vec![schema_reference()],
            },
            checked_against: Some(3),
        },
        SchemaCommand::DeleteVersion {
            subject: "orders-value".into(),
            version: 2,
            permanent: true,
        },
        SchemaCommand::DeleteSubject {
            subject: "orders-value".into(),
            permanent: false,
        },
        SchemaCommand::SetCompatibility {
            subject: Some("orders-value".into()),
            level: Some(Compatibility::FullTransitive),
        },
        SchemaCommand::BindTopic {
            topic: "orders".into(),
            schemas: TopicSchemas {
                key_subject: None,
                value_subject: Some("orders-value".into()),
            },
        },
    ]
}

fn schema_outcome_name(outcome: &SchemaOutcome) -> &'static str {
    match outcome {
        SchemaOutcome::Registered { .. } => "registered",
        SchemaOutcome::Stale => "stale",
        SchemaOutcome::Deleted { .. } => "deleted",
        SchemaOutcome::Done => "done",
        SchemaOutcome::SubjectNotFound => "subject-not-found",
        SchemaOutcome::VersionNotFound => "version-not-found",
        SchemaOutcome::SubjectSoftDeleted => "subject-soft-deleted",
        SchemaOutcome::VersionSoftDeleted => "version-soft-deleted",
        SchemaOutcome::SubjectNotSoftDeleted => "subject-not-soft-deleted",
        SchemaOutcome::VersionNotSoftDeleted => "version-not-soft-deleted",
        SchemaOutcome::Referenced { .. } => "referenced",
        SchemaOutcome::ReferenceNotFound(_) => "reference-not-found",
        SchemaOutcome::TopicNotFound => "topic-not-found",
        SchemaOutcome::SubjectLevelNotSet => "subject-level-not-set",
    }
}

fn schema_outcomes() -> Vec<SchemaOutcome> {
    vec![
        SchemaOutcome::Registered { id: 12, version: 3 },
        SchemaOutcome::Stale,
        SchemaOutcome::Deleted {
            versions: vec![1, 2],
        },
        SchemaOutcome::Done,
        SchemaOutcome::SubjectNotFound,
        SchemaOutcome::VersionNotFound,
        SchemaOutcome::SubjectSoftDeleted,
        SchemaOutcome::VersionSoftDeleted,
        SchemaOutcome::SubjectNotSoftDeleted,
        SchemaOutcome::VersionNotSoftDeleted,
        SchemaOutcome::Referenced { by: vec![4, 9] },
        SchemaOutcome::ReferenceNotFound(schema_reference()),
        SchemaOutcome::TopicNotFound,
        SchemaOutcome::SubjectLevelNotSet,
    ]
}

fn group_command_name(command: &GroupCommand) -> &'static str {
    match command {
        GroupCommand::Join { .. } => "join",
        GroupCommand::Leave { .. } => "leave",
        GroupCommand::Expire { .. } => "expire",
        GroupCommand::Resize { .. } => "resize",
        GroupCommand::Commit { .. } => "commit",
        GroupCommand::CompareAndCommit { .. } => "compare-and-commit",
        GroupCommand::Reset { .. } => "reset",
        GroupCommand::Delete { .. } => "delete",
    }
}

fn group_commands() -> Vec<GroupCommand> {
    let now_ms = 1_700_000_000_000;
    vec![
        GroupCommand::Join {
            group: "readers".into(),
            member_id: "m-1".into(),
            owner: Some("ingest".into()),
            topics: vec!["orders".into()],
            session_timeout_ms: 30_000,
            offset_reset: Some(OffsetReset::Latest),
            partition_counts: counts(),
            now_ms,
            max_members: 100,
        },
        GroupCommand::Leave {
            group: "readers".into(),
            member_id: "m-1".into(),
            partition_counts: counts(),
            now_ms,
        },
        GroupCommand::Expire {
            group: "readers".into(),
            member_ids: vec!["m-2".into()],
            partition_counts: counts(),
            now_ms,
        },
        GroupCommand::Resize {
            group: "readers".into(),
            partition_counts: counts(),
            now_ms,
        },
        GroupCommand::Commit {
            group: "readers".into(),
            member_id: "m-1".into(),
            generation: 3,
            offsets: vec![(partition(), 42)],
            past_log_end: vec![],
            now_ms,
        },
        GroupCommand::CompareAndCommit {
            group: "readers".into(),
            member_id: "m-1".into(),
            generation: 3,
            offsets: vec![OffsetSwap {
                partition: partition(),
                expected: Some(40),
                offset: 42,
            }],
            now_ms,
        },
        GroupCommand::Reset {
            group: "readers".into(),
            offsets: vec![(partition(), 0)],
            now_ms,
        },
        GroupCommand::Delete {
            group: "readers".into(),
        },
    ]
}

fn group_outcome_name(outcome: &GroupOutcome) -> &'static str {
    match outcome {
        GroupOutcome::Joined { .. } => "joined",
        GroupOutcome::Rebalanced { .. } => "rebalanced",
        GroupOutcome::Done => "done",
        GroupOutcome::Committed { .. } => "committed",
        GroupOutcome::GroupNotFound => "group-not-found",
        GroupOutcome::UnknownMember => "unknown-member",
        GroupOutcome::StaleGeneration { .. } => "stale-generation",
        GroupOutcome::NotAssigned(_) => "not-assigned",
        GroupOutcome::PastLogEnd(_) => "past-log-end",
        GroupOutcome::OffsetMoved { .. } => "offset-moved",
        GroupOutcome::GroupNotEmpty { .. } => "group-not-empty",
        GroupOutcome::TooManyMembers { .. } => "too-many-members",
    }
}

fn group_outcomes() -> Vec<GroupOutcome> {
    vec![
        GroupOutcome::Joined {
            generation: 3,
            assignments: vec![partition()],
        },
        GroupOutcome::Rebalanced { generation: 4 },
        GroupOutcome::Done,
        GroupOutcome::Committed {
            offsets: vec![(partition(), 42)],
        },
        GroupOutcome::GroupNotFound,
        GroupOutcome::UnknownMember,
        GroupOutcome::StaleGeneration { current: 5 },
        GroupOutcome::NotAssigned(partition()),
        GroupOutcome::PastLogEnd(partition()),
        GroupOutcome::OffsetMoved {
            partition: partition(),
            current: Some(41),
        },
        GroupOutcome::GroupNotEmpty { members: 2 },
        GroupOutcome::TooManyMembers { max: 100 },
    ]
}

fn subscription_command_name(command: &SubscriptionCommand) -> &'static str {
    match command {
        SubscriptionCommand::Put { .. } => "put",
        SubscriptionCommand::Delete { .. } => "delete",
    }
}

fn subscription_commands() -> Vec<SubscriptionCommand> {
    vec![
        SubscriptionCommand::Put {
            name: "billing".into(),
            config: subscription_config(),
            now_ms: 1_700_000_000_000,
        },
        SubscriptionCommand::Delete {
            name: "billing".into(),
        },
    ]
}

fn subscription_outcome_name(outcome: &SubscriptionOutcome) -> &'static str {
    match outcome {
        SubscriptionOutcome::Created(_) => "created",
        SubscriptionOutcome::Updated(_) => "updated",
        SubscriptionOutcome::Unchanged(_) => "unchanged",
        SubscriptionOutcome::Deleted => "deleted",
        SubscriptionOutcome::NotFound => "not-found",
        SubscriptionOutcome::TopicNotFound(_) => "topic-not-found",
        SubscriptionOutcome::Conflict(_) => "conflict",
        SubscriptionOutcome::Invalid(_) => "invalid",
    }
}

fn subscription_outcomes() -> Vec<SubscriptionOutcome> {
    vec![
        SubscriptionOutcome::Created(subscription_meta()),
        SubscriptionOutcome::Updated(subscription_meta()),
        SubscriptionOutcome::Unchanged(subscription_meta()),
        SubscriptionOutcome::Deleted,
        SubscriptionOutcome::NotFound,
        SubscriptionOutcome::TopicNotFound("orders".into()),
        SubscriptionOutcome::Conflict("its topic cannot change".into()),
        SubscriptionOutcome::Invalid("ack_deadline_ms must be between 1000 and 600000".into()),
    ]
}

fn redrive_command_name(command: &RedriveCommand) -> &'static str {
    match command {
        RedriveCommand::Start { .. } => "start",
        RedriveCommand::Progress { .. } => "progress",
        RedriveCommand::Fail { .. } => "fail",
        RedriveCommand::Cancel { .. } => "cancel",
    }
}

fn redrive_commands() -> Vec<RedriveCommand> {
    let now_ms = 1_700_000_000_000;
    vec![
        RedriveCommand::Start {
            subscription: "billing".into(),
            dead_letter_topic: "orders-dead".into(),
            from_offset: Some(10),
            to_offset: None,
            max_per_second: 100,
            ranges: vec![(0, 10, 20)],
            now_ms,
        },
        RedriveCommand::Progress {
            subscription_id: 4,
            job_id: 2,
            partition: 0,
            expected_next: 10,
            next: 12,
            redriven: 2,
            skipped: 0,
            now_ms,
        },
        RedriveCommand::Fail {
            subscription_id: 4,
            job_id: 2,
            reason: "the source topic was deleted".into(),
            now_ms,
        },
        RedriveCommand::Cancel {
            subscription: "billing".into(),
            now_ms,
        },
    ]
}

fn redrive_outcome_name(outcome: &RedriveOutcome) -> &'static str {
    match outcome {
        RedriveOutcome::Job(_) => "job",
        RedriveOutcome::Stale => "stale",
        RedriveOutcome::SubscriptionNotFound => "subscription-not-found",
        RedriveOutcome::NoDeadLetterPolicy(_) => "no-dead-letter-policy",
        RedriveOutcome::InProgress(_) => "in-progress",
        RedriveOutcome::NotRunning => "not-running",
        RedriveOutcome::Invalid(_) => "invalid",
    }
}

fn redrive_outcomes() -> Vec<RedriveOutcome> {
    vec![
        RedriveOutcome::Job(redrive_job()),
        RedriveOutcome::Stale,
        RedriveOutcome::SubscriptionNotFound,
        RedriveOutcome::NoDeadLetterPolicy("billing".into()),
        RedriveOutcome::InProgress(redrive_job()),
        RedriveOutcome::NotRunning,
        RedriveOutcome::Invalid("from_offset (9) must not be greater than to_offset (3)".into()),
    ]
}

fn auth_command_name(command: &AuthCommand) -> &'static str {
    match command {
        AuthCommand::CreateClient { .. } => "create-client",
        AuthCommand::RotateClientSecret { .. } => "rotate-client-secret",
        AuthCommand::DeleteClient { .. } => "delete-client",
        AuthCommand::AddSigningKey { .. } => "add-signing-key",
        AuthCommand::DropSigningKey { .. } => "drop-signing-key",
        AuthCommand::SetPolicy { .. } => "set-policy",
    }
}

fn auth_commands() -> Vec<AuthCommand> {
    vec![
        AuthCommand::CreateClient {
            client_id: "ingest".into(),
            secret_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
            roles: vec!["producer".into()],
            created_at_ms: 1_700_000_000_000,
        },
        AuthCommand::RotateClientSecret {
            client_id: "ingest".into(),
            secret_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdDI$aGFzaDI".into(),
            rotated_at_ms: 1_700_000_000_001,
        },
        AuthCommand::DeleteClient {
            client_id: "ingest".into(),
        },
        AuthCommand::AddSigningKey {
            key: SigningKeyRecord {
                kid: "k1".into(),
                sealed_private: vec![1, 2, 3, 4],
                public_x: vec![5; 4],
                public_y: vec![6; 4],
                created_at_ms: 1_700_000_000_000,
                retired_at_ms: Some(1_700_000_100_000),
            },
        },
        AuthCommand::DropSigningKey { kid: "k0".into() },
        AuthCommand::SetPolicy {
            rules: vec![PolicyRule {
                role: "producer".into(),
                resource: "topic:orders-*".into(),
                action: "produce".into(),
            }],
        },
    ]
}

fn auth_outcome_name(outcome: &AuthOutcome) -> &'static str {
    match outcome {
        AuthOutcome::Done => "done",
        AuthOutcome::ClientExists => "client-exists",
        AuthOutcome::ClientNotFound => "client-not-found",
        AuthOutcome::KeyNotFound => "key-not-found",
        AuthOutcome::Invalid(_) => "invalid",
    }
}

fn auth_outcomes() -> Vec<AuthOutcome> {
    vec![
        AuthOutcome::Done,
        AuthOutcome::ClientExists,
        AuthOutcome::ClientNotFound,
        AuthOutcome::KeyNotFound,
        AuthOutcome::Invalid("a client has at most 16 roles, got 17".into()),
    ]
}

#[test]
fn metadata_commands_match_their_golden_bytes() {
    check_enum(
        "metadata-command",
        &metadata_commands(),
        metadata_command_name,
    );
    check_enum("group-command", &group_commands(), group_command_name);
    check_enum(
        "subscription-command",
        &subscription_commands(),
        subscription_command_name,
    );
    check_enum("redrive-command", &redrive_commands(), redrive_command_name);
    check_enum("auth-command", &auth_commands(), auth_command_name);
    check_enum("schema-command", &schema_commands(), schema_command_name);
}

#[test]
fn metadata_outcomes_match_their_golden_bytes() {
    check_enum(
        "metadata-outcome",
        &metadata_outcomes(),
        metadata_outcome_name,
    );
    check_enum("group-outcome", &group_outcomes(), group_outcome_name);
    check_enum(
        "subscription-outcome",
        &subscription_outcomes(),
        subscription_outcome_name,
    );
    check_enum("redrive-outcome", &redrive_outcomes(), redrive_outcome_name);
    check_enum("auth-outcome", &auth_outcomes(), auth_outcome_name);
    check_enum("schema-outcome", &schema_outcomes(), schema_outcome_name);
}

/// The small enums inside commands: a new variant of one is a new encoding in an entry too.
#[test]
fn value_enums_inside_commands_match_their_golden_bytes() {
    check_enum(
        "cleanup-policy",
        &[
            CleanupPolicy::Delete,
            CleanupPolicy::Compact,
            CleanupPolicy::CompactDelete,
        ],
        |policy| match policy {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact-delete",
        },
    );
    check_enum(
        "compression",
        &[Compression::None, Compression::Lz4, Compression::Zstd],
        |compression| match compression {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        },
    );
    check_enum(
        "start-position",
        &[StartPosition::Earliest, StartPosition::Latest],
        |start| match start {
            StartPosition::Earliest => "earliest",
            StartPosition::Latest => "latest",
        },
    );
    check_enum(
        "ordering",
        &[Ordering::None, Ordering::Key],
        |ordering| match ordering {
            Ordering::None => "none",
            Ordering::Key => "key",
        },
    );
    check_enum(
        "offset-reset",
        &[OffsetReset::Earliest, OffsetReset::Latest],
        |reset| match reset {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        },
    );
    check_enum(
        "schema-format",
        &[
            SchemaFormat::Avro,
            SchemaFormat::Protobuf,
            SchemaFormat::Json,
        ],
        |format| match format {
            SchemaFormat::Avro => "avro",
            SchemaFormat::Protobuf => "protobuf",
            SchemaFormat::Json => "json",
        },
    );
    check_enum("compatibility", &Compatibility::ALL, |level| match level {
        Compatibility::Backward => "backward",
        Compatibility::BackwardTransitive => "backward-transitive",
        Compatibility::Forward => "forward",
        Compatibility::ForwardTransitive => "forward-transitive",
        Compatibility::Full => "full",
        Compatibility::FullTransitive => "full-transitive",
        Compatibility::None => "none",
    });
    check_enum(
        "redrive-state",
        &[
            RedriveState::Running,
            RedriveState::Done,
            RedriveState::Failed,
            RedriveState::Cancelled,
        ],
        |state| match state {
            RedriveState::Running => "running",
            RedriveState::Done => "done",
            RedriveState::Failed => "failed",
            RedriveState::Cancelled => "cancelled",
        },
    );
}
