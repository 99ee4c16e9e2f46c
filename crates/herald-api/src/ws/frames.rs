//! The JSON text frames of `GET /v1/ws` (`herald.v1`), as `docs/websocket.md` lists them.
//!
//! A client frame is parsed in two steps: first as any JSON (a frame that is not JSON closes
//! the socket with 1007, since nothing in it can be trusted, not even its `id`), then as one of
//! the ops (a frame that is JSON but not a valid op is answered with an `error` frame carrying
//! its `id`, and the socket stays open).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::dto::produce::{AcksDto, ProduceMessageDto, ProducedOffsetDto};
use crate::api::problem::{ApiError, Problem};

pub use super::stream_frames::{
    AssignmentBody, CommitFrame, CommitPosition, GroupDelivered, GroupSubscribeFrame,
    LeaseDelivered, QueueSubscribeFrame, SettleFrame,
};

/// A frame from the client.
#[derive(Debug)]
pub enum ClientFrame {
    Publish(PublishFrame),
    Subscribe(SubscribeFrame),
    Unsubscribe(UnsubscribeFrame),
    Credit(CreditFrame),
    GroupSubscribe(GroupSubscribeFrame),
    QueueSubscribe(QueueSubscribeFrame),
    Commit(CommitFrame),
    Ack(SettleFrame),
    Nack(SettleFrame),
    Extend(SettleFrame),
    Auth(AuthFrame),
}

/// What every client frame starts with. Read on its own first: message values are kept as the
/// exact JSON text sent (`RawValue`), which serde cannot do through an internally tagged enum.
#[derive(Debug, Deserialize)]
struct FrameHeader {
    op: Option<String>,
    id: Option<Value>,
    /// A `subscribe` naming a group or a queue subscription instead of a topic.
    #[serde(default)]
    group: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    subscription: Option<serde::de::IgnoredAny>,
}

/// `unsubscribe`: stop subscription `id`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnsubscribeFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
}

/// `auth`: a fresh token for the socket, sent before the one it was opened with expires
/// (the socket closes with 4001 then). It must name the same client.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthFrame {
    #[allow(dead_code)]
    op: String,
    /// Echoed in the `authenticated` answer.
    #[serde(default)]
    pub id: Option<String>,
    /// An access token, as `Authorization: Bearer` takes it.
    pub token: String,
}

/// `credit`: let subscription `id` have `messages` more in flight.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub messages: u64,
}

/// `publish`: the produce body's messages and options, over the socket.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub topic: String,
    #[serde(deserialize_with = "crate::api::dto::produce_limits::deserialize_messages")]
    pub messages: Vec<ProduceMessageDto>,
    #[serde(default)]
    pub acks: Option<AcksDto>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub producer_id: Option<i64>,
    #[serde(default)]
    pub producer_epoch: Option<i64>,
    #[serde(default)]
    pub sequence: Option<i64>,
}

/// `subscribe` to a topic's partitions (all, or one).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub topic: String,
    #[serde(default)]
    pub partition: Option<u32>,
    #[serde(default)]
    pub from: Option<FromSpec>,
    /// The subscription's starting credit; the server's default without it.
    #[serde(default)]
    pub credit: Option<u64>,
    /// How its `messages` frames come: JSON text (the default), or binary frames whose values
    /// follow a JSON header as raw bytes (docs/websocket.md § Binary frames).
    #[serde(default)]
    pub format: FrameFormat,
    /// `"json"`: values (and keys) in the Confluent wire format come decoded as JSON, with the
    /// schema beside them (docs/schemas.md); JSON frames only.
    #[serde(default)]
    pub decode: Option<crate::api::dto::consume::DecodeMode>,
}

/// How a subscription's `messages` frames are sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FrameFormat {
    #[default]
    Json,
    Binary,
}

/// Where a subscription starts: an offset (every partition), or as text what server-sent
/// event streams take: `"earliest"`, `"latest"`, `"timestamp:<ms>"` or the resume token last
/// received (`"0:18,1:5"`: the next offset of each partition; partitions it does not name
/// from the earliest).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum FromSpec {
    Offset(u64),
    Text(String),
}

/// A frame to the client.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ServerFrame {
    Published {
        id: String,
        offsets: Vec<ProducedOffsetDto>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        duplicate: bool,
    },
    Messages {
        id: String,
        messages: Vec<DeliveredMessage>,
    },
    /// A group subscription's partitions: on join and after every rebalance.
    Assignment {
        id: String,
        #[serde(flatten)]
        assignment: AssignmentBody,
    },
    #[serde(rename = "messages")]
    GroupMessages {
        id: String,
        messages: Vec<GroupDelivered>,
    },
    #[serde(rename = "messages")]
    Leases {
        id: String,
        messages: Vec<LeaseDelivered>,
    },
    Acked {
        id: String,
        acked: Vec<String>,
        expired: Vec<String>,
    },
    Nacked {
        id: String,
        nacked: Vec<String>,
        expired: Vec<String>,
    },
    Extended {
        id: String,
        extended: Vec<String>,
        expired: Vec<String>,
    },
    Ok {
        id: String,
    },
    /// An `auth` frame's token was taken: the socket now lasts until `expires_at_ms`.
    Authenticated {
        id: Option<String>,
        subject: Option<String>,
        /// When the socket closes with 4001 unless another `auth` frame comes first; null with
        /// authentication off.
        expires_at_ms: Option<i64>,
    },
    Error {
        /// The `id` of the frame refused, when it had one.
        id: Option<Value>,
        error: Problem,
    },
}

impl ServerFrame {
    pub fn error(id: Option<Value>, error: &ApiError) -> ServerFrame {
        ServerFrame::Error {
            id,
            error: error.problem(),
        }
    }

    /// The op, as metrics label it.
    pub fn op(&self) -> &'static str {
        match self {
            ServerFrame::Published { .. } => "published",
            ServerFrame::Messages { .. }
            | ServerFrame::GroupMessages { .. }
            | ServerFrame::Leases { .. } => "messages",
            ServerFrame::Assignment { .. } => "assignment",
            ServerFrame::Acked { .. } => "acked",
            ServerFrame::Nacked { .. } => "nacked",
            ServerFrame::Extended { .. } => "extended",
            ServerFrame::Ok { .. } => "ok",
            ServerFrame::Authenticated { .. } => "authenticated",
            ServerFrame::Error { .. } => "error",
        }
    }
}

impl ClientFrame {
    /// The op, as metrics label it.
    pub fn op(&self) -> &'static str {
        match self {
            ClientFrame::Publish(_) => "publish",
            ClientFrame::Subscribe(_)
            | ClientFrame::GroupSubscribe(_)
            | ClientFrame::QueueSubscribe(_) => "subscribe",
            ClientFrame::Commit(_) => "commit",
            ClientFrame::Ack(_) => "ack",
            ClientFrame::Nack(_) => "nack",
            ClientFrame::Extend(_) => "extend",
            ClientFrame::Unsubscribe(_) => "unsubscribe",
            ClientFrame::Credit(_) => "credit",
            ClientFrame::Auth(_) => "auth",
        }
    }
}

/// One message delivered to a subscription: the message as the consume API shows it, plus its
/// resume token.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveredMessage {
    /// The subscription's position right after this message, every partition's next offset
    /// (`"0:18,1:5"`): give it back in `from` to resume after this message.
    pub resume: String,
    #[serde(flatten)]
    pub message: ConsumedMessageDto,
}

/// Why a client frame was not taken.
#[derive(Debug)]
pub enum FrameError {
    /// Not JSON at all: nothing in it, not even its `id`, can be trusted; the socket closes.
    NotJson(serde_json::Error),
    /// JSON, but not a valid frame: answered with an `error` frame naming its `id`.
    Refused(Option<Value>, ApiError),
}

/// Parses a client text frame.
pub fn parse_client_frame(text: &str) -> Result<ClientFrame, FrameError> {
    let header: FrameHeader =
        serde_json::from_str(text).map_err(|error| match error.classify() {
            serde_json::error::Category::Data => FrameError::Refused(
                None,
                ApiError::invalid_request(format!("a frame is a JSON object with an op: {error}")),
            ),
            _ => FrameError::NotJson(error),
        })?;
    let id = header.id;
    let refuse = |error: serde_json::Error| {
        FrameError::Refused(
            id.clone(),
            ApiError::invalid_request(format!("invalid frame: {error}")),
        )
    };
    match header.op.as_deref() {
        Some("publish") => serde_json::from_str(text)
            .map(ClientFrame::Publish)
            .map_err(refuse),
        Some("subscribe") if header.group.is_some() && header.subscription.is_some() => {
            Err(FrameError::Refused(
                id,
                ApiError::invalid_request(
                    "subscribe names one of topic, group or subscription, not several",
                ),
            ))
        }
        Some("subscribe") if header.group.is_some() => serde_json::from_str(text)
            .map(ClientFrame::GroupSubscribe)
            .map_err(refuse),
        Some("subscribe") if header.subscription.is_some() => serde_json::from_str(text)
            .map(ClientFrame::QueueSubscribe)
            .map_err(refuse),
        Some("subscribe") => serde_json::from_str(text)
            .map(ClientFrame::Subscribe)
            .map_err(refuse),
        Some("commit") => serde_json::from_str(text)
            .map(ClientFrame::Commit)
            .map_err(refuse),
        Some("ack") => serde_json::from_str(text)
            .map(ClientFrame::Ack)
            .map_err(refuse),
        Some("nack") => serde_json::from_str(text)
            .map(ClientFrame::Nack)
            .map_err(refuse),
        Some("extend") => serde_json::from_str(text)
            .map(ClientFrame::Extend)
            .map_err(refuse),
        Some("unsubscribe") => serde_json::from_str(text)
            .map(ClientFrame::Unsubscribe)
            .map_err(refuse),
        Some("credit") => serde_json::from_str(text)
            .map(ClientFrame::Credit)
            .map_err(refuse),
        Some("auth") => serde_json::from_str(text)
            .map(ClientFrame::Auth)
            .map_err(refuse),
        Some(other) => Err(FrameError::Refused(
            id,
            ApiError::invalid_request(format!(
                "unknown op '{other}': expected publish, subscribe, unsubscribe, credit, commit, ack, nack, extend or auth"
            )),
        )),
        None => Err(FrameError::Refused(
            id,
            ApiError::invalid_request("a frame needs an op"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> (Option<Value>, ApiError) {
        match parse_client_frame(text) {
            Err(FrameError::Refused(id, error)) => (id, error),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn unknown_op_and_missing_fields_are_refused_with_the_id() {
        let (id, error) = refused(r#"{"op": "dance", "id": "a"}"#);
        assert_eq!(id, Some(Value::from("a")));
        assert!(error.detail.contains("dance"), "{}", error.detail);
        let (_, error) = refused(r#"{"op": "subscribe", "id": "b"}"#);
        assert!(error.detail.contains("topic"), "{}", error.detail);
        assert!(matches!(
            parse_client_frame("{nope"),
            Err(FrameError::NotJson(_))
        ));
    }

    #[test]
    fn publish_keeps_values_as_sent() {
        let frame = parse_client_frame(
            r#"{"op":"publish","id":"p","topic":"t","messages":[{"value": {"a" : 1}}]}"#,
        )
        .unwrap();
        let ClientFrame::Publish(publish) = frame else {
            panic!("not a publish")
        };
        assert_eq!(
            publish.messages[0].value.as_ref().unwrap().get(),
            r#"{"a" : 1}"#
        );
    }

    #[test]
    fn from_takes_names_offsets_and_resume_tokens() {
        let frame = parse_client_frame(
            r#"{"op": "subscribe", "id": "s", "topic": "t", "from": "0:3,1:7"}"#,
        )
        .unwrap();
        let ClientFrame::Subscribe(subscribe) = frame else {
            panic!("not a subscribe")
        };
        assert!(matches!(subscribe.from, Some(FromSpec::Text(ref token)) if token == "0:3,1:7"));
        let frame =
            parse_client_frame(r#"{"op": "subscribe", "id": "s", "topic": "t", "from": 12}"#)
                .unwrap();
        let ClientFrame::Subscribe(subscribe) = frame else {
            panic!("not a subscribe")
        };
        assert!(matches!(subscribe.from, Some(FromSpec::Offset(12))));
    }

    #[test]
    fn subscribe_takes_a_topic_a_group_or_a_subscription() {
        let frame = parse_client_frame(
            r#"{"op":"subscribe","id":"g","group":"workers","topics":["a","b"],"credit":5}"#,
        )
        .unwrap();
        let ClientFrame::GroupSubscribe(group) = frame else {
            panic!("not a group subscribe")
        };
        assert_eq!(group.topics, ["a", "b"]);
        assert_eq!(group.credit, Some(5));
        assert!(!group.auto_commit);
        let frame =
            parse_client_frame(r#"{"op":"subscribe","id":"q","subscription":"jobs"}"#).unwrap();
        assert!(matches!(frame, ClientFrame::QueueSubscribe(ref q) if q.subscription == "jobs"));
        let (id, error) = refused(r#"{"op":"subscribe","id":"x","group":"g","subscription":"s"}"#);
        assert_eq!(id, Some(Value::from("x")));
        assert!(error.detail.contains("one of"), "{}", error.detail);
        // A topic field on a group subscribe is not silently ignored.
        let (_, error) =
            refused(r#"{"op":"subscribe","id":"x","group":"g","topics":["a"],"topic":"a"}"#);
        assert!(error.detail.contains("topic"), "{}", error.detail);
    }

    #[test]
    fn settle_frames_keep_their_op() {
        let frame =
            parse_client_frame(r#"{"op":"nack","id":"q","ack_ids":["1.0.0.1.0"],"delay_ms":0}"#)
                .unwrap();
        assert!(matches!(frame, ClientFrame::Nack(ref nack) if nack.delay_ms == Some(0)));
        assert_eq!(frame.op(), "nack");
        let (_, error) = refused(r#"{"op":"commit","id":"g"}"#);
        assert!(error.detail.contains("offsets"), "{}", error.detail);
    }
}
