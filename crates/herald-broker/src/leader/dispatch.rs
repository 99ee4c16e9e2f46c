//! The sending side: runs an operation on its group's leader, here or over the internal RPC,
//! following leadership while it moves; or on one given node.
//!
//! A request is retried only when it was certainly not done: refused here as not leading
//! (leadership moved under it), a call that certainly never reached the other node, or an
//! answer "not leader". Anything else (an unknown outcome included) is answered as it is, so
//! an append is never written twice by a retry and a queue command never applied twice.
//!
//! Calls travel on the RPC's client lane (the lane of the broker service), apart from raft. A
//! call is a future of the client's own request: when the client goes away (or its deadline
//! passes) the future is dropped, the RPC cancels the call, and the leader aborts its work.

use std::time::Duration;

use tokio::time::Instant;

use super::wire::{self, WireError};
use super::{LeaderOperation, NodeOperation};
use crate::broker_core::Core;
use crate::{BrokerError, BrokerResult};
use herald_cluster::{Route, BROKER_SERVICE};

/// How long past its own wait a forwarded operation (a long poll) may take before the caller
/// gives up on it.
const FORWARD_SLACK: Duration = Duration::from_secs(5);

/// How long to pause before another try at the (possibly new) leader.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// One attempt's verdict: done, or worth another try at the (possibly new) leader.
enum Attempt<T> {
    Done(BrokerResult<T>),
    Retry,
}

impl Core {
    /// Runs `operation` on this node when it leads the operation's group, or sends it to the
    /// leader; follows leadership changes until the leader wait (`leader_wait`) is over, then
    /// answers `no_leader`. `service` runs it when this node leads.
    pub(crate) async fn run_on_leader<Op: LeaderOperation>(
        &self,
        service: &Op::Service,
        mut operation: Op,
    ) -> BrokerResult<Op::Reply> {
        let group = operation.group();
        let deadline = Instant::now() + self.options.leader_wait;
        loop {
            let attempt = match self.cluster().routing().route(group, deadline).await? {
                Route::Local(replica) => match operation.run_here(service, replica).await {
                    // Refused before anything was done: leadership moved under us.
                    Err(BrokerError::NoLeader(_)) => Attempt::Retry,
                    other => Attempt::Done(other),
                },
                Route::Remote(node) => self.send_to_leader(&mut operation, node).await,
            };
            match attempt {
                Attempt::Done(result) => return result,
                Attempt::Retry if Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Attempt::Retry => {
                    return Err(BrokerError::NoLeader(format!("partition group {group}")))
                }
            }
        }
    }

    /// One try at `node`, believed to lead the operation's group.
    async fn send_to_leader<Op: LeaderOperation>(
        &self,
        operation: &mut Op,
        node: u64,
    ) -> Attempt<Op::Reply> {
        let group = operation.group();
        // Nothing was sent when either fails; a local fault, logged where it is answered.
        if let Err(error) = operation.before_sending() {
            return Attempt::Done(Err(error));
        }
        let body = match wire::encode_request(Op::KIND, &*operation) {
            Ok(body) => body,
            Err(error) => {
                return Attempt::Done(Err(BrokerError::Internal(format!(
                    "encoding a forwarded request (not sent): {error}"
                ))))
            }
        };
        let timeout = self.options.leader_wait + operation.wait() + FORWARD_SLACK;
        let answer = match self
            .cluster()
            .routing()
            .call_node(node, BROKER_SERVICE, body, timeout)
            .await
        {
            Ok(answer) => answer,
            // Certainly not delivered: safe to try the leader again, or a new one.
            Err(error) if !error.maybe_delivered() => {
                self.cluster().routing().forget_leader(group, node);
                return Attempt::Retry;
            }
            Err(error) => {
                tracing::warn!(group = group.get(), node, %error, "a forwarded request's outcome is unknown");
                return Attempt::Done(Err(BrokerError::Timeout(format!(
                    "the partition leader (node {node}) did not answer; the request may or may not have been applied"
                ))));
            }
        };
        match wire::decode_reply::<Op::Reply>(Op::KIND, &answer) {
            Ok(Ok(reply)) => Attempt::Done(Ok(reply)),
            Ok(Err(WireError::NotLeader)) => {
                self.cluster().routing().forget_leader(group, node);
                Attempt::Retry
            }
            Ok(Err(error)) => Attempt::Done(Err(error.into_broker(group))),
            Err(error) => Attempt::Done(Err(error)),
        }
    }

    /// Runs `operation` on `node`, once, within `timeout`.
    pub(crate) async fn run_on_node<Op: NodeOperation>(
        &self,
        node: u64,
        operation: &Op,
        timeout: Duration,
    ) -> BrokerResult<Op::Reply> {
        let body = wire::encode_request(Op::KIND, operation).map_err(|error| {
            BrokerError::Internal(format!(
                "encoding a forwarded {:?} (not sent): {error}",
                Op::KIND
            ))
        })?;
        let answer = self
            .cluster()
            .routing()
            .call_node(node, BROKER_SERVICE, body, timeout)
            .await
            .map_err(|error| operation.unanswered(node, &error))?;
        match wire::decode_reply::<Op::Reply>(Op::KIND, &answer)? {
            Ok(reply) => Ok(reply),
            Err(WireError::Unavailable(reason)) => Err(BrokerError::Unavailable(reason)),
            Err(WireError::UnknownOperation(tag)) => Err(BrokerError::Unavailable(format!(
                "node {node} does not know operation kind {tag} (a node of another version); nothing was done"
            ))),
            Err(error) => Err(BrokerError::Internal(format!(
                "node {node} failed a forwarded {:?}: {error:?}",
                Op::KIND
            ))),
        }
    }
}
