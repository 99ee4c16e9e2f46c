//! Golden bytes of the broker service: the request of every [`OperationKind`] (its tag, then
//! the operation) and its answers (the tag, then `Result<Reply, WireError>`), one of each
//! variant where the reply is an enum, and every [`WireError`] (see `herald_wire_fixtures`).
//! The `match` over the kinds has no wildcard, so a new kind does not compile without its
//! samples; every kind of `OperationKind::ALL` is checked.
//!
//! Operations with fields that do not travel (a deadline set on arrival, records encoded into
//! the batch before sending) are compared by what travels ([`Compare::WireForm`]).

use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use herald_domain::batch::ProducerStamp;
use herald_domain::subscriptions::RetryPolicy;
use herald_domain::wire_version::WIRE_VERSION;
use herald_domain::{Compression, RaftGroupId};
use herald_raft::{DedupLimits, DeliveryCommand, DeliveryCounts, DeliveryOutcome, LeaseRef};
use herald_wire_fixtures::{assert_covers_every_variant, Compare, Golden};

use super::wire::WireError;
use super::OperationKind;
use crate::fetch::on_leader::{OffsetForTimestamp, RawRead, ReadBatches};
use crate::produce::idempotence::{Landing, OnceClaim};
use crate::produce::on_leader::{AppendRecords, AppendStored};
use crate::produce::stored_once::AppendStoredOnce;
use crate::requests::deliver::DeliverReply;
use crate::requests::waiters::Delivery;
use crate::subscriptions::on_leader::{
    ApplyDeliveryCommand, DeliveryApplied, ReadSubscriptionStats, WaitForLease,
};
use crate::subscriptions::stats::SubscriptionStats;
use crate::types::OffsetSpec;

const GROUP: RaftGroupId = RaftGroupId::new(7);

fn batch() -> Bytes {
    Bytes::from_static(b"a stored batch")
}

/// A request of `kind`, as sent.
fn request<T: Serialize + DeserializeOwned + Debug>(
    golden: &mut Golden,
    name: &str,
    kind: OperationKind,
    operation: &T,
    compare: Compare,
) {
    golden.check_tagged(&format!("{name}.request"), kind.tag(), operation, compare);
}

/// A successful answer to a request of `kind`, as sent back.
fn reply<T: Serialize + DeserializeOwned + Debug>(
    golden: &mut Golden,
    name: &str,
    kind: OperationKind,
    reply: T,
) {
    let answer: Result<T, WireError> = Ok(reply);
    golden.check_tagged(name, kind.tag(), &answer, Compare::Value);
}

fn landings() -> Vec<Landing> {
    vec![
        Landing::Appended { base_offset: 1_000 },
        Landing::Duplicate {
            base_offset: Some(990),
        },
        Landing::OutOfOrderSequence { expected: 12 },
        Landing::ProducerFenced { current_epoch: 3 },
        Landing::IdempotencyKeyReused,
    ]
}

fn landing_name(landing: &Landing) -> &'static str {
    match landing {
        Landing::Appended { .. } => "append-records.reply-appended",
        Landing::Duplicate { .. } => "append-records.reply-duplicate",
        Landing::OutOfOrderSequence { .. } => "append-records.reply-out-of-order-sequence",
        Landing::ProducerFenced { .. } => "append-records.reply-producer-fenced",
        Landing::IdempotencyKeyReused => "append-records.reply-idempotency-key-reused",
    }
}

fn offset_specs() -> Vec<OffsetSpec> {
    vec![OffsetSpec::At(42), OffsetSpec::Earliest, OffsetSpec::Latest]
}

fn offset_spec_name(spec: &OffsetSpec) -> &'static str {
    match spec {
        OffsetSpec::At(_) => "read-batches",
        OffsetSpec::Earliest => "read-batches-earliest",
        OffsetSpec::Latest => "read-batches-latest",
    }
}

fn deliveries() -> Vec<Delivery> {
    vec![
        Delivery::Delivered,
        Delivery::NoWaiter,
        Delivery::TooLarge {
            size: 2_000_000,
            max: 1_048_576,
        },
    ]
}

fn delivery_name(delivery: &Delivery) -> &'static str {
    match delivery {
        Delivery::Delivered => "deliver-reply.reply-delivered",
        Delivery::NoWaiter => "deliver-reply.reply-no-waiter",
        Delivery::TooLarge { .. } => "deliver-reply.reply-too-large",
    }
}

/// The samples of `kind`, request and replies.
fn check_kind(golden: &mut Golden, kind: OperationKind) {
    match kind {
        OperationKind::AppendRecords => {
            let append = AppendRecords {
                group: GROUP,
                records: Vec::new(),
                stamp: ProducerStamp::NONE,
                batch: Some(batch()),
                compression: Compression::Lz4,
                leader_ack: true,
                claim: Some(OnceClaim {
                    idempotency_key: Some("order-42".into()),
                    fingerprint: 0xdead_beef,
                    limits: DedupLimits {
                        max_age_ms: 86_400_000,
                        max_entries: 10_000,
                    },
                }),
                deadline: Instant::now(),
                arrived: false,
            };
            request(golden, "append-records", kind, &append, Compare::WireForm);
            for landing in landings() {
                reply(golden, landing_name(&landing), kind, landing);
            }
            let refused: Result<Landing, WireError> = Err(WireError::NotLeader);
            golden.check_tagged(
                "append-records.reply-not-leader",
                kind.tag(),
                &refused,
                Compare::Value,
            );
        }
        OperationKind::ReadBatches => {
            for from in offset_specs() {
                let read = ReadBatches {
                    group: GROUP,
                    from,
                    max_records: 100,
                    max_bytes: 1 << 20,
                    max_wait: Duration::from_millis(5_000),
                };
                request(golden, offset_spec_name(&from), kind, &read, Compare::Value);
            }
            let read = RawRead {
                from: 42,
                batches: vec![(42, batch())],
                log_start_offset: 10,
                high_watermark: 50,
            };
            reply(golden, "read-batches.reply", kind, read);
        }
        OperationKind::OffsetForTimestamp => {
            let query = OffsetForTimestamp {
                group: GROUP,
                timestamp: 1_700_000_000_000,
            };
            request(golden, "offset-for-timestamp", kind, &query, Compare::Value);
            reply(golden, "offset-for-timestamp.reply", kind, 42u64);
        }
        OperationKind::ApplyDeliveryCommand => {
            let command = ApplyDeliveryCommand {
                group: GROUP,
                command: DeliveryCommand::Ack {
                    subscription: 4,
                    now_ms: 1_700_000_000_000,
                    leases: vec![LeaseRef {
                        offset: 17,
                        attempt: 2,
                        token: 901,
                    }],
                },
            };
            request(
                golden,
                "apply-delivery-command",
                kind,
                &command,
                Compare::Value,
            );
            let applied = DeliveryApplied {
                outcome: DeliveryOutcome::Settled { live: vec![true] },
                batches: Vec::new(),
            };
            reply(golden, "apply-delivery-command.reply", kind, applied);
        }
        OperationKind::DeliverReply => {
            let deliver = DeliverReply {
                instance: 3,
                correlation_id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
                json: true,
                value: Bytes::from_static(br#"{"ok":true}"#),
                headers: vec![("content-type".into(), "application/json".into())],
            };
            request(golden, "deliver-reply", kind, &deliver, Compare::Value);
            for delivery in deliveries() {
                reply(golden, delivery_name(&delivery), kind, delivery);
            }
        }
        OperationKind::ReadSubscriptionStats => {
            let read = ReadSubscriptionStats {
                group: GROUP,
                subscription: 4,
            };
            request(
                golden,
                "read-subscription-stats",
                kind,
                &read,
                Compare::Value,
            );
            let stats = SubscriptionStats {
                counts: DeliveryCounts {
                    backlog: 10,
                    in_flight: 2,
                    delayed: 1,
                    dead_lettered: 3,
                },
                oldest_unacked_age_ms: Some(1_500),
            };
            reply(golden, "read-subscription-stats.reply", kind, stats);
        }
        OperationKind::WaitForLease => {
            let wait = WaitForLease {
                group: GROUP,
                subscription: 4,
                retry: RetryPolicy {
                    min_backoff_ms: 1_000,
                    max_backoff_ms: 60_000,
                },
                max_wait: Duration::from_millis(20_000),
            };
            request(golden, "wait-for-lease", kind, &wait, Compare::Value);
            reply(golden, "wait-for-lease.reply", kind, ());
        }
        OperationKind::AppendStored => {
            let append = AppendStored {
                group: GROUP,
                batch: batch(),
                leader_ack: false,
                deadline: Instant::now(),
            };
            request(golden, "append-stored", kind, &append, Compare::WireForm);
            reply(golden, "append-stored.reply", kind, 1_000u64);
        }
        OperationKind::AppendStoredOnce => {
            let append = AppendStoredOnce {
                group: GROUP,
                batch: batch(),
                claim: OnceClaim {
                    idempotency_key: None,
                    fingerprint: 0x0bad_cafe,
                    limits: DedupLimits {
                        max_age_ms: 86_400_000,
                        max_entries: 10_000,
                    },
                },
                deadline: Instant::now(),
            };
            request(
                golden,
                "append-stored-once",
                kind,
                &append,
                Compare::WireForm,
            );
            for landing in landings() {
                let name = landing_name(&landing).replace("append-records", "append-stored-once");
                reply(golden, &name, kind, landing);
            }
        }
    }
}

fn wire_errors() -> Vec<WireError> {
    vec![
        WireError::NotLeader,
        WireError::OffsetOutOfRange {
            offset: 5,
            log_start_offset: 10,
            high_watermark: 50,
        },
        WireError::Timeout("the append to commit".into()),
        WireError::Failed("bad forwarded request: eof".into()),
        WireError::Overloaded("the partition's appender is full".into()),
        WireError::Unavailable("the share's deadline passed".into()),
        WireError::UnknownOperation(99),
        WireError::InsufficientStorage("the data directory is under its reserve".into()),
    ]
}

fn wire_error_name(error: &WireError) -> &'static str {
    match error {
        WireError::NotLeader => "not-leader",
        WireError::OffsetOutOfRange { .. } => "offset-out-of-range",
        WireError::Timeout(_) => "timeout",
        WireError::Failed(_) => "failed",
        WireError::Overloaded(_) => "overloaded",
        WireError::Unavailable(_) => "unavailable",
        WireError::UnknownOperation(_) => "unknown-operation",
        WireError::InsufficientStorage(_) => "insufficient-storage",
    }
}

#[test]
fn broker_requests_and_answers_match_their_golden_bytes() {
    assert_covers_every_variant(&landings());
    assert_covers_every_variant(&offset_specs());
    assert_covers_every_variant(&deliveries());
    let mut golden = Golden::new("broker-service", WIRE_VERSION.get());
    for kind in OperationKind::ALL {
        check_kind(&mut golden, *kind);
    }
    golden.finish();
}

#[test]
fn broker_wire_errors_match_their_golden_bytes() {
    let errors = wire_errors();
    assert_covers_every_variant(&errors);
    let mut golden = Golden::new("broker-wire-error", WIRE_VERSION.get());
    for error in &errors {
        golden.check(wire_error_name(error), error);
    }
    golden.finish();
}
