//! The server-sent event channels of the AsyncAPI document: a topic's stream, a consumer
//! group member's and a queue subscription's, and the events each sends.

use serde_json::{json, Map, Value};

use super::{message_ref, Schemas};
use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::dto::streams::{AssignmentBody, GroupDelivered, LeaseDelivered};

/// Adds the event messages, the three event stream channels and their `send` operations.
pub(super) fn add_event_streams(
    schemas: &mut Schemas,
    messages: &mut Map<String, Value>,
    channels: &mut Map<String, Value>,
    operations: &mut Map<String, Value>,
) {
    let problem = json!({
        "type": "object",
        "required": ["code", "detail"],
        "properties": {
            "code": {"type": "string", "description": "The problem's stable code (docs/errors.md)"},
            "detail": {"type": "string"},
        },
    });
    let event_messages = [
        (
            "sse_message",
            "message",
            "One message; the event's `id` is the stream's resume token right after it (every partition's next offset, `0:18,1:5`)",
            schemas.payload::<ConsumedMessageDto>(None),
        ),
        (
            "sse_shutdown",
            "shutdown",
            "The node is stopping: the data is the resume token; reconnect (to any node) with it as Last-Event-ID",
            json!({"type": "string", "description": "The resume token", "examples": ["0:18,1:5"]}),
        ),
        (
            "sse_problem",
            "problem",
            "The stream cannot go on (e.g. the topic was deleted) and ends",
            problem.clone(),
        ),
        (
            "sse_assignment",
            "assignment",
            "The member's partitions: first, and again after every rebalance",
            schemas.payload::<AssignmentBody>(None),
        ),
        (
            "sse_group_message",
            "message",
            "One message of an assigned partition with the position that commits it; the event's `id` is that position, `topic/partition/offset`",
            schemas.payload::<GroupDelivered>(None),
        ),
        (
            "sse_group_shutdown",
            "shutdown",
            "The node is stopping: the member leaves; reconnect to any node to join again",
            json!({"type": "object", "properties": {"member_id": {"type": "string"}, "generation": {"type": "integer"}}}),
        ),
        (
            "sse_lease",
            "message",
            "One lease; the event's `id` is its ack_id. Settle it with POST /v1/subscriptions/{sub}/ack (nack, extend)",
            schemas.payload::<LeaseDelivered>(None),
        ),
        (
            "sse_subscription_shutdown",
            "shutdown",
            "The node is stopping: the leases the stream holds are nacked (delivered again at once)",
            json!({"type": "object", "properties": {"subscription": {"type": "string"}}}),
        ),
    ];
    for (name, event, summary, payload) in event_messages {
        messages.insert(
            name.into(),
            json!({"name": event, "title": format!("`{event}` event"), "summary": summary,
                   "contentType": "application/json", "payload": payload}),
        );
    }
    for (channel, address, parameter, title, description, events) in [
        (
            "topic_events",
            "/v1/topics/{topic}/events",
            "topic",
            "A topic's server-sent events",
            "`text/event-stream`. Query: `from` (latest, earliest, an offset, timestamp:<ms> or a resume token), `partition`. Header `Last-Event-ID` resumes.",
            &["sse_message", "sse_shutdown", "sse_problem"][..],
        ),
        (
            "group_events",
            "/v1/groups/{group}/events",
            "group",
            "A consumer group member's server-sent events",
            "`text/event-stream`; the stream is a member of the group while the client reads. Query: `topics` (required), `session_timeout_ms`, `auto_offset_reset`, `auto_commit`.",
            &["sse_assignment", "sse_group_message", "sse_group_shutdown", "sse_problem"][..],
        ),
        (
            "subscription_events",
            "/v1/subscriptions/{subscription}/events",
            "subscription",
            "A queue subscription's leases as server-sent events",
            "`text/event-stream`. Query: `max_in_flight` (un-settled leases per stream, default 100).",
            &["sse_lease", "sse_subscription_shutdown", "sse_problem"][..],
        ),
    ] {
        let channel_messages: Map<String, Value> = events
            .iter()
            .map(|name| (name.to_string(), message_ref(name)))
            .collect();
        channels.insert(
            channel.into(),
            json!({
                "address": address,
                "title": title,
                "description": description,
                "servers": [{"$ref": "#/servers/node_http"}],
                "parameters": {parameter: {"description": format!("The {parameter}'s name")}},
                "messages": channel_messages,
                "bindings": {"http": {"method": "GET", "bindingVersion": "0.3.0"}},
            }),
        );
        operations.insert(
            format!("send_{channel}"),
            json!({
                "action": "send",
                "channel": {"$ref": format!("#/channels/{channel}")},
                "summary": title,
                "messages": events
                    .iter()
                    .map(|name| json!({"$ref": format!("#/channels/{channel}/messages/{name}")}))
                    .collect::<Vec<_>>(),
            }),
        );
    }
}
