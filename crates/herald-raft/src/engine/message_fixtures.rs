//! Golden bytes of the raft service's bodies: a request ([`Envelope`]) of every
//! [`RaftMessage`] variant (AppendEntries, a pipelined one, Vote, PreVote, a snapshot, a
//! leadership transfer) and an answer of every [`RaftReply`] and [`RaftServiceError`] variant,
//! exactly as they travel (see `entry_fixtures` for how they are checked).

use bytes::Bytes;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderError,
    TransferLeaderRequest, VoteRequest, VoteResponse,
};
use openraft::{EntryPayload, StoredMembership};

use herald_domain::wire_version::WIRE_VERSION;
use herald_domain::RaftGroupId;
use herald_wire_fixtures::{assert_covers_every_variant, variant_names, Golden};

use super::entry_fixtures::{check_enum, log_id, membership};
use super::network::{Envelope, RaftMessage, RaftReply, RaftServiceError, RAFT_MESSAGE_VARIANTS};
use super::stream_append::StreamPosition;
use super::types::{Entry, RaftRequest, SnapshotMeta, TypeConfig, Vote};

/// What the raft service answers: the reply, or why the group could not take the message.
type Answer = Result<RaftReply, RaftServiceError>;

fn vote() -> Vote {
    Vote::new_committed(2, 1)
}

fn append_request() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: vote(),
        prev_log_id: Some(log_id(2, 7)),
        entries: vec![Entry {
            log_id: log_id(2, 8),
            payload: EntryPayload::Normal(RaftRequest::Append {
                batch: Bytes::from_static(b"a stored batch"),
            }),
        }],
        leader_commit: Some(log_id(2, 6)),
    }
}

fn heartbeat_request() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: vote(),
        prev_log_id: Some(log_id(2, 8)),
        entries: vec![],
        leader_commit: Some(log_id(2, 8)),
    }
}

fn message_name(envelope: &Envelope) -> &'static str {
    match envelope.message {
        RaftMessage::Append(_) => "append",
        RaftMessage::StreamAppend { .. } => "stream-append",
        RaftMessage::Vote(_) => "vote",
        RaftMessage::PreVote(_) => "pre-vote",
        RaftMessage::Snapshot { .. } => "snapshot",
        RaftMessage::TransferLeader(_) => "transfer-leader",
        RaftMessage::Heartbeats(_) => "heartbeats",
    }
}

fn messages() -> Vec<RaftMessage> {
    let vote_request = VoteRequest::<TypeConfig>::new(Vote::new(3, 2), Some(log_id(2, 9)));
    vec![
        RaftMessage::Append(append_request()),
        RaftMessage::StreamAppend {
            position: StreamPosition { stream: 11, seq: 3 },
            request: append_request(),
        },
        RaftMessage::Vote(vote_request.clone()),
        RaftMessage::PreVote(vote_request),
        RaftMessage::Snapshot {
            vote: vote(),
            meta: SnapshotMeta {
                last_log_id: Some(log_id(2, 9)),
                last_membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
            },
            data: b"the state machine's state".to_vec(),
        },
        RaftMessage::TransferLeader(TransferLeaderRequest::new(vote(), 2, Some(log_id(2, 9)))),
        RaftMessage::Heartbeats(vec![
            (RaftGroupId::new(5), heartbeat_request()),
            (RaftGroupId::new(9), heartbeat_request()),
        ]),
    ]
}

fn answer_name(answer: &Answer) -> &'static str {
    match answer {
        Ok(RaftReply::Append(response)) => match response {
            AppendEntriesResponse::Success => "append-success",
            AppendEntriesResponse::PartialSuccess(_) => "append-partial-success",
            AppendEntriesResponse::Conflict => "append-conflict",
            AppendEntriesResponse::HigherVote(_) => "append-higher-vote",
        },
        Ok(RaftReply::Vote(_)) => "vote",
        Ok(RaftReply::Heartbeats(_)) => "heartbeats",
        Ok(RaftReply::Snapshot(_)) => "snapshot",
        Ok(RaftReply::TransferLeader(Ok(()))) => "transfer-leader",
        Ok(RaftReply::TransferLeader(Err(error))) => match error {
            TransferLeaderError::VoteChanged { .. } => "transfer-leader-vote-changed",
            TransferLeaderError::LogNotFlushed { .. } => "transfer-leader-log-not-flushed",
        },
        Err(RaftServiceError::UnknownGroup(_)) => "unknown-group",
        Err(RaftServiceError::Failed(_)) => "failed",
    }
}

fn append_responses() -> Vec<AppendEntriesResponse<TypeConfig>> {
    vec![
        AppendEntriesResponse::Success,
        AppendEntriesResponse::PartialSuccess(Some(log_id(2, 8))),
        AppendEntriesResponse::Conflict,
        AppendEntriesResponse::HigherVote(Vote::new(3, 2)),
    ]
}

fn transfer_errors() -> Vec<TransferLeaderError<TypeConfig>> {
    vec![
        TransferLeaderError::VoteChanged {
            expected: vote(),
            actual: Vote::new(3, 2),
        },
        TransferLeaderError::LogNotFlushed {
            expected: Some(log_id(2, 9)),
            actual: Some(log_id(2, 8)),
        },
    ]
}

fn replies() -> Vec<RaftReply> {
    let mut replies: Vec<RaftReply> = append_responses()
        .into_iter()
        .map(RaftReply::Append)
        .collect();
    replies.push(RaftReply::Vote(VoteResponse::new(
        vote(),
        Some(log_id(2, 9)),
        true,
    )));
    replies.push(RaftReply::Snapshot(SnapshotResponse::new(vote())));
    replies.push(RaftReply::TransferLeader(Ok(())));
    replies.push(RaftReply::Heartbeats(vec![
        Ok(AppendEntriesResponse::Success),
        Err(RaftServiceError::UnknownGroup(RaftGroupId::new(9))),
    ]));
    replies.extend(
        transfer_errors()
            .into_iter()
            .map(|error| RaftReply::TransferLeader(Err(error))),
    );
    replies
}

fn service_errors() -> Vec<RaftServiceError> {
    vec![
        RaftServiceError::UnknownGroup(RaftGroupId::new(5)),
        RaftServiceError::Failed("the group is shutting down".into()),
    ]
}

#[test]
fn raft_messages_match_their_golden_bytes() {
    let messages = messages();
    assert_covers_every_variant(&messages);
    assert_eq!(
        variant_names::<RaftMessage>().len(),
        RAFT_MESSAGE_VARIANTS as usize,
        "RAFT_MESSAGE_VARIANTS must count RaftMessage's variants"
    );
    let envelopes: Vec<Envelope> = messages
        .into_iter()
        .map(|message| Envelope {
            group: RaftGroupId::new(5),
            message,
        })
        .collect();
    // An envelope is a struct: covered through its message above, checked by name here.
    let mut golden = Golden::new("raft-message", WIRE_VERSION.get());
    for envelope in &envelopes {
        golden.check(message_name(envelope), envelope);
    }
    golden.finish();
}

#[test]
fn raft_answers_match_their_golden_bytes() {
    assert_covers_every_variant(&replies());
    assert_covers_every_variant(&append_responses());
    assert_covers_every_variant(&transfer_errors());
    assert_covers_every_variant(&service_errors());
    let answers: Vec<Answer> = replies()
        .into_iter()
        .map(Ok)
        .chain(service_errors().into_iter().map(Err))
        .collect();
    check_enum("raft-answer", &answers, answer_name);
}

#[test]
fn a_message_of_a_newer_release_is_answered_as_an_unknown_operation() {
    let mut body = postcard::to_stdvec(&RaftGroupId::new(5)).unwrap();
    body.extend(postcard::to_stdvec(&RAFT_MESSAGE_VARIANTS).unwrap());
    body.extend_from_slice(b"whatever a newer message holds");
    assert_eq!(
        super::network::unknown_message_kind(&body),
        Some(RAFT_MESSAGE_VARIANTS as u16)
    );
    // A known message that is broken is a failure, not an unknown operation.
    let mut broken = postcard::to_stdvec(&RaftGroupId::new(5)).unwrap();
    broken.push(2);
    assert_eq!(super::network::unknown_message_kind(&broken), None);
}
