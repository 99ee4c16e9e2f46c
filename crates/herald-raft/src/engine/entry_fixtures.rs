//! Golden bytes of what raft groups replicate and answer: a log entry of each payload kind (as
//! `codec::encode_entry` stores it), every [`RaftRequest`] and [`RaftResponse`] variant, and
//! the metadata state's extension. See `herald_wire_fixtures`: the names come from exhaustive
//! `match`es, the samples must cover every variant, and the fixtures in `migrations/wire/`
//! must decode to the samples and equal their encoding.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;
use openraft::vote::leader_id_adv::LeaderId;
use openraft::{EntryPayload, Membership};
use serde::de::DeserializeOwned;
use serde::Serialize;

use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_domain::schemas::{
    SchemaCommand, SchemaFormat, SchemaRegistry, StoredSchema, TopicSchemas,
};
use herald_domain::wire_version::{WireVersion, WIRE_VERSION};
use herald_wire_fixtures::{assert_covers_every_variant, decode_postcard, Golden};

use super::codec;
use super::types::{
    CompactionPlan, DedupClaim, DedupLimits, Entry, LogId, NodeAddr, RaftRequest, RaftResponse,
};
use crate::metadata::applier::MetadataStateExtension;
use crate::partition::subscriptions::{DeliveryCommand, DeliveryOutcome};

/// Checks `samples` of one enum against the fixtures of `area`.
pub(crate) fn check_enum<T: Serialize + DeserializeOwned + Debug>(
    area: &str,
    samples: &[T],
    name: fn(&T) -> &'static str,
) {
    assert_covers_every_variant(samples);
    let mut golden = Golden::new(area, WIRE_VERSION.get());
    for sample in samples {
        golden.check(name(sample), sample);
    }
    golden.finish();
}

pub(crate) fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

pub(crate) fn membership() -> Membership<u64, NodeAddr> {
    let nodes: BTreeMap<u64, NodeAddr> = [1, 2, 3, 4]
        .into_iter()
        .map(|node| {
            let address = NodeAddr {
                http_addr: String::new(),
                raft_addr: format!("10.0.0.{node}:7000"),
            };
            (node, address)
        })
        .collect();
    // Nodes 1 to 3 vote, node 4 is a learner.
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes).expect("a valid membership")
}

/// A stored batch's bytes: the fixtures are about the entry around it, not its layout (which
/// `domain::batch` owns and tests).
fn batch() -> Bytes {
    Bytes::from_static(b"a stored batch")
}

fn entry_name(entry: &Entry) -> &'static str {
    match entry.payload {
        EntryPayload::Blank => "blank",
        EntryPayload::Normal(_) => "normal",
        EntryPayload::Membership(_) => "membership",
    }
}

fn entries() -> Vec<Entry> {
    vec![
        Entry {
            log_id: log_id(2, 7),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(2, 8),
            payload: EntryPayload::Normal(RaftRequest::Append { batch: batch() }),
        },
        Entry {
            log_id: log_id(2, 9),
            payload: EntryPayload::Membership(membership()),
        },
    ]
}

pub(crate) fn raft_request_name(request: &RaftRequest) -> &'static str {
    match request {
        RaftRequest::Metadata(_) => "metadata",
        RaftRequest::Append { .. } => "append",
        RaftRequest::Trim { .. } => "trim",
        RaftRequest::Compact(_) => "compact",
        RaftRequest::AppendOnce { .. } => "append-once",
        RaftRequest::Delivery(_) => "delivery",
    }
}

pub(crate) fn raft_requests() -> Vec<RaftRequest> {
    vec![
        RaftRequest::Metadata(MetadataCommand::RemoveNode { node_id: 3 }),
        RaftRequest::Append { batch: batch() },
        RaftRequest::Trim {
            log_start_offset: 120,
            time_index_before: Some(1_700_000_000_000),
        },
        RaftRequest::Compact(CompactionPlan {
            clean_end: 100,
            end: 200,
            tombstone_horizon: 50,
            planned_at_ms: 1_700_000_000_000,
        }),
        RaftRequest::AppendOnce {
            batch: batch(),
            claim: DedupClaim {
                idempotency_key: Some("order-42".into()),
                fingerprint: 0xdead_beef,
                leader_time_ms: 1_700_000_000_000,
                limits: DedupLimits {
                    max_age_ms: 86_400_000,
                    max_entries: 10_000,
                },
            },
        },
        RaftRequest::Delivery(DeliveryCommand::Forget { subscription: 4 }),
    ]
}

fn raft_response_name(response: &RaftResponse) -> &'static str {
    match response {
        RaftResponse::Metadata(_) => "metadata",
        RaftResponse::Appended { .. } => "appended",
        RaftResponse::Trimmed { .. } => "trimmed",
        RaftResponse::CompactionQueued { .. } => "compaction-queued",
        RaftResponse::Rejected(_) => "rejected",
        RaftResponse::Duplicate { .. } => "duplicate",
        RaftResponse::OutOfOrderSequence { .. } => "out-of-order-sequence",
        RaftResponse::ProducerFenced { .. } => "producer-fenced",
        RaftResponse::IdempotencyKeyReused => "idempotency-key-reused",
        RaftResponse::Delivery(_) => "delivery",
    }
}

fn raft_responses() -> Vec<RaftResponse> {
    vec![
        RaftResponse::Metadata(MetadataOutcome::TopicExists),
        RaftResponse::Appended {
            base_offset: 1_000,
            offset_span: 10,
        },
        RaftResponse::Trimmed {
            log_start_offset: 120,
        },
        RaftResponse::CompactionQueued { pass: 3 },
        RaftResponse::Rejected("the metadata group takes only metadata commands".into()),
        RaftResponse::Duplicate {
            base_offset: Some(990),
            offset_span: 10,
        },
        RaftResponse::OutOfOrderSequence { expected: 12 },
        RaftResponse::ProducerFenced { current_epoch: 3 },
        RaftResponse::IdempotencyKeyReused,
        RaftResponse::Delivery(DeliveryOutcome::Forgotten),
    ]
}

fn extension_name(extension: &MetadataStateExtension) -> &'static str {
    match extension {
        MetadataStateExtension::V1 { .. } => "v1",
        MetadataStateExtension::V2 { .. } => "v2",
        MetadataStateExtension::V3 { .. } => "v3",
    }
}

#[test]
fn log_entries_match_their_golden_bytes() {
    let entries = entries();
    let payloads: Vec<EntryPayload<RaftRequest, u64, NodeAddr>> =
        entries.iter().map(|entry| entry.payload.clone()).collect();
    assert_covers_every_variant(&payloads);
    let mut golden = Golden::new("raft-entry", WIRE_VERSION.get());
    for entry in &entries {
        let bytes = codec::encode_entry(entry).expect("encodes");
        golden.check_bytes(entry_name(entry), &bytes, format!("{entry:?}"), |stored| {
            let decoded = codec::decode_entry(stored).map_err(|error| error.to_string())?;
            // Through the store's own codec, and whole (not only its `Debug`).
            decode_postcard::<Entry>(stored)?;
            Ok(format!("{decoded:?}"))
        });
    }
    golden.finish();
}

#[test]
fn raft_requests_and_responses_match_their_golden_bytes() {
    check_enum("raft-request", &raft_requests(), raft_request_name);
    check_enum("raft-response", &raft_responses(), raft_response_name);
}

#[test]
fn the_metadata_state_extension_matches_its_golden_bytes() {
    let mut registry = SchemaRegistry::default();
    registry.apply(
        &SchemaCommand::Register {
            subject: "orders-value".into(),
            schema: StoredSchema {
                format: SchemaFormat::Json,
                text: r#"{"type":"object"}"#.into(),
                references: Vec::new(),
            },
            checked_against: None,
        },
        |_| true,
    );
    registry.apply(
        &SchemaCommand::BindTopic {
            topic: "orders".into(),
            schemas: TopicSchemas {
                key_subject: None,
                value_subject: Some("orders-value".into()),
            },
        },
        |_| true,
    );
    let extensions = vec![
        MetadataStateExtension::V1 {
            cluster_version: WireVersion(1),
        },
        MetadataStateExtension::V2 {
            cluster_version: WireVersion(2),
            schemas: Arc::new(registry.clone()),
        },
        MetadataStateExtension::V3 {
            cluster_version: WireVersion(3),
            schemas: Arc::new(registry),
            zones: herald_domain::zones::Zones(
                [(1, "eu-west-1a".to_string()), (2, "eu-west-1b".to_string())].into(),
            ),
        },
    ];
    check_enum("metadata-state-extension", &extensions, extension_name);
}

#[test]
fn only_entries_newer_than_the_oldest_supported_release_need_a_feature() {
    use herald_domain::wire_version::{ClusterVersion, Feature};
    for request in raft_requests() {
        assert_eq!(request.feature(), None, "{request}");
    }
    let raise = RaftRequest::Metadata(MetadataCommand::RaiseClusterVersion {
        version: WireVersion(1),
    });
    assert_eq!(raise.feature(), Some(Feature::ClusterVersionCommand));
    assert!(!ClusterVersion::default().allows(Feature::ClusterVersionCommand));
}
