//! One socket's life: read client frames and act on them, keep the peer alive with pings,
//! and close with a code that says why (see `docs/websocket.md`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures::StreamExt;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, MissedTickBehavior};

use super::binary::{parse_binary_publish, BinaryPublish};
use super::frames::{
    parse_client_frame, ClientFrame, CreditFrame, FrameError, PublishFrame, ServerFrame,
    UnsubscribeFrame,
};
use super::outbox::{outbox, Outbox};
use super::publish::publish_frame;
use super::queue_subscription::SettleOp;
use super::running::Running;
use super::socket_auth::{frame_operation, truncate_at, SocketAuth};
use super::writer::write_frames;
use super::{group_subscription, queue_subscription, subscription};
use super::{WsState, CLOSED_TOTAL, CONNECTIONS, FRAMES_TOTAL, SUBSCRIPTIONS_REFUSED_TOTAL};
use crate::api::dto::decoded::ReadDecoder;
use crate::api::middleware::quota::quota_exceeded;
use crate::api::problem::ApiError;
use crate::api::server::connections::STALLED_CONNECTIONS_TOTAL;
use crate::broker::auth::access::TokenEnd;
use crate::broker::auth::operation::Operation;
use crate::broker::quota::{QuotaKey, QuotaKind};
use crate::broker::{ErrorCode, StreamKind, StreamMemory};
use crate::domain::record::RecordValue;

/// Close codes (RFC 6455 § 7.4.1).
pub mod close_code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const INVALID_PAYLOAD: u16 = 1007;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
    /// The token the socket was opened (or last `auth`ed) with expired.
    pub const TOKEN_EXPIRED: u16 = 4001;
}

/// The most `publish` frames of one socket being written at once; past it the socket's
/// frames wait to be read (TCP backpressure on the client).
const MAX_PUBLISHES_IN_FLIGHT: usize = 16;
/// How long a close frame may take to reach a peer before the connection is dropped.
pub(super) const CLOSE_WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// Why the read loop ended.
enum Ending {
    /// The server closes: this frame goes to the peer.
    Close(u16, String),
    /// The peer closed or vanished; `code` is what it sent, for metrics.
    PeerGone(u16),
}

/// Serves one upgraded socket until it closes. `_permit` holds the socket's place under the
/// node's connection limit.
pub async fn serve(
    socket: WebSocket,
    state: WsState,
    auth: SocketAuth,
    _permit: OwnedSemaphorePermit,
    quota_key: QuotaKey,
) {
    metrics::gauge!(CONNECTIONS).increment(1.0);
    let (sink, mut stream) = socket.split();
    let (outbox, receiver) = outbox(state.config.max_outbound_bytes);
    let outbox = outbox.charged_to(state.quotas.clone(), quota_key.clone());
    let (close_sender, close_receiver) = oneshot::channel();
    let writer = tokio::spawn(write_frames(sink, receiver, close_receiver));
    let mut connection = Connection {
        state: state.clone(),
        auth,
        outbox: outbox.clone(),
        subscriptions: HashMap::new(),
        memory: HashMap::new(),
        publishes: Arc::new(Semaphore::new(MAX_PUBLISHES_IN_FLIGHT)),
        quota_key,
    };
    let ending = connection.read_frames(&mut stream).await;
    // Readers stop before the close frame, so nothing follows it.
    connection.subscriptions.clear();
    let (code, server_closed) = match ending {
        Ending::Close(code, reason) => {
            let _ = close_sender.send(CloseFrame {
                code,
                reason: Utf8Bytes::from(reason),
            });
            (code, true)
        }
        Ending::PeerGone(code) => {
            // No close frame to write: the writer stops at once.
            drop(close_sender);
            (code, false)
        }
    };
    drop(connection);
    drop(outbox);
    metrics::counter!(CLOSED_TOTAL, "code" => code.to_string()).increment(1);
    // The close handshake, when the server closed: read (and drop) what the peer still sends
    // until its close, so the peer reads our close frame instead of a reset connection. A peer
    // that closed first is answered by the protocol layer; nothing to wait for.
    let drain = async {
        if !server_closed {
            return;
        }
        while let Some(Ok(message)) = stream.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_WRITE_DEADLINE, async {
        let (_written, ()) = tokio::join!(writer, drain);
    })
    .await;
    metrics::gauge!(CONNECTIONS).decrement(1.0);
}

struct Connection {
    state: WsState,
    auth: SocketAuth,
    outbox: Outbox,
    subscriptions: HashMap<String, Running>,
    /// What each subscription holds of the node's memory budget.
    memory: HashMap<String, StreamMemory>,
    publishes: Arc<Semaphore>,
    quota_key: QuotaKey,
}

impl Connection {
    async fn read_frames(
        &mut self,
        stream: &mut futures::stream::SplitStream<WebSocket>,
    ) -> Ending {
        let config = self.state.config.clone();
        let idle_timeout = Duration::from_millis(config.idle_timeout_ms);
        let mut ping = tokio::time::interval(Duration::from_millis(config.ping_interval_ms));
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ping.tick().await;
        let mut last_heard = Instant::now();
        let shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.stopping() => {
                    return Ending::Close(close_code::GOING_AWAY, "server shutting down".into());
                }
                end = self.auth.life.ended() => {
                    let reason = match end {
                        TokenEnd::Expired => {
                            "token expired: send an auth frame with a fresh token before it does".to_string()
                        }
                        TokenEnd::Revoked(reason) => format!("token no longer valid: {reason}"),
                    };
                    return Ending::Close(close_code::TOKEN_EXPIRED, truncate_reason(reason));
                }
                _ = self.outbox.overflowed() => {
                    return Ending::Close(close_code::POLICY_VIOLATION, self.overflow_reason());
                }
                _ = self.outbox.stalled(self.state.client_stall) => {
                    metrics::counter!(STALLED_CONNECTIONS_TOTAL, "transport" => "ws").increment(1);
                    return Ending::Close(
                        close_code::POLICY_VIOLATION,
                        format!(
                            "the client read nothing for {} ms while frames waited",
                            self.state.client_stall.as_millis()
                        ),
                    );
                }
                _ = ping.tick() => {
                    if last_heard.elapsed() >= idle_timeout {
                        return Ending::Close(
                            close_code::GOING_AWAY,
                            format!("idle timeout: nothing received for {} ms", config.idle_timeout_ms),
                        );
                    }
                    self.outbox.send_control(Message::Ping(Default::default()));
                }
                incoming = stream.next() => {
                    let message = match incoming {
                        None => return Ending::PeerGone(close_code::GOING_AWAY),
                        Some(Err(error)) => return read_error(error, config.max_frame_bytes),
                        Some(Ok(message)) => message,
                    };
                    last_heard = Instant::now();
                    match message {
                        Message::Text(text) => {
                            if let Some(ending) = self.on_text(text.as_str()).await {
                                return ending;
                            }
                        }
                        Message::Binary(frame) => {
                            if let Some(ending) = self.on_binary(frame).await {
                                return ending;
                            }
                        }
                        Message::Close(frame) => {
                            let code = frame.map_or(close_code::NORMAL, |frame| frame.code);
                            return Ending::PeerGone(code);
                        }
                        Message::Ping(_) | Message::Pong(_) => {}
                    }
                }
            }
        }
    }

    /// Acts on one text frame; `Some` ends the socket.
    async fn on_text(&mut self, text: &str) -> Option<Ending> {
        let frame = match parse_client_frame(text) {
            Ok(frame) => frame,
            Err(FrameError::NotJson(error)) => {
                metrics::counter!(FRAMES_TOTAL, "direction" => "in", "op" => "invalid")
                    .increment(1);
                return Some(Ending::Close(
                    close_code::INVALID_PAYLOAD,
                    truncate_reason(format!("the frame is not JSON: {error}")),
                ));
            }
            Err(FrameError::Refused(id, error)) => {
                metrics::counter!(FRAMES_TOTAL, "direction" => "in", "op" => "invalid")
                    .increment(1);
                return self.answer(ServerFrame::error(id, &error));
            }
        };
        metrics::counter!(FRAMES_TOTAL, "direction" => "in", "op" => frame.op()).increment(1);
        if let Some((id, operation)) = frame_operation(&frame) {
            if let Err(error) = self.auth.authorize(&operation).await {
                return self.answer(ServerFrame::error(Some(id.to_string().into()), &error));
            }
        }
        match frame {
            ClientFrame::Auth(frame) => {
                let answer = self.auth.renew(frame).await;
                self.answer(answer)
            }
            ClientFrame::Publish(publish) => self.publish(publish, None, text.len()).await,
            ClientFrame::Subscribe(subscribe) => {
                let id = subscribe.id.clone();
                let memory = match self.admit(&id, StreamKind::Topic) {
                    Ok(memory) => memory,
                    Err(answer) => return answer,
                };
                let planned = match subscription::plan(
                    &self.state.broker,
                    subscribe,
                    self.state.config.default_credit,
                )
                .await
                {
                    Ok(planned) => planned,
                    Err(error) => return self.answer(ServerFrame::error(Some(id.into()), &error)),
                };
                self.begin(id, memory, |outbox| Running::Topic(planned.start(outbox)))
            }
            ClientFrame::GroupSubscribe(subscribe) => {
                let id = subscribe.id.clone();
                let memory = match self.admit(&id, StreamKind::Group) {
                    Ok(memory) => memory,
                    Err(answer) => return answer,
                };
                let default_credit = self.state.config.default_credit;
                let owner = self
                    .auth
                    .principal
                    .as_ref()
                    .map(|principal| principal.subject.clone());
                let joined = match group_subscription::join(
                    &self.state.broker,
                    subscribe,
                    owner,
                    default_credit,
                )
                .await
                {
                    Ok(joined) => joined,
                    Err(error) => return self.answer(ServerFrame::error(Some(id.into()), &error)),
                };
                // The `ok` precedes the `assignment` frame and the messages.
                let id = joined.id.clone();
                self.begin(id, memory, |outbox| {
                    Running::Group(group_subscription::start(joined, outbox))
                })
            }
            ClientFrame::QueueSubscribe(subscribe) => {
                let id = subscribe.id.clone();
                let memory = match self.admit(&id, StreamKind::Queue) {
                    Ok(memory) => memory,
                    Err(answer) => return answer,
                };
                let default_credit = self.state.config.default_credit;
                let leases = match queue_subscription::open(
                    &self.state.broker,
                    &subscribe,
                    default_credit,
                ) {
                    Ok(leases) => leases,
                    Err(error) => return self.answer(ServerFrame::error(Some(id.into()), &error)),
                };
                let decoder = ReadDecoder::when_asked(&self.state.broker, subscribe.decode);
                self.begin(id.clone(), memory, |outbox| {
                    Running::Queue(queue_subscription::start(id, leases, decoder, outbox))
                })
            }
            ClientFrame::Commit(commit) => match self.subscriptions.get(&commit.id) {
                Some(Running::Group(running)) => {
                    running.commit(commit, &self.outbox);
                    None
                }
                Some(other) => {
                    let error = wrong_kind(&commit.id, "commit", "a group subscription", other);
                    self.answer(ServerFrame::error(Some(commit.id.into()), &error))
                }
                None => self.answer(unknown_subscription(commit.id)),
            },
            ClientFrame::Ack(frame) => self.settle(SettleOp::Ack, frame),
            ClientFrame::Nack(frame) => self.settle(SettleOp::Nack, frame),
            ClientFrame::Extend(frame) => self.settle(SettleOp::Extend, frame),
            ClientFrame::Unsubscribe(UnsubscribeFrame { id, .. }) => {
                self.memory.remove(&id);
                match self.subscriptions.remove(&id) {
                    Some(_) => self.answer(ServerFrame::Ok { id }),
                    None => self.answer(unknown_subscription(id)),
                }
            }
            ClientFrame::Credit(CreditFrame { id, messages, .. }) => {
                match self.subscriptions.get(&id) {
                    Some(running) => match running.grant(messages) {
                        Ok(()) => None,
                        Err(error) => self.answer(ServerFrame::error(Some(id.into()), &error)),
                    },
                    None => self.answer(unknown_subscription(id)),
                }
            }
        }
    }

    /// Acts on a binary frame: a `publish` whose values follow its JSON header (`binary.rs`).
    /// A malformed one is answered with an `error` frame, like a bad JSON frame.
    async fn on_binary(&mut self, frame: bytes::Bytes) -> Option<Ending> {
        let size = frame.len();
        match parse_binary_publish(frame) {
            Ok(BinaryPublish { frame, values }) => {
                metrics::counter!(FRAMES_TOTAL, "direction" => "in", "op" => "publish_binary")
                    .increment(1);
                let produce = Operation::Produce {
                    topic: &frame.topic,
                };
                if let Err(error) = self.auth.authorize(&produce).await {
                    return self.answer(ServerFrame::error(Some(frame.id.into()), &error));
                }
                self.publish(frame, Some(values), size).await
            }
            Err(FrameError::Refused(id, error)) => {
                metrics::counter!(FRAMES_TOTAL, "direction" => "in", "op" => "invalid")
                    .increment(1);
                self.answer(ServerFrame::error(id, &error))
            }
            Err(FrameError::NotJson(error)) => self.answer(ServerFrame::error(
                None,
                &ApiError::invalid_request(format!("invalid binary frame: {error}")),
            )),
        }
    }

    /// Writes a publish in the background (at most [`MAX_PUBLISHES_IN_FLIGHT`] at once) and
    /// answers it when it is done. `values` are a binary frame's values, in message order.
    /// A client over its produce quota is answered `quota_exceeded` (and its socket stays open).
    async fn publish(
        &mut self,
        publish: PublishFrame,
        values: Option<Vec<RecordValue>>,
        frame_bytes: usize,
    ) -> Option<Ending> {
        if let Err(throttled) =
            self.state
                .quotas
                .try_take(&self.quota_key, QuotaKind::ProduceBytes, frame_bytes as u64)
        {
            let error = quota_exceeded(&self.quota_key, &throttled);
            return self.answer(ServerFrame::error(Some(publish.id.into()), &error));
        }
        let Ok(permit) = self.publishes.clone().acquire_owned().await else {
            return None;
        };
        let broker = self.state.broker.clone();
        let outbox = self.outbox.clone();
        tokio::spawn(async move {
            let id = publish.id.clone();
            let answer = match publish_frame(&broker, publish, values).await {
                Ok(answer) => answer,
                Err(error) => ServerFrame::error(Some(id.into()), &error),
            };
            let _ = outbox.send(&answer);
            drop(permit);
        });
        None
    }

    /// Admits a new subscription `id` of `kind`: its id is free, the socket is under
    /// `ws.max_subscriptions`, and the node's memory budget has room for it (held while it
    /// lives). Otherwise the `error` answer (`Err`, `Some` when the socket then closes).
    fn admit(&self, id: &str, kind: StreamKind) -> Result<StreamMemory, Option<Ending>> {
        let refused = if self.subscriptions.contains_key(id) {
            ApiError::invalid_request(format!(
                "this socket already has a subscription with id '{id}'; unsubscribe it or pick another id"
            ))
        } else if self.subscriptions.len() >= self.state.config.max_subscriptions {
            metrics::counter!(SUBSCRIPTIONS_REFUSED_TOTAL).increment(1);
            ApiError::new(
                ErrorCode::TooManySubscriptions,
                format!(
                    "this socket has its maximum of {} subscriptions (ws.max_subscriptions); unsubscribe some or open another socket",
                    self.state.config.max_subscriptions
                ),
            )
        } else {
            match self.state.broker.streams().reserve_stream_memory(kind) {
                Ok(memory) => return Ok(memory),
                Err(error) => ApiError::from(error),
            }
        };
        Err(self.answer(ServerFrame::error(Some(id.to_string().into()), &refused)))
    }

    /// Answers `ok` to a `subscribe` and starts it, holding `memory` while it runs. The `ok`
    /// goes out before the subscription's task starts, so it precedes every frame of it.
    fn begin(
        &mut self,
        id: String,
        memory: StreamMemory,
        start: impl FnOnce(&Outbox) -> Running,
    ) -> Option<Ending> {
        if let Some(ending) = self.answer(ServerFrame::Ok { id: id.clone() }) {
            return Some(ending);
        }
        let running = start(&self.outbox);
        self.memory.insert(id.clone(), memory);
        self.subscriptions.insert(id, running);
        None
    }

    /// `ack`, `nack` or `extend` of a queue subscription's leases.
    fn settle(&self, op: SettleOp, frame: super::frames::SettleFrame) -> Option<Ending> {
        match self.subscriptions.get(&frame.id) {
            Some(Running::Queue(running)) => {
                running.settle(op, frame, &self.outbox);
                None
            }
            Some(other) => {
                let what = match op {
                    SettleOp::Ack => "ack",
                    SettleOp::Nack => "nack",
                    SettleOp::Extend => "extend",
                };
                let error = wrong_kind(&frame.id, what, "a queue subscription", other);
                self.answer(ServerFrame::error(Some(frame.id.into()), &error))
            }
            None => self.answer(unknown_subscription(frame.id)),
        }
    }

    /// Queues an answer; `Some` when the queue is over its hard limit (the socket then
    /// closes).
    fn answer(&self, frame: ServerFrame) -> Option<Ending> {
        match self.outbox.send(&frame) {
            Ok(()) => None,
            Err(_) => Some(Ending::Close(
                close_code::POLICY_VIOLATION,
                self.overflow_reason(),
            )),
        }
    }

    fn overflow_reason(&self) -> String {
        format!(
            "the client sends but does not read: over {} bytes of frames queued for it",
            self.state.config.max_outbound_bytes.saturating_mul(2)
        )
    }
}

fn wrong_kind(id: &str, op: &str, wanted: &str, running: &Running) -> ApiError {
    ApiError::invalid_request(format!(
        "{op} applies to {wanted}; '{id}' is {}",
        running.kind()
    ))
}

fn unknown_subscription(id: String) -> ServerFrame {
    let error = ApiError::new(
        ErrorCode::NotFound,
        format!("this socket has no subscription with id '{id}'"),
    );
    ServerFrame::error(Some(id.into()), &error)
}

/// A read error: a frame over the size limit closes with 1009, anything else means the peer
/// is gone.
fn read_error(error: axum::Error, max_frame_bytes: usize) -> Ending {
    let text = error.to_string();
    if text.contains("Space limit exceeded")
        || text.contains("too long")
        || text.contains("too big")
    {
        return Ending::Close(
            close_code::TOO_BIG,
            format!("the frame is over the limit of {max_frame_bytes} bytes"),
        );
    }
    tracing::debug!(error = %text, "WebSocket read failed");
    Ending::PeerGone(1006)
}

/// A close reason must fit in a control frame (123 bytes of UTF-8).
fn truncate_reason(reason: String) -> String {
    truncate_at(reason, 120)
}
