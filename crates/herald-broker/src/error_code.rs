//! Every stable problem `code` a client can receive, with the HTTP status and title it answers.
//!
//! Clients branch on `code`, generated SDKs enumerate it, and the docs list it: so the codes
//! live in this one enum rather than as string literals where errors are made, and
//! `api::problem` (and any later transport) renders them from here. One table below declares
//! each code's wire name, status and title together, so they cannot drift apart; tests check
//! that the OpenAPI document and `docs/errors.md` list exactly these codes.
//!
//! One code answers one status, with one exception kept deliberately: `offset_out_of_range` is
//! 416 on reads (API.md) and 409 on a commit past the end of the log, where the request is
//! refused against the partition's current state.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

macro_rules! error_codes {
    ($( $(#[doc = $doc:literal])* $variant:ident = ($name:literal, $status:literal, $title:literal), )*) => {
        /// A stable, machine-readable problem code (`snake_case` on the wire).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl ErrorCode {
            /// Every code, in the order the docs list them.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $name,)* }
            }

            /// The HTTP status this code answers (see the module doc for
            /// `offset_out_of_range`).
            pub fn status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }

            /// A short, human-readable summary of the problem type (the problem's `title`).
            pub fn title(self) -> &'static str {
                match self { $(ErrorCode::$variant => $title,)* }
            }
        }
    };
}

error_codes! {
    /// 400: the request is malformed or a value is out of range.
    InvalidRequest = ("invalid_request", 400, "Invalid request"),
    /// 404: no route for this path.
    NotFound = ("not_found", 404, "Not found"),
    /// 405: the path does not serve this method.
    MethodNotAllowed = ("method_not_allowed", 405, "Method not allowed"),
    /// 413: the request body is over the server's limit.
    PayloadTooLarge = ("payload_too_large", 413, "Payload too large"),
    /// 415: a `Content-Type` the endpoint does not take.
    UnsupportedMediaType = ("unsupported_media_type", 415, "Unsupported media type"),
    /// 500: a fault of the server; the cause is logged, not answered.
    InternalError = ("internal_error", 500, "Internal error"),
    /// 404: the topic does not exist.
    TopicNotFound = ("topic_not_found", 404, "Topic not found"),
    /// 404: the topic has no such partition.
    PartitionNotFound = ("partition_not_found", 404, "Partition not found"),
    /// 409: a topic of that name exists with another configuration.
    TopicExists = ("topic_exists", 409, "Topic already exists"),
    /// 413: a message is over the topic's `max_message_bytes`.
    MessageTooLarge = ("message_too_large", 413, "Message too large"),
    /// 416 on reads (outside the log), 409 on commits (past the end of the log).
    OffsetOutOfRange = ("offset_out_of_range", 416, "Offset out of range"),
    /// 503 with `Retry-After`: no leader is known for the partition or the metadata.
    NoLeader = ("no_leader", 503, "No leader"),
    /// 503 with `Retry-After`: the node cannot serve the request now; nothing was done.
    Unavailable = ("unavailable", 503, "Service unavailable"),
    /// 503 with `Retry-After`: a limit of the node or of a partition is reached (requests in
    /// flight, bytes queued for a partition); nothing was done.
    Overloaded = ("overloaded", 503, "Overloaded"),
    /// 504: no answer in time; the change may or may not have been made.
    Timeout = ("timeout", 504, "Timed out"),
    /// 409: the node id, or one of its addresses, is taken.
    NodeExists = ("node_exists", 409, "Node exists"),
    /// 409: the replication factor is more than the nodes that take replicas now (up and not
    /// draining).
    NotEnoughNodes = ("not_enough_nodes", 409, "Not enough nodes"),
    /// 409: the node cannot be drained (the last one, or its replicas have nowhere to go).
    CannotDrain = ("cannot_drain", 409, "Cannot drain"),
    /// 409: a rebalance cannot start now (a node is draining).
    CannotRebalance = ("cannot_rebalance", 409, "Cannot rebalance"),
    /// 404: no node with this id.
    NodeNotFound = ("node_not_found", 404, "Node not found"),
    /// 421: the request is about another node, which must be asked itself (its address is in
    /// the detail).
    NotThisNode = ("not_this_node", 421, "Not this node"),
    /// 409: a backup with this name exists on the node.
    BackupExists = ("backup_exists", 409, "Backup exists"),
    /// 409: the node has no backup directory.
    BackupsDisabled = ("backups_disabled", 409, "Backups disabled"),
    /// 404: the group has no such member (it left, or its session expired).
    UnknownMember = ("unknown_member", 404, "Unknown member"),
    /// 404: the group does not exist.
    GroupNotFound = ("group_not_found", 404, "Group not found"),
    /// 409: the group has live members; the change needs an empty group.
    GroupNotEmpty = ("group_not_empty", 409, "Group not empty"),
    /// 409: the group rebalanced since the generation the request names.
    StaleGeneration = ("stale_generation", 409, "Stale generation"),
    /// 409: the partition is not assigned to the member in this generation.
    PartitionNotAssigned = ("partition_not_assigned", 409, "Partition not assigned"),
    /// 409: the group has its maximum of members.
    GroupFull = ("group_full", 409, "Group full"),
    /// 409: another poll or commit of the same member changed a committed offset first (polls
    /// read again instead of answering it).
    ConcurrentPoll = ("concurrent_poll", 409, "Concurrent poll"),
    /// 409: an idempotent producer's sequence does not continue the partition's.
    OutOfOrderSequence = ("out_of_order_sequence", 409, "Out of order sequence"),
    /// 409: a newer epoch of the producer id took over.
    ProducerFenced = ("producer_fenced", 409, "Producer fenced"),
    /// 409: the `Idempotency-Key` was used for a different request.
    IdempotencyKeyReused = ("idempotency_key_reused", 409, "Idempotency key reused"),
    /// 404: the subscription does not exist.
    SubscriptionNotFound = ("subscription_not_found", 404, "Subscription not found"),
    /// 409: the change touches what is fixed at creation (a subscription's topic or start).
    SubscriptionConflict = ("subscription_conflict", 409, "Subscription conflict"),
    /// 409: the subscription's redrive is running; wait for it or cancel it.
    RedriveInProgress = ("redrive_in_progress", 409, "Redrive in progress"),
    /// 409: the subscription has no dead-letter policy, so nothing to redrive.
    NoDeadLetterPolicy = ("no_dead_letter_policy", 409, "No dead-letter policy"),
    /// 404: the subscription has no redrive (none was started, or none runs to cancel).
    RedriveNotFound = ("redrive_not_found", 404, "Redrive not found"),
    /// 404: no request waits for this reply (it timed out, was answered already, its node
    /// restarted, or the ids were never handed out).
    NoWaitingRequest = ("no_waiting_request", 404, "No waiting request"),
    /// 404: no OAuth2 client with this id.
    ClientNotFound = ("client_not_found", 404, "Client not found"),
    /// 409: an OAuth2 client with this id exists.
    ClientExists = ("client_exists", 409, "Client exists"),
    /// 429 with `Retry-After`: the client is over one of its quotas (the detail names it);
    /// nothing was done.
    QuotaExceeded = ("quota_exceeded", 429, "Quota exceeded"),
    /// 401: authentication is on and the request has no valid bearer token (with
    /// `WWW-Authenticate: Bearer`).
    Unauthorized = ("unauthorized", 401, "Unauthorized"),
    /// 403: the token is valid but none of its roles has the right the operation needs.
    Forbidden = ("forbidden", 403, "Forbidden"),
    /// 400: an `application/vnd.herald.batch` body is not a batch Herald can store as it is
    /// (truncated, bad magic, an inconsistent length, count or record, a field a producer must
    /// leave alone); nothing was written.
    InvalidBatch = ("invalid_batch", 400, "Invalid batch"),
    /// 400: an `application/vnd.herald.batch` body's CRC-32C does not match its bytes (damaged
    /// on the way, or computed over the wrong range); nothing was written.
    BatchCrcMismatch = ("batch_crc_mismatch", 400, "Batch CRC mismatch"),
    /// 400: an `application/vnd.herald.batch` body has a layout version this server does not
    /// read; nothing was written.
    UnsupportedBatchVersion = ("unsupported_batch_version", 400, "Unsupported batch version"),
    /// 409 (a WebSocket `error` frame): the socket has its maximum of subscriptions
    /// (`ws.max_subscriptions`); nothing was subscribed.
    TooManySubscriptions = ("too_many_subscriptions", 409, "Too many subscriptions"),
    /// 507: the data directory of the partition's leader is under its free-space reserve
    /// (`storage.disk_reserve_bytes`); nothing was written. Writes resume by themselves once
    /// space is freed (retention, a deleted topic, a bigger volume).
    InsufficientStorage = ("insufficient_storage", 507, "Insufficient storage"),
    /// 404 (schema registry, Confluent 40401): the subject does not exist (or has no live
    /// version).
    SubjectNotFound = ("subject_not_found", 404, "Subject not found"),
    /// 404 (schema registry, Confluent 40402): the subject has no such version.
    VersionNotFound = ("version_not_found", 404, "Version not found"),
    /// 404 (schema registry, Confluent 40403): no schema with this id, or not under the subject.
    SchemaNotFound = ("schema_not_found", 404, "Schema not found"),
    /// 404 (schema registry, Confluent 40404): the subject is soft-deleted already.
    SubjectSoftDeleted = ("subject_soft_deleted", 404, "Subject soft-deleted"),
    /// 404 (schema registry, Confluent 40405): a permanent delete needs a soft delete first.
    SubjectNotSoftDeleted = ("subject_not_soft_deleted", 404, "Subject not soft-deleted"),
    /// 404 (schema registry, Confluent 40406): the version is soft-deleted already.
    VersionSoftDeleted = ("version_soft_deleted", 404, "Version soft-deleted"),
    /// 404 (schema registry, Confluent 40407): a permanent delete needs a soft delete first.
    VersionNotSoftDeleted = ("version_not_soft_deleted", 404, "Version not soft-deleted"),
    /// 404 (schema registry, Confluent 40408): the subject has no level of its own.
    SubjectLevelNotSet = ("subject_level_not_set", 404, "Subject compatibility not set"),
    /// 409 (schema registry, Confluent 409): the schema breaks the subject's compatibility
    /// level; the detail lists what breaks.
    IncompatibleSchema = ("incompatible_schema", 409, "Incompatible schema"),
    /// 422 (schema registry, Confluent 42201): the schema does not parse, or a reference does
    /// not resolve.
    InvalidSchema = ("invalid_schema", 422, "Invalid schema"),
    /// 422 (schema registry, Confluent 42202): a version is not a number from 1 or `latest`.
    InvalidVersion = ("invalid_version", 422, "Invalid version"),
    /// 422 (schema registry, Confluent 42203): not a compatibility level.
    InvalidCompatibilityLevel = ("invalid_compatibility_level", 422, "Invalid compatibility level"),
    /// 422 (schema registry, Confluent 42206): live schemas reference what the delete would
    /// remove.
    SchemaReferenced = ("schema_referenced", 422, "Schema referenced"),
    /// 400: a produced message does not follow the schema its topic requires (which message,
    /// which schema and where are in the detail); nothing of the request was written.
    SchemaValidationFailed = ("schema_validation_failed", 400, "Schema validation failed"),
}

impl ErrorCode {
    /// Seconds for a `Retry-After` header: nothing was done, and the condition is expected to
    /// pass soon.
    pub fn retry_after_seconds(self) -> Option<u32> {
        match self {
            ErrorCode::NoLeader | ErrorCode::Unavailable | ErrorCode::Overloaded => Some(1),
            // Space comes back when retention or a delete frees it: not within a second.
            ErrorCode::InsufficientStorage => Some(30),
            _ => None,
        }
    }
}

impl ErrorCode {
    /// The numeric `error_code` Confluent's Schema Registry answers for this problem, which
    /// its clients read: the registry's own codes for its refusals, the HTTP status with a
    /// `01` suffix for a 5xx, and the bare status otherwise (as Confluent's REST layer does).
    pub fn confluent_error_code(self) -> u32 {
        match self {
            ErrorCode::SubjectNotFound => 40401,
            ErrorCode::VersionNotFound => 40402,
            ErrorCode::SchemaNotFound => 40403,
            ErrorCode::SubjectSoftDeleted => 40404,
            ErrorCode::SubjectNotSoftDeleted => 40405,
            ErrorCode::VersionSoftDeleted => 40406,
            ErrorCode::VersionNotSoftDeleted => 40407,
            ErrorCode::SubjectLevelNotSet => 40408,
            ErrorCode::IncompatibleSchema => 409,
            ErrorCode::InvalidSchema => 42201,
            ErrorCode::InvalidVersion => 42202,
            ErrorCode::InvalidCompatibilityLevel => 42203,
            ErrorCode::SchemaReferenced => 42206,
            ErrorCode::InvalidRequest => 42201,
            other if other.status() >= 500 => u32::from(other.status()) * 100 + 1,
            other => u32::from(other.status()),
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire name serde writes is the name the table declares (a typo in either would make
    /// the problem body and the OpenAPI enum disagree).
    #[test]
    fn every_code_serializes_as_its_declared_name() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} is declared twice");
            let json = serde_json::to_string(code).expect("serialize");
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ErrorCode = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, *code);
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }
}
