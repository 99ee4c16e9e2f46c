//! A group subscription on a socket: the socket is a member of a consumer group (a broker
//! [`MemberStream`]: joined, heartbeated, polled and left through the broker's group methods
//! the REST API calls), sending an `assignment` frame on join and after every rebalance and the
//! messages of its partitions within the subscription's credit.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::frames::{CommitFrame, GroupSubscribeFrame, ServerFrame};
use super::outbox::Outbox;
use super::subscription::{check_credit, end_with, grant_credit};
use crate::api::dto::decoded::ReadDecoder;
use crate::api::dto::streams::GroupDelivered;
use crate::api::problem::ApiError;
use crate::broker::stream::ResumingMember;
use crate::broker::{Broker, JoinGroup, MemberEvent, MemberHandle, MemberStream, Membership};
use crate::domain::groups::TopicPartition;

/// A running group subscription; dropping it stops its task, and the member leaves.
pub struct GroupSubscription {
    credit: Arc<Semaphore>,
    member: MemberHandle,
    task: JoinHandle<()>,
}

impl Drop for GroupSubscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A member joined for a `subscribe`, not polled yet.
pub struct Joined {
    pub id: String,
    member: MemberStream,
    credit: u64,
    /// With `decode: "json"`.
    decoder: Option<ReadDecoder>,
}

/// Joins the group for a `subscribe` with `group`, as `owner` (the socket's principal; the
/// member is theirs alone); the member is not polled yet.
pub async fn join(
    broker: &Broker,
    frame: GroupSubscribeFrame,
    owner: Option<String>,
    default_credit: u64,
) -> Result<Joined, ApiError> {
    let credit = check_credit(frame.credit.unwrap_or(default_credit))?;
    let decoder = ReadDecoder::when_asked(broker, frame.decode);
    let request = JoinGroup {
        group: frame.group,
        owner,
        topics: frame.topics,
        session_timeout: frame.session_timeout_ms.map(Duration::from_millis),
        offset_reset: frame.auto_offset_reset.map(Into::into),
    };
    let member = broker
        .groups()
        .join_stream(request, frame.auto_commit)
        .await?;
    Ok(Joined {
        id: frame.id,
        member,
        credit,
        decoder,
    })
}

/// Starts delivering: `assignment` first, then messages as credit allows.
pub fn start(joined: Joined, outbox: &Outbox) -> GroupSubscription {
    let credit = Arc::new(Semaphore::new(joined.credit as usize));
    let handle = joined.member.handle();
    let task = tokio::spawn(deliver(
        joined.id,
        ResumingMember::new(joined.member),
        credit.clone(),
        outbox.clone(),
        joined.decoder,
    ));
    GroupSubscription {
        credit,
        member: handle,
        task,
    }
}

impl GroupSubscription {
    pub fn grant(&self, messages: u64) -> Result<(), ApiError> {
        grant_credit(&self.credit, messages)
    }

    /// Commits with the member's current generation; the answer frame for `frame`.
    pub fn commit(&self, frame: CommitFrame, outbox: &Outbox) {
        let member = self.member.clone();
        let outbox = outbox.clone();
        tokio::spawn(async move {
            let offsets = frame
                .offsets
                .into_iter()
                .map(|offset| {
                    (
                        TopicPartition::new(offset.topic, offset.partition),
                        offset.offset,
                    )
                })
                .collect();
            let answer = match member.commit(offsets).await {
                Ok(_) => ServerFrame::Ok { id: frame.id },
                Err(error) => ServerFrame::error(Some(frame.id.into()), &ApiError::from(error)),
            };
            let _ = outbox.send(&answer);
        });
    }
}

/// Forwards what the member hands over (it rides out leader changes itself), within the
/// credit and the socket's outbound queue, both checked before each attempt.
async fn deliver(
    id: String,
    mut member: ResumingMember,
    credit: Arc<Semaphore>,
    outbox: Outbox,
    mut decoder: Option<ReadDecoder>,
) {
    loop {
        // Backpressure: no poll while the socket's queue is full. The session is kept by the
        // next poll; a client that reads nothing for the stall timeout is closed before it
        // runs out.
        outbox.room().await;
        outbox.quota_pause().await;
        let room = credit.available_permits();
        let event = if room == 0 {
            // No credit: keep the session alive (and learn of rebalances) until some comes.
            tokio::select! {
                granted = credit.acquire() => {
                    drop(granted);
                    continue;
                }
                () = heartbeat_due(member.member()) => member.heartbeat().await,
            }
        } else {
            member.attempt(room).await
        };
        let frame = match event {
            Ok(None) => continue,
            Ok(Some(MemberEvent::Assignment(membership))) => assignment(&id, membership),
            Ok(Some(MemberEvent::Messages(messages))) => {
                // Only this task takes credit, and `next` answers at most `room`.
                if let Ok(taken) = credit.try_acquire_many(messages.len() as u32) {
                    taken.forget();
                }
                ServerFrame::GroupMessages {
                    id: id.clone(),
                    messages: GroupDelivered::all(messages, decoder.as_mut()).await,
                }
            }
            // A lasting refusal (a topic deleted, the member's owner refused): the
            // subscription ends with it.
            Err(error) => return end_with(&outbox, id, error),
        };
        if outbox.deliver(&frame).is_err() {
            return;
        }
    }
}

/// When a member without credit heartbeats: after the heartbeat interval, or at once when
/// this node applies a rebalance (so the `assignment` frame does not wait for credit).
async fn heartbeat_due(member: &MemberStream) {
    tokio::select! {
        () = tokio::time::sleep(member.heartbeat_interval()) => {}
        () = member.rebalanced() => {}
    }
}

fn assignment(id: &str, membership: Membership) -> ServerFrame {
    ServerFrame::Assignment {
        id: id.to_string(),
        assignment: membership.into(),
    }
}
