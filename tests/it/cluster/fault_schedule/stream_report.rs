//! What the fault schedule's push streams saw (`stream_phase`), as the summary line prints it,
//! and the checks it must pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::common::fault_stream_group::GroupStreamLog;
use crate::common::fault_stream_queue::{QueueStreamLog, QueueStreamVerdict};
use crate::common::fault_stream_topic::TopicStreamLog;

/// One topic stream's findings.
pub struct TopicStreamReport {
    pub name: &'static str,
    pub log: TopicStreamLog,
    /// Where it differs from the stored log (empty: every message once, in order).
    pub problems: Vec<String>,
}

/// One queue stream's findings.
pub struct QueueStreamReport {
    pub name: &'static str,
    pub log: QueueStreamLog,
    pub verdict: QueueStreamVerdict,
    pub undelivered: Vec<(u32, u64)>,
    /// Deliveries whose value is not the one stored at their position.
    pub altered: Vec<(u32, u64)>,
    /// `(backlog, in_flight)` the subscription showed last.
    pub left: Option<(u64, u64)>,
}

/// One group stream's findings.
pub struct GroupStreamReport {
    pub name: &'static str,
    pub log: GroupStreamLog,
    pub undelivered: Vec<(u32, u64)>,
    /// Deliveries whose value is not the one stored at their position.
    pub altered: Vec<(u32, u64)>,
    pub committed: BTreeMap<u32, u64>,
}

pub struct StreamReport {
    pub produced: usize,
    pub high_watermarks: BTreeMap<u32, u64>,
    pub queues: Vec<QueueStreamReport>,
    pub groups: Vec<GroupStreamReport>,
    pub topics: Vec<TopicStreamReport>,
    pub drained_in: Duration,
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} messages produced, stored {:?}, drained in {:?}",
            self.produced, self.high_watermarks, self.drained_in
        )?;
        for queue in &self.queues {
            let (log, verdict) = (&queue.log, &queue.verdict);
            write!(
                f,
                "; {}: {} reconnects ({} failed connects, ended {:?}), {} deliveries ({} \
                 redeliveries), {} acks failed, {} expired, acked twice {}, delivered after a \
                 confirmed ack {}, never delivered {}, left {:?}",
                queue.name,
                log.connections.saturating_sub(1),
                log.failed_connects,
                log.ended,
                verdict.deliveries,
                verdict.redeliveries,
                log.ack_failures,
                log.expired,
                verdict.acked_twice.len(),
                verdict.delivered_after_ack.len(),
                queue.undelivered.len(),
                queue.left,
            )?;
        }
        for group in &self.groups {
            let log = &group.log;
            let distinct: BTreeSet<(u32, u64)> =
                log.delivered.iter().map(|(p, o, _, _)| (*p, *o)).collect();
            write!(
                f,
                "; {}: {} reconnects ({} failed connects, ended {:?}), {} assignments to {} \
                 members, {} deliveries ({} redeliveries), {} commits ({} refused, {} failed), \
                 gaps {}, never delivered {}, committed {:?}",
                group.name,
                log.connections.saturating_sub(1),
                log.failed_connects,
                log.ended,
                log.assignments,
                log.members.len(),
                log.delivered.len(),
                log.delivered.len() - distinct.len(),
                log.commits,
                log.commits_refused,
                log.commit_failures,
                log.gaps.len(),
                group.undelivered.len(),
                group.committed,
            )?;
        }
        for topic in &self.topics {
            let log = &topic.log;
            write!(
                f,
                "; {}: {} reconnects ({} resumed by token, {} failed connects, ended {:?}), {} \
                 deliveries, differences from the log {:?}",
                topic.name,
                log.connections.saturating_sub(1),
                log.resumed,
                log.failed_connects,
                log.ended,
                log.delivered.len(),
                topic.problems,
            )?;
        }
        Ok(())
    }
}

impl StreamReport {
    pub fn assert_clean(&self) {
        for queue in &self.queues {
            let (name, verdict) = (queue.name, &queue.verdict);
            assert!(
                verdict.acked_twice.is_empty(),
                "{name}: acked twice: {:?}",
                verdict.acked_twice
            );
            assert!(
                verdict.delivered_after_ack.is_empty(),
                "{name}: delivered after a confirmed ack: {:?}",
                verdict.delivered_after_ack
            );
            assert!(
                queue.undelivered.is_empty(),
                "{name}: never delivered: {:?}",
                queue.undelivered
            );
            assert!(
                queue.altered.is_empty(),
                "{name}: not what is stored: {:?}",
                queue.altered
            );
            assert_eq!(
                queue.left,
                Some((0, 0)),
                "{name}: (backlog, in flight) left at the end"
            );
        }
        for group in &self.groups {
            let name = group.name;
            assert!(
                group.log.gaps.is_empty(),
                "{name}: skipped messages: {:?}",
                group.log.gaps
            );
            assert!(
                group.undelivered.is_empty(),
                "{name}: never delivered: {:?}",
                group.undelivered
            );
            assert!(
                group.altered.is_empty(),
                "{name}: not what is stored: {:?}",
                group.altered
            );
            assert_eq!(
                group.committed, self.high_watermarks,
                "{name}: the group's committed offsets against the partitions' ends"
            );
        }
        for queue in &self.queues {
            assert!(
                !queue.log.leases.is_empty(),
                "{}: delivered nothing",
                queue.name
            );
        }
    }
}
