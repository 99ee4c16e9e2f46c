//! `GET /v1/topics/{topic}/events`: a topic's messages as server-sent events.
//!
//! The handler checks the request, takes one of the node's stream slots and opens a broker
//! [`Tail`]; the body then turns each message the tail hands over into an event whose `id` is
//! the tail's resume token. Reading, following leaders and resume live in `broker::stream`,
//! which the WebSocket transport shares. The stream machinery here (slots, keepalive, the
//! `shutdown` event, metrics) also serves a group member's and a queue subscription's
//! streams (`group_events`, `subscription_events`) through [`EventSource`].

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::dto::topic::check_topic_name;
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiError, Problem};
use crate::api::routes::stream_token::{token_expired_event, StreamToken};
use crate::api::server::shutdown::Shutdown;
use crate::api::AppState;
use crate::broker::stream::{Positions, StartFrom, Tail};
use crate::broker::{Broker, BrokerError};

/// Gauge of the server-sent event streams open on this node.
pub const SSE_STREAMS: &str = "herald_sse_streams";
/// Counter of message events sent on server-sent event streams.
pub const SSE_EVENTS_TOTAL: &str = "herald_sse_events_total";

/// The cap on open streams and the keepalive interval (`max_sse_streams`, `sse_keepalive_ms`).
#[derive(Debug, Clone)]
pub struct EventStreamLimits {
    pub max_streams: usize,
    pub keepalive: Duration,
}

impl Default for EventStreamLimits {
    fn default() -> Self {
        EventStreamLimits {
            max_streams: 1_000,
            keepalive: Duration::from_secs(15),
        }
    }
}

/// The node's stream slots, shared by all requests.
#[derive(Clone)]
pub struct EventStreams {
    limits: EventStreamLimits,
    slots: Arc<Semaphore>,
}

impl EventStreams {
    pub fn new(limits: EventStreamLimits) -> Self {
        let slots = Arc::new(Semaphore::new(
            limits.max_streams.clamp(1, Semaphore::MAX_PERMITS),
        ));
        EventStreams { limits, slots }
    }
}

impl EventStreams {
    /// Takes one of the node's stream slots, or refuses with `overloaded`.
    pub(in crate::api) fn open(&self) -> Result<OpenStream, ApiError> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => Ok(OpenStream::new(permit)),
            Err(_) => Err(BrokerError::Overloaded(format!(
                "the node has its maximum of {} event streams open; retry later or on another node",
                self.limits.max_streams
            ))
            .into()),
        }
    }

    /// The `text/event-stream` answer of `source`'s events, with keepalive comments, a final
    /// `shutdown` event when the node stops, and the stream's slot held while it lives.
    pub(in crate::api) fn respond<S: EventSource>(
        &self,
        source: S,
        shutdown: Shutdown,
        open: OpenStream,
        token: StreamToken,
    ) -> Response {
        let sse = Sse::new(live_events(source, shutdown, open, token)).keep_alive(
            KeepAlive::new()
                .interval(self.limits.keepalive)
                .text("keepalive"),
        );
        // nginx buffers proxied answers by default, which would hold events back.
        ([("x-accel-buffering", "no")], sse).into_response()
    }
}

/// What a server-sent event stream sends: a topic's tail, a group member, a queue
/// subscription's leases.
pub(in crate::api) trait EventSource: Send + 'static {
    /// The next events; `true` when the stream ends after them.
    fn next_events(&mut self) -> impl Future<Output = (Vec<Event>, bool)> + Send;
    /// The last event when the node shuts down.
    fn shutdown_event(&self) -> Event;
}

/// One `message` event per delivered item (its JSON as `data`, `id(item)` as the event's
/// id), counted in [`SSE_EVENTS_TOTAL`]: how every stream of the node sends its messages.
pub(in crate::api) fn message_events<T: serde::Serialize>(
    delivered: impl ExactSizeIterator<Item = T>,
    id: impl Fn(&T) -> String,
) -> Vec<Event> {
    metrics::counter!(SSE_EVENTS_TOTAL).increment(delivered.len() as u64);
    delivered
        .map(|item| {
            let data = serde_json::to_string(&item).unwrap_or_default();
            Event::default().event("message").id(id(&item)).data(data)
        })
        .collect()
}

/// A `problem` event: why a stream ends (a lasting refusal, such as a deleted topic).
pub(in crate::api) fn problem_event(error: ApiError) -> Event {
    let data = serde_json::json!({
        "code": error.code.as_str(),
        "detail": error.detail,
    });
    Event::default().event("problem").data(data.to_string())
}

/// Holds a stream slot and the open-streams gauge while a stream's body lives.
pub(in crate::api) struct OpenStream(#[allow(dead_code)] OwnedSemaphorePermit);

impl OpenStream {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        metrics::gauge!(SSE_STREAMS).increment(1.0);
        OpenStream(permit)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!(SSE_STREAMS).decrement(1.0);
    }
}

/// Query of `GET /v1/topics/{topic}/events`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Where each partition starts: `earliest`, `latest` (default), an offset,
    /// `timestamp:<ms>`, or a resume token (an event's `id`, like `0:18,1:5`). A
    /// `Last-Event-ID` header, when present, takes precedence.
    #[serde(default)]
    #[param(example = "earliest", max_length = 26624)]
    pub from: Option<String>,
    /// Only this partition; default all.
    #[serde(default)]
    #[param(minimum = 0)]
    pub partition: Option<u32>,
    /// `json`: values (and keys) in the Confluent wire format come decoded as JSON, with the
    /// schema beside them (docs/schemas.md).
    #[serde(default)]
    pub decode: Option<crate::api::dto::consume::DecodeMode>,
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(events))
}

/// Follow a topic as server-sent events (`text/event-stream`).
///
/// One `message` event per message, `data` the message as the partition read API shows it,
/// `id` the resume token right after it: `partition:next_offset` for every partition of the
/// stream (`0:18,1:5`). Reconnecting with it (`Last-Event-ID`, as `EventSource` does, or
/// `from`) continues every partition exactly where the stream stood. Idle streams get a
/// `: keepalive` comment; on node shutdown a final `shutdown` event (its `data` the resume
/// token) ends the stream.
#[utoipa::path(
    get,
    path = "/v1/topics/{topic}/events",
    tag = "messages",
    params(
        ("topic" = String, Path, description = "Topic name"),
        EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "A resume token (an event's id): continue every partition it names from there"),
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` of `message` events (and a final `shutdown` or `problem` event)", content_type = "text/event-stream", body = String),
        (status = 400, description = "`invalid_request`: a bad `from`, `Last-Event-ID` or topic name, or a token naming a partition outside the stream", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found` or `partition_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded` (the node has `max_sse_streams` open; Retry-After), or `no_leader`/`unavailable` while finding where a partition starts", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn events(
    State(broker): State<Broker>,
    State(streams): State<EventStreams>,
    State(shutdown): State<Shutdown>,
    ApiPath(topic): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
    token: StreamToken,
) -> Result<Response, ApiError> {
    check_topic_name(&topic)?;
    let from = start_from(&headers, &query)?;
    let open = streams.open()?;
    let tail = broker
        .streams()
        .open_tail(&topic, query.partition, from)
        .await?;
    let decoder = query.decode.map(|_| broker.schemas().decoder(&topic));
    Ok(streams.respond(TopicEvents { tail, decoder }, shutdown, open, token))
}

/// `Last-Event-ID` (a resume token) if sent and not empty, else `from` (default `latest`).
fn start_from(headers: &HeaderMap, query: &EventsQuery) -> Result<StartFrom, ApiError> {
    if let Some(value) = headers.get("last-event-id") {
        let text = value.to_str().map_err(|_| {
            ApiError::invalid_request("Last-Event-ID must be a resume token like '0:17,1:4'")
        })?;
        if !text.is_empty() {
            return Ok(StartFrom::Positions(Positions::parse(text)?));
        }
    }
    match query.from.as_deref() {
        None => Ok(StartFrom::Latest),
        Some(text) => Ok(StartFrom::parse(text)?),
    }
}

/// A topic's messages, each event's `id` the tail's resume token; with a decoder
/// (`decode=json`), wire-format values decoded.
struct TopicEvents {
    tail: Tail,
    decoder: Option<crate::broker::schemas::MessageDecoder>,
}

impl EventSource for TopicEvents {
    async fn next_events(&mut self) -> (Vec<Event>, bool) {
        match self.tail.next_batch().await {
            Some(Ok(items)) => {
                metrics::counter!(SSE_EVENTS_TOTAL).increment(items.len() as u64);
                let mut events = Vec::with_capacity(items.len());
                for item in items {
                    let topic = self.tail.topic();
                    let message = match self.decoder.as_mut() {
                        Some(decoder) => {
                            crate::api::dto::decoded::decoded_message(decoder, topic, item.message)
                                .await
                        }
                        None => ConsumedMessageDto::from_domain(topic, item.message),
                    };
                    let data = serde_json::to_string(&message).unwrap_or_default();
                    events.push(Event::default().event("message").id(item.resume).data(data));
                }
                (events, false)
            }
            Some(Err(error)) => (vec![problem_event(ApiError::from(error))], true),
            None => (Vec::new(), true),
        }
    }

    fn shutdown_event(&self) -> Event {
        let resume = self.tail.positions().to_string();
        Event::default().event("shutdown").id(&resume).data(resume)
    }
}

struct StreamState<S> {
    source: S,
    shutdown: Shutdown,
    token: StreamToken,
    pending: VecDeque<Event>,
    ended: bool,
    _open: OpenStream,
}

/// The events of a source until the node stops or the source ends.
fn live_events<S: EventSource>(
    source: S,
    shutdown: Shutdown,
    open: OpenStream,
    token: StreamToken,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let state = StreamState {
        source,
        shutdown,
        token,
        pending: VecDeque::new(),
        ended: false,
        _open: open,
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop_front() {
                return Some((Ok(event), state));
            }
            if state.ended {
                return None;
            }
            tokio::select! {
                biased;
                () = state.shutdown.stopping() => {
                    state.ended = true;
                    state.pending.push_back(state.source.shutdown_event());
                }
                end = state.token.ended() => {
                    state.ended = true;
                    state.pending.push_back(token_expired_event(&end));
                }
                (events, last) = state.source.next_events() => {
                    state.ended = last;
                    state.pending.extend(events);
                }
            }
        }
    })
}
