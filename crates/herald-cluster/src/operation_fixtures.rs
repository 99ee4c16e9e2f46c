//! Golden bytes of the cluster service: the request of every [`ClusterOperationKind`] (its tag,
//! then the operation) and its replies, one of each variant where the reply is an enum (see
//! `herald_wire_fixtures`). The `match` over the kinds has no wildcard, so a new kind does not
//! compile without its samples; every kind of `ClusterOperationKind::ALL` is checked.

use herald_domain::groups::TopicPartition;
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_domain::wire_version::{WireVersion, WIRE_VERSION};
use herald_domain::RaftGroupId;
use herald_wire_fixtures::{assert_covers_every_variant, Compare, Golden};

use super::groups::{GroupHeartbeat, MemberView};
use super::handback::ReplicaProgressQuery;
use super::metadata_group::Propose;
use super::operation::{ClusterOperation, ClusterOperationKind};
use super::quiescence::{QuiesceGroups, QuietGroup};
use super::service::{
    GroupLeadership, Ping, PingReport, ProposeFailure, ReplicaProgress, VersionedPing,
    VersionedPingReport,
};

fn request<Op: ClusterOperation + std::fmt::Debug>(
    golden: &mut Golden,
    name: &str,
    operation: &Op,
) {
    golden.check_tagged(
        &format!("{name}.request"),
        Op::KIND.tag(),
        operation,
        Compare::Value,
    );
}

fn ping_report() -> PingReport {
    PingReport {
        node_id: 2,
        leads: vec![GroupLeadership {
            group: RaftGroupId::new(7),
            term: 3,
            voters: vec![1, 2, 3],
            learners: vec![4],
            in_sync: vec![1, 2],
            log_start_offset: 10,
            high_watermark: 250,
        }],
    }
}

fn propose_failures() -> Vec<ProposeFailure> {
    vec![
        ProposeFailure::NoLeader,
        ProposeFailure::Failed("the metadata group is shutting down".into()),
        ProposeFailure::TimedOut,
        ProposeFailure::OutcomeUnknown("the connection to node 1 was lost".into()),
    ]
}

fn propose_failure_name(failure: &ProposeFailure) -> &'static str {
    match failure {
        ProposeFailure::NoLeader => "no-leader",
        ProposeFailure::Failed(_) => "failed",
        ProposeFailure::TimedOut => "timed-out",
        ProposeFailure::OutcomeUnknown(_) => "outcome-unknown",
    }
}

/// The samples of `kind`, request and replies.
fn check_kind(golden: &mut Golden, kind: ClusterOperationKind) {
    match kind {
        ClusterOperationKind::Ping => {
            request(golden, "ping", &Ping);
            golden.check("ping.reply", &ping_report());
        }
        ClusterOperationKind::Propose => {
            let propose = Propose {
                command: MetadataCommand::RemoveNode { node_id: 3 },
                hops: 1,
            };
            request(golden, "propose", &propose);
            let done: <Propose as ClusterOperation>::Reply = Ok((MetadataOutcome::Done, 42));
            golden.check("propose.reply-ok", &done);
            for failure in propose_failures() {
                let name = format!("propose.reply-{}", propose_failure_name(&failure));
                let reply: <Propose as ClusterOperation>::Reply = Err(failure);
                golden.check(&name, &reply);
            }
        }
        ClusterOperationKind::GroupHeartbeat => {
            let heartbeat = GroupHeartbeat {
                group: "readers".into(),
                member_id: "m-1".into(),
            };
            request(golden, "group-heartbeat", &heartbeat);
            let member: <GroupHeartbeat as ClusterOperation>::Reply = Ok(Some(MemberView {
                generation: 3,
                assignments: vec![TopicPartition::new("orders", 1)],
            }));
            golden.check("group-heartbeat.reply-member", &member);
            let unknown: <GroupHeartbeat as ClusterOperation>::Reply = Ok(None);
            golden.check("group-heartbeat.reply-unknown-member", &unknown);
            let failed: <GroupHeartbeat as ClusterOperation>::Reply = Err(ProposeFailure::NoLeader);
            golden.check("group-heartbeat.reply-no-leader", &failed);
        }
        ClusterOperationKind::ReplicaProgress => {
            let query = ReplicaProgressQuery {
                group: RaftGroupId::new(7),
            };
            request(golden, "replica-progress", &query);
            let progress: <ReplicaProgressQuery as ClusterOperation>::Reply =
                Some(ReplicaProgress {
                    log_start_offset: 10,
                    high_watermark: 250,
                    applied_index: 261,
                });
            golden.check("replica-progress.reply-replica", &progress);
            let none: <ReplicaProgressQuery as ClusterOperation>::Reply = None;
            golden.check("replica-progress.reply-no-replica", &none);
        }
        ClusterOperationKind::QuiesceGroups => {
            let offer = QuiesceGroups {
                leader: 1,
                groups: vec![
                    QuietGroup {
                        group: RaftGroupId::new(7),
                        term: 3,
                        last_index: 261,
                    },
                    QuietGroup {
                        group: RaftGroupId::new(9),
                        term: 2,
                        last_index: 40,
                    },
                ],
            };
            request(golden, "quiesce-groups", &offer);
            let accepted: <QuiesceGroups as ClusterOperation>::Reply = vec![RaftGroupId::new(7)];
            golden.check("quiesce-groups.reply", &accepted);
        }
        ClusterOperationKind::VersionedPing => {
            request(golden, "versioned-ping", &VersionedPing);
            golden.check(
                "versioned-ping.reply",
                &VersionedPingReport {
                    report: ping_report(),
                    wire_version: WireVersion(1),
                },
            );
        }
    }
}

#[test]
fn cluster_requests_and_replies_match_their_golden_bytes() {
    assert_covers_every_variant(&propose_failures());
    let mut golden = Golden::new("cluster-service", WIRE_VERSION.get());
    for kind in ClusterOperationKind::ALL {
        check_kind(&mut golden, *kind);
    }
    golden.finish();
}
