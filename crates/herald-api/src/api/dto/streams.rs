//! What group and queue subscription streams deliver, over WebSocket (`messages` and
//! `assignment` frames) and server-sent events (`message` and `assignment` events) alike.

use serde::Serialize;
use utoipa::ToSchema;

use super::consume::ConsumedMessageDto;
use super::decoded::ReadDecoder;
use super::groups::TopicPartitionDto;
use crate::broker::subscriptions::PulledMessage;
use crate::broker::{GroupMessage, Membership};

/// A message delivered to a group member's stream, with the offset that commits it.
#[derive(Debug, Serialize, ToSchema)]
pub struct GroupDelivered {
    /// Send this back in a `commit` (or `POST /v1/groups/{group}/offsets`) once processed:
    /// the next offset to read in the message's partition.
    pub commit: CommitPosition,
    #[serde(flatten)]
    pub message: ConsumedMessageDto,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CommitPosition {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// A lease delivered to a queue subscription: ack it with `ack_id`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseDelivered {
    pub ack_id: String,
    pub delivery_attempt: u32,
    #[serde(flatten)]
    pub message: ConsumedMessageDto,
}

/// The member's place after a join or a rebalance.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssignmentBody {
    pub member_id: String,
    pub generation: u64,
    pub assignments: Vec<TopicPartitionDto>,
}

impl From<GroupMessage> for GroupDelivered {
    fn from(message: GroupMessage) -> Self {
        GroupDelivered::with(ConsumedMessageDto::from_domain(
            &message.topic,
            message.message,
        ))
    }
}

impl GroupDelivered {
    fn with(dto: ConsumedMessageDto) -> Self {
        GroupDelivered {
            commit: CommitPosition {
                topic: dto.topic.clone(),
                partition: dto.partition,
                offset: dto.offset + 1,
            },
            message: dto,
        }
    }

    /// A poll's messages, decoded with a decoder (a stream with `decode: json`).
    pub async fn all(
        messages: Vec<GroupMessage>,
        mut decoder: Option<&mut ReadDecoder>,
    ) -> Vec<GroupDelivered> {
        let mut delivered = Vec::with_capacity(messages.len());
        for message in messages {
            let dto =
                ReadDecoder::maybe(decoder.as_deref_mut(), &message.topic, message.message).await;
            delivered.push(GroupDelivered::with(dto));
        }
        delivered
    }

    /// The commit position as one string, `topic/partition/offset` (a server-sent event id).
    pub fn position(&self) -> String {
        format!(
            "{}/{}/{}",
            self.commit.topic, self.commit.partition, self.commit.offset
        )
    }
}

impl From<PulledMessage> for LeaseDelivered {
    fn from(pulled: PulledMessage) -> Self {
        LeaseDelivered {
            ack_id: pulled.ack_id,
            delivery_attempt: pulled.delivery_attempt,
            message: ConsumedMessageDto::from_domain(&pulled.topic, pulled.message),
        }
    }
}

impl LeaseDelivered {
    /// A pull's leases, decoded with a decoder (a stream with `decode: json`).
    pub async fn all(
        pulled: Vec<PulledMessage>,
        mut decoder: Option<&mut ReadDecoder>,
    ) -> Vec<LeaseDelivered> {
        let mut delivered = Vec::with_capacity(pulled.len());
        for lease in pulled {
            delivered.push(LeaseDelivered {
                ack_id: lease.ack_id,
                delivery_attempt: lease.delivery_attempt,
                message: ReadDecoder::maybe(decoder.as_deref_mut(), &lease.topic, lease.message)
                    .await,
            });
        }
        delivered
    }
}

impl From<Membership> for AssignmentBody {
    fn from(membership: Membership) -> Self {
        AssignmentBody {
            member_id: membership.member_id,
            generation: membership.generation,
            assignments: membership.assignments.into_iter().map(Into::into).collect(),
        }
    }
}
