//! Group member streams and queue lease streams that ride out leader changes on their own, so
//! that every transport (server-sent events, WebSocket) only forwards what they hand over.
//!
//! Each wraps the broker's stream with its [`Retry`]: an answer resets the backoff, an empty
//! answer is "nothing yet", a transient error (see [`is_transient`](super::retry::is_transient))
//! is waited out with the stream's state kept (the member's cursor and generation, the leases
//! held) and is "nothing yet" too; any other error lasts and ends the stream.
//!
//! Two ways to ask: `next` waits until there is something to deliver (a transport with nothing
//! to do between attempts), `attempt` asks once (a transport that applies its own flow control
//! before each attempt, such as a socket's credit and outbound queue).

use std::sync::Arc;

use super::retry::Retry;
use crate::subscriptions::{LeaseStream, PulledMessage};
use crate::{BrokerResult, MemberEvent, MemberStream};

impl Retry {
    /// One attempt's answer as a resuming stream hands it on: `Ok(Some)` to deliver, `Ok(None)`
    /// for nothing yet (an empty answer, or a transient error after its pause), `Err` when the
    /// error lasts.
    async fn resolve<T>(
        &mut self,
        answer: BrokerResult<T>,
        empty: impl FnOnce(&T) -> bool,
    ) -> BrokerResult<Option<T>> {
        match answer {
            Ok(item) => {
                self.succeeded();
                Ok((!empty(&item)).then_some(item))
            }
            Err(error) if self.after(&error).await => Ok(None),
            Err(error) => Err(error),
        }
    }
}

fn no_messages(event: &MemberEvent) -> bool {
    matches!(event, MemberEvent::Messages(messages) if messages.is_empty())
}

/// A group member that resumes across leader changes of its group's coordinator and of the
/// partitions it reads; it leaves the group when dropped.
pub struct ResumingMember {
    member: MemberStream,
    retry: Retry,
}

impl ResumingMember {
    pub fn new(member: MemberStream) -> ResumingMember {
        ResumingMember {
            member,
            retry: Retry::new("group"),
        }
    }

    /// The member itself (its membership, its heartbeat interval, a handle for commits).
    pub fn member(&self) -> &MemberStream {
        &self.member
    }

    /// The next assignment or messages (at most `max_messages`), waiting out empty polls and
    /// leader changes; `Err` only for a lasting error.
    pub async fn next(&mut self, max_messages: usize) -> BrokerResult<MemberEvent> {
        loop {
            if let Some(event) = self.attempt(max_messages).await? {
                return Ok(event);
            }
        }
    }

    /// One poll of at most `max_messages`; `Ok(None)` when there is nothing yet.
    pub async fn attempt(&mut self, max_messages: usize) -> BrokerResult<Option<MemberEvent>> {
        let answer = self.member.next(max_messages).await;
        self.retry.resolve(answer, no_messages).await
    }

    /// One heartbeat (a member without room for messages keeps its session and learns of
    /// rebalances); `Ok(Some)` only for a new assignment.
    pub async fn heartbeat(&mut self) -> BrokerResult<Option<MemberEvent>> {
        let answer = self
            .member
            .heartbeat()
            .await
            .map(|event| event.unwrap_or(MemberEvent::Messages(Vec::new())));
        self.retry.resolve(answer, no_messages).await
    }
}

/// A queue subscription's lease stream that resumes across leader changes of the
/// subscription's partitions; dropping the last handle nacks the leases it holds.
pub struct ResumingLeases {
    leases: Arc<LeaseStream>,
    retry: Retry,
}

impl ResumingLeases {
    /// Resumes `leases`, which settles may share.
    pub fn new(leases: Arc<LeaseStream>) -> ResumingLeases {
        ResumingLeases {
            leases,
            retry: Retry::new("queue"),
        }
    }

    pub fn leases(&self) -> &LeaseStream {
        &self.leases
    }

    /// The next leased messages, waiting out empty pulls and leader changes; `Err` only for a
    /// lasting error.
    pub async fn next(&mut self) -> BrokerResult<Vec<PulledMessage>> {
        loop {
            if let Some(pulled) = self.attempt().await? {
                return Ok(pulled);
            }
        }
    }

    /// One pull; `Ok(None)` when there is nothing yet.
    pub async fn attempt(&mut self) -> BrokerResult<Option<Vec<PulledMessage>>> {
        let answer = self.leases.next().await;
        self.retry.resolve(answer, Vec::is_empty).await
    }
}
