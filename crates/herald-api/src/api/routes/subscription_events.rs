//! `GET /v1/subscriptions/{sub}/events`: a queue subscription's leases as a server-sent
//! event stream.
//!
//! The stream leases through the same pull as `POST /v1/subscriptions/{sub}/pull` (a broker
//! [`ResumingLeases`], which rides out leader changes itself), with at most `max_in_flight`
//! leases un-settled; each `message` event carries its `ack_id`, which the client settles with
//! the REST ack, nack and extend calls.

use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::decoded::ReadDecoder;
use crate::api::dto::streams::LeaseDelivered;
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiError, Problem};
use crate::api::routes::events::{message_events, problem_event, EventSource, EventStreams};
use crate::api::server::shutdown::Shutdown;
use crate::api::AppState;
use crate::broker::stream::ResumingLeases;
use crate::broker::Broker;

/// The window of a stream that names none.
const DEFAULT_MAX_IN_FLIGHT: u32 = 100;

/// Query of `GET /v1/subscriptions/{sub}/events`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionEventsQuery {
    /// The most leases the stream holds un-settled (1 to 10000; default 100): past it, the
    /// next message waits for an ack, a nack or a lease's deadline.
    #[serde(default)]
    #[param(minimum = 1, maximum = 10000)]
    pub max_in_flight: Option<u32>,
    /// `json`: values (and keys) in the Confluent wire format come decoded as JSON, with the
    /// schema beside them (docs/schemas.md); a part that does not decode keeps its bytes and
    /// says why in `decode_error`.
    #[serde(default)]
    pub decode: Option<crate::api::dto::consume::DecodeMode>,
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(subscription_events))
}

/// Lease a queue subscription's messages as server-sent events (`text/event-stream`).
///
/// One `message` event per lease, `data` the message with `ack_id` and `delivery_attempt`,
/// `id` the `ack_id`. Settle with `POST /v1/subscriptions/{sub}/ack` (or `nack`, `extend`)
/// before the subscription's ack deadline. At most `max_in_flight` leases are un-settled at
/// once; a lease gives its place back when it is settled through this node, or when its
/// deadline passes (settled through another node, or not at all). When the client disconnects
/// the leases it still holds are nacked (delivered again at once); on node shutdown a final
/// `shutdown` event ends the stream (its leases are nacked the same way).
#[utoipa::path(
    get,
    path = "/v1/subscriptions/{sub}/events",
    tag = "subscriptions",
    params(
        ("sub" = String, Path, description = "Subscription name", min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$"),
        SubscriptionEventsQuery,
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` of `message` events (and a final `shutdown` or `problem` event)", content_type = "text/event-stream", body = String),
        (status = 400, description = "`invalid_request`: a bad subscription name or `max_in_flight`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`subscription_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded`: the node has `max_sse_streams` open", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn subscription_events(
    State(broker): State<Broker>,
    State(streams): State<EventStreams>,
    State(shutdown): State<Shutdown>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<SubscriptionEventsQuery>,
    token: crate::api::routes::stream_token::StreamToken,
) -> Result<Response, ApiError> {
    let max_in_flight = query.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
    let leases = broker
        .subscriptions()
        .open_lease_stream(&name, max_in_flight)?;
    let open = streams.open()?;
    Ok(streams.respond(
        LeaseEvents {
            leases: ResumingLeases::new(Arc::new(leases)),
            decoder: ReadDecoder::when_asked(&broker, query.decode),
        },
        shutdown,
        open,
        token,
    ))
}

/// The leases, resuming across leader changes: every error they hand over ends the stream.
struct LeaseEvents {
    leases: ResumingLeases,
    /// With `decode=json`.
    decoder: Option<ReadDecoder>,
}

impl EventSource for LeaseEvents {
    async fn next_events(&mut self) -> (Vec<Event>, bool) {
        match self.leases.next().await {
            Ok(pulled) => {
                let delivered = LeaseDelivered::all(pulled, self.decoder.as_mut()).await;
                (
                    message_events(delivered.into_iter(), |lease| lease.ack_id.clone()),
                    false,
                )
            }
            Err(error) => (vec![problem_event(ApiError::from(error))], true),
        }
    }

    fn shutdown_event(&self) -> Event {
        let data = serde_json::json!({"subscription": self.leases.leases().subscription()});
        Event::default().event("shutdown").data(data.to_string())
    }
}
