//! The AsyncAPI 3.1 document of the live streams (`/asyncapi.json`, committed as
//! `openapi/asyncapi.json`): the WebSocket channel `/v1/ws` with every frame each way, and the
//! server-sent event channels. The OpenAPI document describes the handshakes; this one what
//! flows after them.
//!
//! It is generated from the types the server parses and writes (the frame structs of
//! `crate::ws::frames`, the consume DTO), through the same utoipa schemas as the OpenAPI
//! document, so a frame cannot change without the document changing; the test below keeps the
//! committed copy current, as `openapi_doc` does for OpenAPI.
//!
//! Perspective: AsyncAPI describes one application, here the node. Frames the node receives are
//! `receive` operations, frames it sends are `send` operations; a client does the opposite.

mod sse;

use serde_json::{json, Map, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::ToSchema;

use crate::ws::frames::{
    AuthFrame, CreditFrame, PublishFrame, ServerFrame, SubscribeFrame, UnsubscribeFrame,
};
use crate::ws::stream_frames::{
    CommitFrame, GroupSubscribeFrame, QueueSubscribeFrame, SettleFrame,
};

/// Where the committed document lives, relative to the crate root.
pub const COMMITTED_PATH: &str = "openapi/asyncapi.json";
/// Where the node serves it.
pub const ASYNCAPI_PATH: &str = "/asyncapi.json";

/// One kind of frame: its `op`, what it is for, and its payload's schema.
struct FrameKind {
    op: String,
    summary: &'static str,
    payload: Value,
}

/// Collects component schemas while payloads are built.
#[derive(Default)]
pub(in crate::api) struct Schemas(Map<String, Value>);

impl Schemas {
    /// `T`'s schema (its `op` pinned to `op` when it has one), with what it refers to added to
    /// the components.
    pub(in crate::api) fn payload<T: ToSchema>(&mut self, op: Option<&str>) -> Value {
        self.add_dependencies::<T>();
        let mut schema = to_json(T::schema());
        if let Some(op) = op {
            pin_op(&mut schema, op);
        }
        schema
    }

    fn add_dependencies<T: ToSchema>(&mut self) {
        let mut dependencies = Vec::new();
        T::schemas(&mut dependencies);
        for (name, schema) in dependencies {
            self.0.insert(name, to_json(schema));
        }
    }
}

fn to_json(schema: RefOr<Schema>) -> Value {
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// A client frame's struct reads `op` as any string (it was matched before): the document says
/// which one. A frame with flattened fields is an `allOf`; its `op` is in one of the parts.
fn pin_op(schema: &mut Value, op: &str) {
    if let Some(parts) = schema.get_mut("allOf").and_then(Value::as_array_mut) {
        for part in parts {
            if part.pointer("/properties/op").is_some() {
                pin_op(part, op);
            }
        }
        return;
    }
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert(
            "op".into(),
            json!({"type": "string", "const": op, "description": "The frame's kind"}),
        );
    }
}

/// The `op` a server frame variant is tagged with, wherever its `allOf` parts put it.
fn tagged_op(variant: &Value) -> Option<String> {
    if let Some(op) = variant
        .pointer("/properties/op/enum/0")
        .and_then(Value::as_str)
    {
        return Some(op.to_string());
    }
    variant.get("allOf")?.as_array()?.iter().find_map(tagged_op)
}

/// The server frames, one per `op`, split out of [`ServerFrame`]'s tagged union so each is a
/// message of its own.
fn server_frames(schemas: &mut Schemas) -> Vec<FrameKind> {
    let union = schemas.payload::<ServerFrame>(None);
    let variants = union
        .get("oneOf")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let summary = |name: &str| {
        match name {
        "published" => "Where a publish's messages were stored (or, per message, why not)",
        "messages" => "Messages of one partition for a topic subscription, in offset order, each with its resume token",
        "messages_group" => "Messages for a group subscription, each with the position that commits it",
        "messages_queue" => "Leases for a queue subscription, each with its ack_id and delivery attempt",
        "assignment" => "A group subscription's partitions: on join and after every rebalance",
        "acked" => "What an ack settled, and which leases had expired",
        "nacked" => "What a nack gave back, and which leases had expired",
        "extended" => "Which leases an extend pushed back, and which had expired",
        "ok" => "A subscribe, unsubscribe or commit was done",
        "authenticated" => "An auth frame's token was taken; the socket lasts until its expiry",
        "error" => "A frame was refused (a problem object), or a subscription ended for good",
        _ => "A server frame",
    }
    };
    variants
        .into_iter()
        .filter_map(|variant| Some((tagged_op(&variant)?, variant)))
        .map(|(op, mut payload)| {
            pin_op(&mut payload, &op);
            // Three kinds of subscription share the op `messages`; their items tell them apart.
            let items = payload
                .pointer("/properties/messages/items/$ref")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let name = if items.ends_with("/GroupDelivered") {
                format!("{op}_group")
            } else if items.ends_with("/LeaseDelivered") {
                format!("{op}_queue")
            } else {
                op.clone()
            };
            FrameKind {
                summary: summary(&name),
                op: name,
                payload,
            }
        })
        .collect()
}

fn client_frames(schemas: &mut Schemas) -> Vec<FrameKind> {
    let frame = |name: &str, summary: &'static str, payload: Value| FrameKind {
        op: name.into(),
        summary,
        payload,
    };
    vec![
        frame(
            "publish",
            "Produce messages, as POST /v1/topics/{topic}/messages does; answered by `published`",
            schemas.payload::<PublishFrame>(Some("publish")),
        ),
        frame(
            "subscribe",
            "Follow a topic (all partitions or one) from a position; answered by `ok`, then `messages` within the credit",
            schemas.payload::<SubscribeFrame>(Some("subscribe")),
        ),
        frame(
            "subscribe_group",
            "Join a consumer group as a member; answered by `ok` and `assignment`, then `messages` from the assigned partitions within the credit",
            schemas.payload::<GroupSubscribeFrame>(Some("subscribe")),
        ),
        frame(
            "subscribe_queue",
            "Lease from a queue subscription, at most `credit` leases un-settled; answered by `ok`, then `messages`",
            schemas.payload::<QueueSubscribeFrame>(Some("subscribe")),
        ),
        frame(
            "commit",
            "Commit a group subscription's offsets (each the next offset to read); answered by `ok`",
            schemas.payload::<CommitFrame>(Some("commit")),
        ),
        frame(
            "ack",
            "Settle leases of a queue subscription; answered by `acked`",
            schemas.payload::<SettleFrame>(Some("ack")),
        ),
        frame(
            "nack",
            "Give leases back (after delay_ms, or to the dead-letter topic); answered by `nacked`",
            schemas.payload::<SettleFrame>(Some("nack")),
        ),
        frame(
            "extend",
            "Push leases' deadlines back by ack_deadline_ms; answered by `extended`",
            schemas.payload::<SettleFrame>(Some("extend")),
        ),
        frame(
            "unsubscribe",
            "Stop a subscription (a group member leaves its group); answered by `ok`",
            schemas.payload::<UnsubscribeFrame>(Some("unsubscribe")),
        ),
        frame(
            "credit",
            "Let a subscription have more messages in flight",
            schemas.payload::<CreditFrame>(Some("credit")),
        ),
        frame(
            "auth",
            "A fresh token for the socket before its token expires (close code 4001 otherwise); answered by `authenticated`",
            schemas.payload::<AuthFrame>(Some("auth")),
        ),
    ]
}

/// A `$ref` to a component message.
pub(in crate::api) fn message_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/messages/{name}")})
}

/// The document.
pub fn document() -> Value {
    let mut schemas = Schemas::default();
    let client = client_frames(&mut schemas);
    let server = server_frames(&mut schemas);

    let mut messages = Map::new();
    let mut ws_channel_messages = Map::new();
    let mut operations = Map::new();
    for (kind, action) in client
        .iter()
        .map(|kind| (kind, "receive"))
        .chain(server.iter().map(|kind| (kind, "send")))
    {
        let name = format!("ws_{}", kind.op);
        messages.insert(
            name.clone(),
            json!({
                "name": kind.op,
                "title": format!("`{}` frame", kind.op),
                "summary": kind.summary,
                "contentType": "application/json",
                "payload": kind.payload,
            }),
        );
        ws_channel_messages.insert(name.clone(), message_ref(&name));
        let mut operation = json!({
            "action": action,
            "channel": {"$ref": "#/channels/websocket"},
            "summary": kind.summary,
            "messages": [{"$ref": format!("#/channels/websocket/messages/{name}")}],
        });
        if kind.op == "publish" {
            operation["reply"] = json!({
                "channel": {"$ref": "#/channels/websocket"},
                "messages": [
                    {"$ref": "#/channels/websocket/messages/ws_published"},
                    {"$ref": "#/channels/websocket/messages/ws_error"},
                ],
            });
        }
        operations.insert(format!("{action}_{}", kind.op), operation);
    }

    let binary_layout = "A binary frame: the header's length (4 bytes, unsigned, big-endian), the header (the JSON frame, each message without value/value_b64 and with value_len and value_format json|bytes), then the values back to back in message order (docs/websocket.md, Binary frames)";
    for (name, op, action, summary) in [
        (
            "ws_publish_binary",
            "publish",
            "receive",
            "A publish as a binary frame: its values raw after its JSON header; answered by `published` (JSON text)",
        ),
        (
            "ws_messages_binary",
            "messages",
            "send",
            "A `messages` frame of a subscription with format binary: the values raw after the JSON header",
        ),
    ] {
        messages.insert(
            name.into(),
            json!({
                "name": format!("{op} (binary)"),
                "title": format!("binary `{op}` frame"),
                "summary": summary,
                "contentType": "application/octet-stream",
                "payload": {"type": "string", "format": "binary", "description": binary_layout},
            }),
        );
        ws_channel_messages.insert(name.into(), message_ref(name));
        operations.insert(
            format!("{action}_{op}_binary"),
            json!({
                "action": action,
                "channel": {"$ref": "#/channels/websocket"},
                "summary": summary,
                "messages": [{"$ref": format!("#/channels/websocket/messages/{name}")}],
            }),
        );
    }

    let mut channels = Map::new();
    channels.insert(
        "websocket".into(),
        json!({
            "address": "/v1/ws",
            "title": "WebSocket",
            "description": "One socket publishes and holds any number of subscriptions, each with its own `id`. The client must offer the subprotocol `herald.v1`.",
            "servers": [{"$ref": "#/servers/node"}],
            "messages": ws_channel_messages,
            "bindings": {"ws": {"method": "GET", "bindingVersion": "0.1.0"}},
        }),
    );
    sse::add_event_streams(&mut schemas, &mut messages, &mut channels, &mut operations);

    json!({
        "asyncapi": "3.1.0",
        "info": {
            "title": "Herald live streams",
            "version": "1",
            "description": "What flows over Herald's WebSocket (`GET /v1/ws`, subprotocol `herald.v1`, JSON text frames) and server-sent event streams once they are open. The handshakes, their query parameters and refusals are in the OpenAPI document (`/openapi.json`); frames, flow control, resume and close codes in docs/websocket.md and docs/streaming.md. Operations are from the node's side: `receive` is a frame a client sends.",
        },
        "servers": {
            "node": {
                "host": "127.0.0.1:8080",
                "protocol": "ws",
                "description": "Any node of the cluster: a stream resumes on any node with its resume token.",
            },
            "node_http": {
                "host": "127.0.0.1:8080",
                "protocol": "http",
                "description": "The same port, for server-sent events.",
            },
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": messages,
            "schemas": schemas.0,
        },
    })
}

/// The document as committed: pretty JSON with a trailing newline.
pub fn render() -> Result<String, serde_json::Error> {
    Ok(format!("{}\n", serde_json::to_string_pretty(&document())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_asyncapi_document_is_current() {
        let generated = render().expect("the AsyncAPI document serializes");
        crate::api::openapi::document::assert_committed_is_current(
            COMMITTED_PATH,
            &generated,
            "committed_asyncapi_document_is_current",
        );
    }

    #[test]
    fn every_frame_is_a_message_with_its_op_pinned() {
        let document = document();
        let messages = document["components"]["messages"].as_object().unwrap();
        for (name, op) in [
            ("publish", "publish"),
            ("subscribe", "subscribe"),
            ("subscribe_group", "subscribe"),
            ("subscribe_queue", "subscribe"),
            ("commit", "commit"),
            ("ack", "ack"),
            ("nack", "nack"),
            ("extend", "extend"),
            ("unsubscribe", "unsubscribe"),
            ("credit", "credit"),
            ("published", "published"),
            ("messages", "messages"),
            ("messages_group", "messages"),
            ("messages_queue", "messages"),
            ("assignment", "assignment"),
            ("acked", "acked"),
            ("nacked", "nacked"),
            ("extended", "extended"),
            ("ok", "ok"),
            ("error", "error"),
        ] {
            let message = &messages[&format!("ws_{name}")];
            let payload = &message["payload"];
            let pinned = payload["properties"]["op"]["const"].clone();
            let pinned = match payload["allOf"].as_array() {
                Some(parts) => parts
                    .iter()
                    .map(|part| part["properties"]["op"]["const"].clone())
                    .find(|value| !value.is_null())
                    .unwrap_or(Value::Null),
                None => pinned,
            };
            assert_eq!(pinned, op, "{name}: {message}");
        }
        // Every reference resolves inside the document.
        let text = document.to_string();
        for reference in text.split("\"$ref\":\"#/").skip(1) {
            let pointer = format!("/{}", &reference[..reference.find('"').unwrap()]);
            assert!(
                document.pointer(&pointer).is_some(),
                "dangling reference {pointer}"
            );
        }
    }
}
