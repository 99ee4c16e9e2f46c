//! Any node serves any request: appends and reads for a partition led by another node travel
//! to that leader over the internal RPC (the cluster's broker service), and its answer comes
//! back as if served here.
//!
//! What crosses the wire is already compact: an append carries its records in the stored
//! batch layout (uncompressed; the leader merges and compresses), a read answers stored
//! batches as they are on disk. While leadership moves, a request follows the new leader until
//! its deadline; it is retried only when it certainly was not written.
//!
//! Forwarded calls travel on the RPC's client lane, apart from raft. A forwarded call is a
//! future of the client's own request: when the client goes away (or its deadline passes) the
//! future is dropped, the RPC cancels the call, and the leader aborts its work.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::appender::AppendRequest;
use super::forward_wire::{ForwardReply, ForwardRequest, WireCounts, WireError, WireStats};
use super::idempotence::{Landing, OnceClaim};
use super::queue::stats::{stats_here, QueueStats};
use super::queue::wait::wait_here;
use super::{Broker, BrokerError, BrokerResult, OffsetSpec};
use crate::cluster::{BrokerService, Route, BROKER_SERVICE};
use crate::domain::batch::{decode_batch, decode_header, encode_batch, ProducerStamp};
use crate::domain::subscriptions::RetryPolicy;
use crate::domain::{Compression, Record};
use crate::raft::{
    PartitionReplica, QueueCommand, QueueCounts, QueueOutcome, ReadLimits, StoredBatch,
};

pub(super) use super::forward_wire::RawRead;

/// Gauge of requests other nodes forwarded here that are being served right now (long polls
/// included); a forwarded call its sender gave up on is aborted and leaves it.
pub const FORWARDED_IN_FLIGHT: &str = "herald_forwarded_requests_in_flight";

/// How long past its own wait a forwarded long poll may take before the caller gives up.
const FORWARD_SLACK: Duration = Duration::from_secs(5);

/// One attempt's verdict: done, or worth another try at the (possibly new) leader.
enum Attempt<T> {
    Done(BrokerResult<T>),
    Retry,
}

impl Broker {
    /// Runs `local` on this node when it leads `group`, or sends `request` to the leader;
    /// follows leadership changes until the leader wait is over.
    async fn on_leader<T, L, F>(
        &self,
        group: u64,
        request: impl Fn() -> BrokerResult<ForwardRequest>,
        wait: Duration,
        local: L,
        unwrap: impl Fn(ForwardReply) -> Option<Result<T, WireError>>,
    ) -> BrokerResult<T>
    where
        L: Fn(Arc<PartitionReplica>) -> F,
        F: std::future::Future<Output = BrokerResult<T>>,
    {
        let deadline = Instant::now() + self.inner.options.leader_wait;
        loop {
            let route = self.cluster().route(group, deadline).await?;
            let attempt = match route {
                Route::Local(replica) => match local(replica).await {
                    // Refused before anything was written: leadership moved under us.
                    Err(BrokerError::NoLeader(_)) => Attempt::Retry,
                    other => Attempt::Done(other),
                },
                Route::Remote(node) => match request() {
                    Ok(request) => {
                        self.forward_once(group, node, &request, wait, &unwrap)
                            .await
                    }
                    // Nothing was sent.
                    Err(error) => Attempt::Done(Err(error)),
                },
            };
            match attempt {
                Attempt::Done(result) => return result,
                Attempt::Retry if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Attempt::Retry => {
                    return Err(BrokerError::NoLeader(format!("partition group {group}")))
                }
            }
        }
    }

    async fn forward_once<T>(
        &self,
        group: u64,
        node: u64,
        request: &ForwardRequest,
        wait: Duration,
        unwrap: &impl Fn(ForwardReply) -> Option<Result<T, WireError>>,
    ) -> Attempt<T> {
        let body = match postcard::to_stdvec(request) {
            Ok(body) => Bytes::from(body),
            // A local fault, logged where it is answered: nothing was sent.
            Err(error) => {
                return Attempt::Done(Err(BrokerError::Internal(format!(
                    "encoding a forwarded request (not sent): {error}"
                ))))
            }
        };
        let timeout = self.inner.options.leader_wait + wait + FORWARD_SLACK;
        let answer = match self
            .cluster()
            .call_node(node, BROKER_SERVICE, body, timeout)
            .await
        {
            Ok(answer) => answer,
            // Certainly not delivered: safe to try the leader again, or a new one.
            Err(error) if !error.maybe_delivered() => {
                self.cluster().forget_leader(group, node);
                return Attempt::Retry;
            }
            Err(error) => {
                tracing::warn!(group, node, %error, "a forwarded request's outcome is unknown");
                return Attempt::Done(Err(BrokerError::Timeout(format!(
                    "the partition leader (node {node}) did not answer; the request may or may not have been applied"
                ))));
            }
        };
        let reply = match postcard::from_bytes::<ForwardReply>(&answer) {
            Ok(reply) => reply,
            Err(error) => {
                return Attempt::Done(Err(BrokerError::Internal(format!(
                    "decoding a forwarded answer: {error}"
                ))))
            }
        };
        match unwrap(reply) {
            Some(Ok(value)) => Attempt::Done(Ok(value)),
            Some(Err(WireError::NotLeader)) => {
                self.cluster().forget_leader(group, node);
                Attempt::Retry
            }
            Some(Err(error)) => Attempt::Done(Err(error.into_broker(group))),
            None => Attempt::Done(Err(BrokerError::Internal(
                "a forwarded request got the wrong kind of answer".into(),
            ))),
        }
    }

    /// Appends `records` to the partition of `group` on its leader; answers the base offset
    /// once a quorum has them, or with `leader_ack` once the leader has them durable. Not
    /// proposed by `deadline`, they are never written.
    pub(super) async fn append_records(
        &self,
        group: u64,
        records: Vec<Record>,
        compression: Compression,
        leader_ack: bool,
        deadline: Instant,
    ) -> BrokerResult<u64> {
        match self
            .append_on_leader(group, records, compression, leader_ack, None, deadline)
            .await?
        {
            Landing::Appended { base_offset } => Ok(base_offset),
            other => Err(BrokerError::Internal(format!(
                "an ordinary append landed as {other:?}"
            ))),
        }
    }

    /// Appends an idempotent request's `records` (one partition's share, stamped with
    /// `stamp`) on the leader of `group`, alone, through the partition's dedup window;
    /// answers what the window decided. Retried at a new leader only when certainly not
    /// written, like any append; a retry the window saw before is answered as a duplicate.
    pub(super) async fn append_once(
        &self,
        group: u64,
        records: Vec<Record>,
        compression: Compression,
        claim: OnceClaim,
        stamp: ProducerStamp,
        deadline: Instant,
    ) -> BrokerResult<Landing> {
        let once = Some((claim, stamp));
        self.append_on_leader(group, records, compression, false, once, deadline)
            .await
    }

    async fn append_on_leader(
        &self,
        group: u64,
        records: Vec<Record>,
        compression: Compression,
        leader_ack: bool,
        once: Option<(OnceClaim, ProducerStamp)>,
        deadline: Instant,
    ) -> BrokerResult<Landing> {
        // Encoded once for the wire only when the leader is elsewhere.
        let wire = std::sync::OnceLock::new();
        let records = Arc::new(records);
        let stamp = once
            .as_ref()
            .map_or(ProducerStamp::NONE, |(_, stamp)| *stamp);
        let request = || {
            let batch = wire.get_or_init(|| wire_batch(&records, stamp)).clone()?;
            Ok(match &once {
                Some((claim, _)) => ForwardRequest::AppendOnce {
                    group,
                    batch,
                    compression,
                    claim: claim.clone(),
                },
                None => ForwardRequest::Append {
                    group,
                    batch,
                    compression,
                    leader_ack,
                },
            })
        };
        let local = |replica: Arc<PartitionReplica>| {
            let records = (*records).clone();
            self.append_here(
                replica,
                records,
                compression,
                leader_ack,
                once.clone(),
                deadline,
            )
        };
        self.on_leader(group, request, Duration::ZERO, local, |reply| match reply {
            ForwardReply::Appended(result) => {
                Some(result.map(|base_offset| Landing::Appended { base_offset }))
            }
            ForwardReply::AppendedOnce(result) => Some(result),
            _ => None,
        })
        .await
    }

    async fn append_here(
        &self,
        replica: Arc<PartitionReplica>,
        records: Vec<Record>,
        compression: Compression,
        leader_ack: bool,
        once: Option<(OnceClaim, ProducerStamp)>,
        deadline: Instant,
    ) -> BrokerResult<Landing> {
        let request = AppendRequest {
            records,
            stored: None,
            compression,
            leader_ack,
            once,
            deadline,
        };
        let appender = self.inner.appenders.for_group(replica.group());
        appender.append(replica, request).await
    }

    /// Appends `batch` (in the stored layout, checked) to the partition of `group` on its
    /// leader, alone and byte for byte; answers its base offset once a quorum has it, or with
    /// `leader_ack` once the leader has it durable. Not proposed by `deadline`, it is never
    /// written.
    pub(super) async fn append_stored(
        &self,
        group: u64,
        batch: Bytes,
        leader_ack: bool,
        deadline: Instant,
    ) -> BrokerResult<u64> {
        let request = || {
            Ok(ForwardRequest::AppendStored {
                group,
                batch: batch.clone(),
                leader_ack,
            })
        };
        let local = |replica: Arc<PartitionReplica>| {
            self.append_stored_here(replica, batch.clone(), leader_ack, deadline)
        };
        self.on_leader(group, request, Duration::ZERO, local, |reply| match reply {
            ForwardReply::Appended(result) => Some(result),
            _ => None,
        })
        .await
    }

    async fn append_stored_here(
        &self,
        replica: Arc<PartitionReplica>,
        batch: Bytes,
        leader_ack: bool,
        deadline: Instant,
    ) -> BrokerResult<u64> {
        let request = AppendRequest {
            records: Vec::new(),
            stored: Some(batch),
            compression: Compression::None,
            leader_ack,
            once: None,
            deadline,
        };
        let appender = self.inner.appenders.for_group(replica.group());
        match appender.append(replica, request).await? {
            Landing::Appended { base_offset } => Ok(base_offset),
            other => Err(BrokerError::Internal(format!(
                "a stored batch landed as {other:?}"
            ))),
        }
    }

    /// Reads stored batches of `group` on its leader.
    pub(super) async fn read_batches(
        &self,
        group: u64,
        from: OffsetSpec,
        limits: ReadLimits,
        max_wait: Duration,
    ) -> BrokerResult<RawRead> {
        let request = || {
            Ok(ForwardRequest::Read {
                group,
                from: from.into(),
                max_records: limits.max_records,
                max_bytes: limits.max_bytes,
                max_wait_ms: max_wait.as_millis() as u64,
            })
        };
        let local =
            |replica: Arc<PartitionReplica>| self.read_here(replica, from, limits, max_wait);
        self.on_leader(group, request, max_wait, local, |reply| match reply {
            ForwardReply::Read(result) => Some(result),
            _ => None,
        })
        .await
    }

    /// The first offset of `group` at or after `timestamp`, asked of its leader.
    pub(super) async fn find_offset(&self, group: u64, timestamp: i64) -> BrokerResult<u64> {
        let request = || Ok(ForwardRequest::OffsetForTimestamp { group, timestamp });
        let local = |replica: Arc<PartitionReplica>| async move {
            let watermarks = replica.watermarks();
            let found = replica.offset_for_timestamp(timestamp).await?;
            Ok(found
                .map(|offset| offset.max(watermarks.log_start_offset))
                .unwrap_or(watermarks.high_watermark))
        };
        self.on_leader(group, request, Duration::ZERO, local, |reply| match reply {
            ForwardReply::Offset(result) => Some(result),
            _ => None,
        })
        .await
    }

    /// Applies a queue command on the leader of `group`. Not retried once sent: a lease or
    /// an ack whose answer was lost is as if the lease expired (at-least-once).
    pub(super) async fn queue_on_leader(
        &self,
        group: u64,
        command: QueueCommand,
    ) -> BrokerResult<QueueOutcome> {
        let request = || {
            Ok(ForwardRequest::Queue {
                group,
                command: command.clone(),
            })
        };
        let local = |replica: Arc<PartitionReplica>| {
            let command = command.clone();
            async move { Ok(self.queue_here(replica, command).await?.0) }
        };
        self.on_leader(group, request, Duration::ZERO, local, |reply| match reply {
            ForwardReply::Queue(result) => Some(result),
            _ => None,
        })
        .await
    }

    /// Like [`Self::queue_on_leader`], and when this node leads, also the batches the lease's
    /// facts were read from (empty from another node's leader: they are not sent back).
    pub(super) async fn lease_on_leader(
        &self,
        group: u64,
        command: QueueCommand,
    ) -> BrokerResult<(QueueOutcome, Vec<StoredBatch>)> {
        let request = || {
            Ok(ForwardRequest::Queue {
                group,
                command: command.clone(),
            })
        };
        let local = |replica: Arc<PartitionReplica>| self.queue_here(replica, command.clone());
        self.on_leader(group, request, Duration::ZERO, local, |reply| match reply {
            ForwardReply::Queue(result) => Some(result.map(|outcome| (outcome, Vec::new()))),
            _ => None,
        })
        .await
    }

    async fn queue_here(
        &self,
        replica: Arc<PartitionReplica>,
        mut command: QueueCommand,
    ) -> BrokerResult<(QueueOutcome, Vec<StoredBatch>)> {
        // The leader's clock decides deadlines, whichever node the puller asked.
        command.set_now(super::topics::now_ms());
        let batches = self.fill_lease_facts(&replica, &mut command).await?;
        Ok((replica.queue(command).await?, batches))
    }

    /// A subscription's counts and oldest unacked age on the partition of `group`, from its
    /// leader.
    pub(super) async fn queue_stats_on_leader(
        &self,
        group: u64,
        subscription: u64,
    ) -> BrokerResult<QueueStats> {
        let request = || {
            Ok(ForwardRequest::QueueStats {
                group,
                subscription,
            })
        };
        let local = |replica: Arc<PartitionReplica>| async move {
            stats_here(&replica, subscription).await
        };
        self.on_leader(group, request, Duration::ZERO, local, |reply| match reply {
            ForwardReply::QueueStats(result) => Some(result.map(|wire| {
                let (backlog, in_flight, delayed, dead_lettered) = wire.counts;
                QueueStats {
                    counts: QueueCounts {
                        backlog,
                        in_flight,
                        delayed,
                        dead_lettered,
                    },
                    oldest_unacked_age_ms: wire.oldest_unacked_age_ms,
                }
            })),
            _ => None,
        })
        .await
    }

    /// Waits on the leader of `group` (up to `max_wait`) until a lease of `subscription` could
    /// get something there (see [`super::queue::wait`]).
    pub(super) async fn queue_wait_on_leader(
        &self,
        group: u64,
        subscription: u64,
        retry: RetryPolicy,
        max_wait: Duration,
    ) -> BrokerResult<()> {
        let request = || {
            Ok(ForwardRequest::QueueWait {
                group,
                subscription,
                retry,
                max_wait_ms: max_wait.as_millis() as u64,
            })
        };
        let local = |replica: Arc<PartitionReplica>| async move {
            wait_here(&replica, subscription, &retry, max_wait).await;
            Ok(())
        };
        self.on_leader(group, request, max_wait, local, |reply| match reply {
            ForwardReply::QueueWaited(result) => Some(result),
            _ => None,
        })
        .await
    }

    /// Serves a request another node forwarded here; refuses it when this node does not lead
    /// the group (the sender then finds the leader).
    async fn serve_forwarded(&self, body: Bytes) -> Result<Bytes, String> {
        let request: ForwardRequest = postcard::from_bytes(&body)
            .map_err(|error| format!("bad forwarded request: {error}"))?;
        // The sender's deadline does not travel; an append gets the same time from arrival.
        let append_deadline = Instant::now() + self.inner.options.produce_timeout;
        let leading = |group: u64| {
            self.cluster()
                .local_replica(group)
                .filter(|replica| replica.is_leader())
        };
        let reply = match request {
            ForwardRequest::Append {
                group,
                batch,
                compression,
                leader_ack,
            } => ForwardReply::Appended(match leading(group) {
                None => Err(WireError::NotLeader),
                Some(replica) => match decode_batch(&batch) {
                    Ok((_, records)) => self
                        .append_here(
                            replica,
                            records,
                            compression,
                            leader_ack,
                            None,
                            append_deadline,
                        )
                        .await
                        .and_then(|landing| match landing {
                            Landing::Appended { base_offset } => Ok(base_offset),
                            other => Err(BrokerError::Internal(format!(
                                "an ordinary append landed as {other:?}"
                            ))),
                        })
                        .map_err(WireError::from),
                    Err(error) => Err(WireError::Failed(format!("bad forwarded batch: {error}"))),
                },
            }),
            ForwardRequest::AppendOnce {
                group,
                batch,
                compression,
                claim,
            } => ForwardReply::AppendedOnce(match leading(group) {
                None => Err(WireError::NotLeader),
                Some(replica) => match decode_batch(&batch) {
                    Ok((header, records)) => self
                        .append_here(
                            replica,
                            records,
                            compression,
                            false,
                            Some((claim, header.producer)),
                            append_deadline,
                        )
                        .await
                        .map_err(WireError::from),
                    Err(error) => Err(WireError::Failed(format!("bad forwarded batch: {error}"))),
                },
            }),
            ForwardRequest::AppendStored {
                group,
                batch,
                leader_ack,
            } => ForwardReply::Appended(match leading(group) {
                None => Err(WireError::NotLeader),
                // The sending node checked the batch; its CRC still guards the hop.
                Some(replica) => match decode_header(&batch) {
                    Ok(_) => self
                        .append_stored_here(replica, batch, leader_ack, append_deadline)
                        .await
                        .map_err(WireError::from),
                    Err(error) => Err(WireError::Failed(format!("bad forwarded batch: {error}"))),
                },
            }),
            ForwardRequest::Read {
                group,
                from,
                max_records,
                max_bytes,
                max_wait_ms,
            } => ForwardReply::Read(match leading(group) {
                None => Err(WireError::NotLeader),
                Some(replica) => {
                    let limits = ReadLimits {
                        max_records,
                        max_bytes: max_bytes.min(self.inner.options.fetch_max_bytes),
                    };
                    let wait = Duration::from_millis(max_wait_ms).min(super::fetch::MAX_WAIT);
                    self.read_here(replica, from.into(), limits, wait)
                        .await
                        .map_err(WireError::from)
                }
            }),
            ForwardRequest::Queue { group, command } => ForwardReply::Queue(match leading(group) {
                None => Err(WireError::NotLeader),
                Some(replica) => self
                    .queue_here(replica, command)
                    .await
                    .map(|(outcome, _)| outcome)
                    .map_err(WireError::from),
            }),
            ForwardRequest::QueueStats {
                group,
                subscription,
            } => ForwardReply::QueueStats(match leading(group) {
                None => Err(WireError::NotLeader),
                Some(replica) => stats_here(&replica, subscription)
                    .await
                    .map(|stats| WireStats {
                        counts: wire_counts(stats.counts),
                        oldest_unacked_age_ms: stats.oldest_unacked_age_ms,
                    })
                    .map_err(WireError::from),
            }),
            ForwardRequest::QueueWait {
                group,
                subscription,
                retry,
                max_wait_ms,
            } => ForwardReply::QueueWaited(match leading(group) {
                None => Err(WireError::NotLeader),
                Some(replica) => {
                    let wait = Duration::from_millis(max_wait_ms);
                    wait_here(&replica, subscription, &retry, wait).await;
                    Ok(())
                }
            }),
            ForwardRequest::Reply {
                instance,
                correlation_id,
                json,
                value,
                headers,
            } => ForwardReply::Replied(Ok(self.inner.requests.deliver_here(
                instance,
                super::requests::ids::CorrelationId(correlation_id),
                super::requests::Reply {
                    value: if json {
                        crate::domain::RecordValue::Json(value)
                    } else {
                        crate::domain::RecordValue::Bytes(value)
                    },
                    headers,
                },
            ))),
            ForwardRequest::OffsetForTimestamp { group, timestamp } => {
                ForwardReply::Offset(match leading(group) {
                    None => Err(WireError::NotLeader),
                    Some(_) => self
                        .find_offset(group, timestamp)
                        .await
                        .map_err(WireError::from),
                })
            }
        };
        postcard::to_stdvec(&reply)
            .map(Bytes::from)
            .map_err(|error| format!("encoding a forwarded answer: {error}"))
    }
}

fn wire_counts(counts: QueueCounts) -> WireCounts {
    (
        counts.backlog,
        counts.in_flight,
        counts.delayed,
        counts.dead_lettered,
    )
}

/// The records of a forwarded append in the stored batch layout, uncompressed (the leader
/// compresses). Records that cannot be encoded fail the request here, before anything is sent:
/// forwarding an empty batch instead would answer success for messages never written.
fn wire_batch(records: &[Record], stamp: ProducerStamp) -> BrokerResult<Bytes> {
    encode_batch(records, Compression::None, stamp).map_err(|error| {
        BrokerError::Internal(format!(
            "encoding a forwarded append's records (not sent): {error}"
        ))
    })
}

/// The broker as the cluster's broker service.
pub(super) struct ForwardedRequests(pub(super) std::sync::Weak<super::BrokerInner>);

impl BrokerService for ForwardedRequests {
    fn handle(&self, _from: u64, body: Bytes) -> BoxFuture<'static, Result<Bytes, String>> {
        let broker = self.0.upgrade().map(|inner| Broker { inner });
        Box::pin(async move {
            let _in_flight = InFlight::enter();
            match broker {
                Some(broker) => broker.serve_forwarded(body).await,
                None => Err("the broker is shutting down".to_string()),
            }
        })
    }
}

/// Counts one forwarded request in [`FORWARDED_IN_FLIGHT`] until it ends or is aborted.
struct InFlight;

impl InFlight {
    fn enter() -> InFlight {
        metrics::gauge!(FORWARDED_IN_FLIGHT).increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!(FORWARDED_IN_FLIGHT).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_that_cannot_be_encoded_fail_the_append_instead_of_forwarding_an_empty_batch() {
        // No records: the batch layout cannot hold them (the same path as any encoding error).
        let error = wire_batch(&[], ProducerStamp::NONE).unwrap_err();
        assert_eq!(
            error.code(),
            super::super::ErrorCode::InternalError,
            "{error}"
        );
        assert!(error.to_string().contains("not sent"), "{error}");
    }

    #[test]
    fn encodable_records_travel_whole() {
        let records = vec![Record {
            offset_delta: 0,
            timestamp: 1,
            key: None,
            value: crate::domain::RecordValue::Bytes(Bytes::from_static(b"v")),
            headers: Vec::new(),
        }];
        let batch = wire_batch(&records, ProducerStamp::NONE).unwrap();
        let (_, decoded) = decode_batch(&batch).unwrap();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].value, records[0].value);
    }
}
