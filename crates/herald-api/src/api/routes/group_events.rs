//! `GET /v1/groups/{group}/events`: a consumer group member as a server-sent event stream.
//!
//! The stream is a member (a broker [`ResumingMember`], which rides out leader changes itself: joined, heartbeated and polled through
//! the group methods the REST API calls): its first event is the `assignment`, sent again after
//! every rebalance; each `message` event carries the offset that commits it, which the client
//! commits with `POST /v1/groups/{group}/offsets` naming the assignment's `member_id` and
//! `generation`. The member leaves when the client disconnects.

use std::time::Duration;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::decoded::ReadDecoder;
use crate::api::dto::groups::OffsetResetDto;
use crate::api::dto::streams::{AssignmentBody, GroupDelivered};
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiError, Problem};
use crate::api::routes::events::{message_events, problem_event, EventSource, EventStreams};
use crate::api::server::shutdown::Shutdown;
use crate::api::AppState;
use crate::broker::stream::ResumingMember;
use crate::broker::{Broker, JoinGroup, MemberEvent};

/// The most messages one poll of a member's stream asks for.
const MESSAGES_PER_POLL: usize = 100;

/// Query of `GET /v1/groups/{group}/events`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GroupEventsQuery {
    /// The topics the member reads, comma-separated (1 to 100).
    #[param(example = "orders,payments", min_length = 1)]
    pub topics: String,
    /// The member's session (1000 to 300000 by default; default 10000). The stream
    /// heartbeats for the client well within it, as long as the client reads.
    #[serde(default)]
    #[param(minimum = 1000, maximum = 300000)]
    pub session_timeout_ms: Option<u64>,
    /// Where members start on partitions without a committed offset; sets the group's
    /// policy. Default `earliest`.
    #[serde(default)]
    pub auto_offset_reset: Option<OffsetResetDto>,
    /// Commit each message as it is sent (at most once). Default `false`: commit over REST.
    #[serde(default)]
    pub auto_commit: Option<bool>,
    /// `json`: values (and keys) in the Confluent wire format come decoded as JSON, with the
    /// schema beside them (docs/schemas.md); a part that does not decode keeps its bytes and
    /// says why in `decode_error`.
    #[serde(default)]
    pub decode: Option<crate::api::dto::consume::DecodeMode>,
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(group_events))
}

/// Be a consumer group member as server-sent events (`text/event-stream`).
///
/// The stream joins the group. Its first event is `assignment` (`data`: `member_id`,
/// `generation`, `assignments`), sent again after every rebalance. Then one `message` event
/// per message of the assigned partitions, starting at the group's committed offsets; its
/// `data` is the message with `commit` (`topic`, `partition`, `offset`: the next offset to
/// read), its `id` that position as `topic/partition/offset`. Commit with
/// `POST /v1/groups/{group}/offsets` and the assignment's `member_id` and `generation`. The
/// member leaves the group when the client disconnects (its partitions go to the others at
/// once); on node shutdown a final `shutdown` event ends the stream. `Last-Event-ID` is not
/// used: a member restarts from the group's committed offsets.
#[utoipa::path(
    get,
    path = "/v1/groups/{group}/events",
    tag = "groups",
    params(
        ("group" = String, Path, description = "Group name"),
        GroupEventsQuery,
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` of `assignment` and `message` events (and a final `shutdown` or `problem` event)", content_type = "text/event-stream", body = String),
        (status = 400, description = "`invalid_request`: a bad group or topic name, no topics or too many, a session timeout out of range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`group_full`: the group has its maximum of members", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded` (the node has `max_sse_streams` open), or `no_leader`/`unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn group_events(
    State(broker): State<Broker>,
    State(streams): State<EventStreams>,
    State(shutdown): State<Shutdown>,
    ApiPath(group): ApiPath<String>,
    ApiQuery(query): ApiQuery<GroupEventsQuery>,
    token: crate::api::routes::stream_token::StreamToken,
) -> Result<Response, ApiError> {
    let topics: Vec<String> = query
        .topics
        .split(',')
        .map(|topic| topic.trim().to_string())
        .collect();
    if topics.iter().any(String::is_empty) {
        return Err(ApiError::invalid_request(
            "topics is a comma-separated list of topic names, none empty",
        ));
    }
    let open = streams.open()?;
    let request = JoinGroup {
        group,
        owner: token.subject(),
        topics,
        session_timeout: query.session_timeout_ms.map(Duration::from_millis),
        offset_reset: query.auto_offset_reset.map(Into::into),
    };
    let member = broker
        .groups()
        .join_stream(request, query.auto_commit.unwrap_or(false))
        .await?;
    Ok(streams.respond(
        MemberEvents {
            member: ResumingMember::new(member),
            decoder: ReadDecoder::when_asked(&broker, query.decode),
        },
        shutdown,
        open,
        token,
    ))
}

/// The member, resuming across leader changes: every error it hands over ends the stream.
struct MemberEvents {
    member: ResumingMember,
    /// With `decode=json`.
    decoder: Option<ReadDecoder>,
}

impl EventSource for MemberEvents {
    async fn next_events(&mut self) -> (Vec<Event>, bool) {
        match self.member.next(MESSAGES_PER_POLL).await {
            Ok(MemberEvent::Assignment(membership)) => {
                let data = AssignmentBody::from(membership);
                let data = serde_json::to_string(&data).unwrap_or_default();
                (vec![Event::default().event("assignment").data(data)], false)
            }
            Ok(MemberEvent::Messages(messages)) => {
                let delivered = GroupDelivered::all(messages, self.decoder.as_mut()).await;
                (
                    message_events(delivered.into_iter(), GroupDelivered::position),
                    false,
                )
            }
            Err(error) => (vec![problem_event(ApiError::from(error))], true),
        }
    }

    fn shutdown_event(&self) -> Event {
        let membership = self.member.member().membership();
        let data = serde_json::json!({
            "member_id": membership.member_id,
            "generation": membership.generation,
        });
        Event::default().event("shutdown").data(data.to_string())
    }
}
