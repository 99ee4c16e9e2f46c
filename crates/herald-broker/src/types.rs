//! The requests and answers of the broker service: what every transport (HTTP, CLI, later
//! WebSocket) hands to `Broker` and gets back. Transports map their DTOs to and from these.

use std::time::Duration;

use herald_domain::schemas::TopicSchemas;
use herald_domain::{RecordKey, RecordValue, TopicConfig, TopicConfigPatch};

pub type NodeId = u64;

/// `POST /v1/topics`.
#[derive(Debug, Clone)]
pub struct CreateTopic {
    pub name: String,
    pub partitions: u32,
    /// None: the node's `default_replication_factor`, capped at the nodes that take replicas.
    pub replication_factor: Option<u16>,
    pub config: TopicConfigPatch,
    /// The subjects its keys and values follow.
    pub subjects: SubjectsPatch,
}

/// Changes to the subjects a topic's keys and values follow (`key_subject`, `value_subject`
/// in its config): `None` keeps one, `Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectsPatch {
    pub key_subject: Option<Option<String>>,
    pub value_subject: Option<Option<String>>,
}

impl SubjectsPatch {
    pub fn is_empty(&self) -> bool {
        self.key_subject.is_none() && self.value_subject.is_none()
    }

    /// `current` with the patch applied.
    pub fn applied_to(&self, current: &TopicSchemas) -> TopicSchemas {
        TopicSchemas {
            key_subject: self
                .key_subject
                .clone()
                .unwrap_or_else(|| current.key_subject.clone()),
            value_subject: self
                .value_subject
                .clone()
                .unwrap_or_else(|| current.value_subject.clone()),
        }
    }
}

/// `PATCH /v1/topics/{topic}`: partitions only grow.
#[derive(Debug, Clone, Default)]
pub struct UpdateTopic {
    pub partitions: Option<u32>,
    pub config: TopicConfigPatch,
    pub subjects: SubjectsPatch,
}

/// The answer to a create: the topic, and whether this call created it (false: an identical
/// topic existed, e.g. the first attempt of a retried create).
#[derive(Debug, Clone)]
pub struct CreatedTopic {
    pub topic: TopicInfo,
    pub created: bool,
}

/// A topic as clients see it.
#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub replication_factor: u16,
    pub config: TopicConfig,
    /// The subjects its keys and values follow.
    pub subjects: TopicSchemas,
}

#[derive(Debug, Clone)]
pub struct PartitionInfo {
    pub partition: u32,
    /// The node leading this partition's raft group, when one is known.
    pub leader: Option<NodeId>,
    pub replicas: Vec<NodeId>,
    pub in_sync: Vec<NodeId>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

/// How durable a produce must be before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// After a quorum of replicas has the batch durable.
    #[default]
    All,
    /// After the leader has the batch durable.
    Leader,
    /// At once; offsets are unknown.
    None,
}

impl Acks {
    /// The name clients use (`acks=all`), also a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::Leader => "leader",
            Acks::None => "none",
        }
    }
}

/// One message to produce, already decoded from its transport form.
#[derive(Debug, Clone)]
pub struct ProduceMessage {
    pub key: Option<RecordKey>,
    pub value: RecordValue,
    pub headers: Vec<(String, String)>,
    /// An explicit partition; otherwise keyed messages hash, and a request's unkeyed ones all
    /// go to one partition, the partitions taken in turn request by request.
    pub partition: Option<u32>,
    /// A client timestamp (ms since the epoch); otherwise the broker's clock.
    pub timestamp: Option<i64>,
}

/// Where one produced message landed, in request order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducedOffset {
    pub partition: u32,
    /// `None` with `acks=none`, and for a producer's duplicate too old for its offsets to be
    /// remembered.
    pub offset: Option<u64>,
}

/// What makes a produce idempotent: an `Idempotency-Key`, producer fields, both or neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Idempotence {
    /// A retry with the same key (same topic) within the window answers the first offsets
    /// and writes nothing again.
    pub idempotency_key: Option<String>,
    pub producer: Option<ProducerFields>,
}

/// An idempotent producer's identity and the sequence of the request's first message (the
/// others follow on, one per message, in one partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub sequence: i32,
}

/// The answer to a produce.
#[derive(Debug, Clone)]
pub struct ProduceAnswer {
    /// One per message, in request order; `offset` is `None` for the messages of a failed
    /// partition.
    pub offsets: Vec<ProducedOffset>,
    /// An idempotent request whose messages were all written before: nothing was written now.
    pub duplicate: bool,
    /// A partial success: the partitions whose share was not written (or whose outcome is
    /// unknown), in request order, each with why. Empty when every share was written; a
    /// request none of whose shares was written answers an error instead.
    pub failed: Vec<FailedShare>,
}

/// One partition's share of a produce that failed while other partitions' shares were written.
#[derive(Debug, Clone)]
pub struct FailedShare {
    pub partition: u32,
    pub error: crate::BrokerError,
}

/// `POST /v1/producers`: an idempotent producer's id and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub name: Option<String>,
}

/// Where a read starts. Also what a read sent to a partition's leader carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    At(u64),
}

/// `GET /v1/topics/{topic}/partitions/{partition}/messages`.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    pub topic: String,
    pub partition: u32,
    pub offset: OffsetSpec,
    pub max_messages: usize,
    /// Zero answers at once; otherwise a long poll that answers as soon as any message is there.
    pub max_wait: Duration,
}

/// A message read back, with where it is.
#[derive(Debug, Clone)]
pub struct ConsumedMessage {
    pub partition: u32,
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<RecordKey>,
    pub value: RecordValue,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct FetchResult {
    pub topic: String,
    pub messages: Vec<ConsumedMessage>,
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

/// A rebalance plan (`GET` and `POST /v1/cluster/rebalance`).
#[derive(Debug, Clone)]
pub struct RebalanceInfo {
    /// Partitions whose replicas move (or only reorder: a new preferred leader).
    pub moves: Vec<PartitionMove>,
    pub nodes: Vec<NodeShareInfo>,
    /// Partitions still copying to new replicas from earlier steps.
    pub moving: usize,
    /// A rebalance was started by this request (POST), or is running on this node already.
    pub started: bool,
}

#[derive(Debug, Clone)]
pub struct PartitionMove {
    pub topic: String,
    pub partition: u32,
    pub replicas_before: Vec<NodeId>,
    pub replicas_after: Vec<NodeId>,
    /// False when only the order (the preferred leader) changes.
    pub copies_data: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct NodeShareInfo {
    pub node_id: NodeId,
    pub replicas_before: usize,
    pub replicas_after: usize,
    pub leaders_before: usize,
    pub leaders_after: usize,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    pub cluster_id: String,
    pub nodes: Vec<NodeInfo>,
    pub metadata_leader: Option<NodeId>,
    /// The wire version every node is known to speak (what features need every node for).
    pub cluster_version: u16,
}

#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: NodeId,
    pub http_addr: String,
    pub raft_addr: String,
    /// `up`, `down` or `draining`.
    pub status: String,
    /// The partitions this node leads.
    pub leader_of: Vec<PartitionRef>,
    /// The wire version it reported last (`None`: not heard yet; 0: a release before wire
    /// versions).
    pub wire_version: Option<u16>,
    /// Its zone (`None`: it named none).
    pub zone: Option<String>,
}

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: u32,
}

/// `GET /readyz`.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub ready: bool,
    /// Why not, when not ready.
    pub reasons: Vec<String>,
    /// What limits a node that is ready: it serves, but not everything (a full data directory
    /// refuses produce requests).
    pub warnings: Vec<String>,
}
