//! Redrive jobs: a subscription's dead letters republished to its topic (see `docs/queues.md`
//! § Redrive).
//!
//! A job lives in the metadata group with its checkpoint: per dead-letter partition the next
//! offset to republish and the end fixed when the job started. The runner (on the metadata
//! leader) republishes one batch at a time and then moves the checkpoint with a
//! compare-and-set ([`RedriveCommand::Progress`] names the offset it read from), so two runners
//! (an old leader that has not noticed yet and a new one) can never move it backwards or count
//! a batch twice. Everything here is deterministic: the clock is carried in the commands.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::subscriptions::Subscriptions;

/// `max_per_second` when the request leaves it out.
pub const DEFAULT_REDRIVE_PER_SECOND: u32 = 100;
/// The highest `max_per_second` a redrive may ask for.
pub const MAX_REDRIVE_PER_SECOND: u32 = 10_000;
/// The most messages one republished batch carries.
pub const MAX_REDRIVE_BATCH: u32 = 500;

/// How many messages a job republishes per batch: about five batches a second at its rate,
/// so the rate is smooth and a crash replays little. Fixed at start, because a batch replayed
/// after a crash must be the same batch to be recognised as written.
pub fn batch_size_for(max_per_second: u32) -> u32 {
    (max_per_second / 5).clamp(1, MAX_REDRIVE_BATCH)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedriveState {
    Running,
    Done,
    Failed,
    Cancelled,
}

impl RedriveState {
    pub fn is_running(self) -> bool {
        self == RedriveState::Running
    }
}

/// One dead-letter partition's range and checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedrivePartition {
    pub partition: u32,
    /// Where the job started on this partition.
    pub start: u64,
    /// The next offset to republish: everything below it is done.
    pub next: u64,
    /// Exclusive; the partition's high watermark (or `to_offset + 1`) when the job started.
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveJob {
    /// Unique over the cluster's life: the idempotency keys of its batches derive from it.
    pub id: u64,
    pub subscription: String,
    pub subscription_id: u64,
    pub source_topic: String,
    pub dead_letter_topic: String,
    /// As asked (`None`: each partition's log start / high watermark).
    pub from_offset: Option<u64>,
    pub to_offset: Option<u64>,
    pub max_per_second: u32,
    pub batch_size: u32,
    pub partitions: Vec<RedrivePartition>,
    pub state: RedriveState,
    /// Why it failed.
    pub reason: Option<String>,
    pub redriven: u64,
    pub skipped: u64,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

impl RedriveJob {
    /// Offsets in the job's ranges (dead letters of any subscription, and compaction gaps).
    pub fn total(&self) -> u64 {
        self.partitions.iter().map(|p| p.end - p.start).sum()
    }

    fn finish(&mut self, state: RedriveState, now_ms: i64) {
        self.state = state;
        self.finished_at_ms = Some(now_ms);
    }
}

/// The cluster's redrive jobs: the latest one of each subscription, by subscription id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redrives {
    pub by_subscription: BTreeMap<u64, RedriveJob>,
    pub next_id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedriveCommand {
    /// Starts a job; `ranges` are (dead-letter partition, first offset, end offset) as the
    /// proposer read the partitions' watermarks.
    Start {
        subscription: String,
        dead_letter_topic: String,
        from_offset: Option<u64>,
        to_offset: Option<u64>,
        max_per_second: u32,
        ranges: Vec<(u32, u64, u64)>,
        now_ms: i64,
    },
    /// Moves one partition's checkpoint from `expected_next` to `next` after the batch between
    /// them was republished (and acknowledged by every replica).
    Progress {
        subscription_id: u64,
        job_id: u64,
        partition: u32,
        expected_next: u64,
        next: u64,
        redriven: u64,
        skipped: u64,
        now_ms: i64,
    },
    Fail {
        subscription_id: u64,
        job_id: u64,
        reason: String,
        now_ms: i64,
    },
    Cancel {
        subscription: String,
        now_ms: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedriveOutcome {
    /// The job as it is now (started, moved, finished or cancelled).
    Job(RedriveJob),
    /// A checkpoint move whose expected offset is not the checkpoint (another runner moved it),
    /// or a change to a job that is not running: nothing changed.
    Stale,
    SubscriptionNotFound,
    /// The subscription has no dead-letter policy, or it names another topic than the request
    /// saw.
    NoDeadLetterPolicy(String),
    /// Another job of the subscription is running.
    InProgress(RedriveJob),
    /// `Cancel` of a subscription without a running job.
    NotRunning,
    Invalid(String),
}

/// Checks the settings of a new job; answers the rate to use.
pub fn validate_request(
    from_offset: Option<u64>,
    to_offset: Option<u64>,
    max_per_second: Option<u32>,
) -> Result<u32, String> {
    if let (Some(from), Some(to)) = (from_offset, to_offset) {
        if from > to {
            return Err(format!(
                "from_offset ({from}) must not be greater than to_offset ({to})"
            ));
        }
    }
    let rate = max_per_second.unwrap_or(DEFAULT_REDRIVE_PER_SECOND);
    if !(1..=MAX_REDRIVE_PER_SECOND).contains(&rate) {
        return Err(format!(
            "max_per_second must be between 1 and {MAX_REDRIVE_PER_SECOND}, got {rate}"
        ));
    }
    Ok(rate)
}

impl Redrives {
    pub fn apply(
        &mut self,
        command: &RedriveCommand,
        subscriptions: &Subscriptions,
    ) -> RedriveOutcome {
        match command {
            RedriveCommand::Start {
                subscription,
                dead_letter_topic,
                from_offset,
                to_offset,
                max_per_second,
                ranges,
                now_ms,
            } => {
                let Some(meta) = subscriptions.get(subscription) else {
                    return RedriveOutcome::SubscriptionNotFound;
                };
                let Some(policy) = &meta.config.dead_letter_policy else {
                    return RedriveOutcome::NoDeadLetterPolicy(format!(
                        "subscription '{subscription}' has no dead_letter_policy: it has no dead letters to redrive"
                    ));
                };
                if policy.topic != *dead_letter_topic {
                    return RedriveOutcome::NoDeadLetterPolicy(format!(
                        "subscription '{subscription}' changed its dead-letter topic to '{}' meanwhile; try again",
                        policy.topic
                    ));
                }
                if let Err(reason) =
                    validate_request(*from_offset, *to_offset, Some(*max_per_second))
                {
                    return RedriveOutcome::Invalid(reason);
                }
                if ranges.iter().any(|(_, start, end)| start > end) {
                    return RedriveOutcome::Invalid(
                        "a partition's range ends before it starts".into(),
                    );
                }
                if let Some(job) = self.by_subscription.get(&meta.id) {
                    if job.state == RedriveState::Running {
                        return RedriveOutcome::InProgress(job.clone());
                    }
                }
                self.next_id += 1;
                let mut job = RedriveJob {
                    id: self.next_id,
                    subscription: subscription.clone(),
                    subscription_id: meta.id,
                    source_topic: meta.config.topic.clone(),
                    dead_letter_topic: dead_letter_topic.clone(),
                    from_offset: *from_offset,
                    to_offset: *to_offset,
                    max_per_second: *max_per_second,
                    batch_size: batch_size_for(*max_per_second),
                    partitions: ranges
                        .iter()
                        .map(|(partition, start, end)| RedrivePartition {
                            partition: *partition,
                            start: *start,
                            next: *start,
                            end: *end,
                        })
                        .collect(),
                    state: RedriveState::Running,
                    reason: None,
                    redriven: 0,
                    skipped: 0,
                    started_at_ms: *now_ms,
                    finished_at_ms: None,
                };
                if job.partitions.iter().all(|p| p.next >= p.end) {
                    job.finish(RedriveState::Done, *now_ms);
                }
                self.by_subscription.insert(meta.id, job.clone());
                RedriveOutcome::Job(job)
            }
            RedriveCommand::Progress {
                subscription_id,
                job_id,
                partition,
                expected_next,
                next,
                redriven,
                skipped,
                now_ms,
            } => {
                let Some(job) = self.running_mut(*subscription_id, *job_id) else {
                    return RedriveOutcome::Stale;
                };
                let Some(range) = job
                    .partitions
                    .iter_mut()
                    .find(|p| p.partition == *partition)
                else {
                    return RedriveOutcome::Invalid(format!(
                        "job {job_id} has no dead-letter partition {partition}"
                    ));
                };
                if range.next != *expected_next {
                    return RedriveOutcome::Stale;
                }
                if *next <= *expected_next || *next > range.end {
                    return RedriveOutcome::Invalid(format!(
                        "a checkpoint must move forward within its range: {expected_next} to {next}, range ends at {}",
                        range.end
                    ));
                }
                range.next = *next;
                job.redriven += redriven;
                job.skipped += skipped;
                if job.partitions.iter().all(|p| p.next >= p.end) {
                    job.finish(RedriveState::Done, *now_ms);
                }
                RedriveOutcome::Job(job.clone())
            }
            RedriveCommand::Fail {
                subscription_id,
                job_id,
                reason,
                now_ms,
            } => {
                let Some(job) = self.running_mut(*subscription_id, *job_id) else {
                    return RedriveOutcome::Stale;
                };
                job.reason = Some(reason.clone());
                job.finish(RedriveState::Failed, *now_ms);
                RedriveOutcome::Job(job.clone())
            }
            RedriveCommand::Cancel {
                subscription,
                now_ms,
            } => {
                let Some(meta) = subscriptions.get(subscription) else {
                    return RedriveOutcome::SubscriptionNotFound;
                };
                match self.by_subscription.get_mut(&meta.id) {
                    Some(job) if job.state == RedriveState::Running => {
                        job.finish(RedriveState::Cancelled, *now_ms);
                        RedriveOutcome::Job(job.clone())
                    }
                    _ => RedriveOutcome::NotRunning,
                }
            }
        }
    }

    fn running_mut(&mut self, subscription_id: u64, job_id: u64) -> Option<&mut RedriveJob> {
        self.by_subscription
            .get_mut(&subscription_id)
            .filter(|job| job.id == job_id && job.state == RedriveState::Running)
    }

    /// Drops the jobs of subscriptions that no longer exist (deleted, or their topic was).
    pub fn retain_subscriptions(&mut self, subscriptions: &Subscriptions) {
        let ids: std::collections::BTreeSet<u64> =
            subscriptions.by_name.values().map(|meta| meta.id).collect();
        self.by_subscription.retain(|id, _| ids.contains(id));
    }

    /// The jobs a runner should be working on.
    pub fn running(&self) -> impl Iterator<Item = &RedriveJob> {
        self.by_subscription
            .values()
            .filter(|job| job.state == RedriveState::Running)
    }
}

impl std::fmt::Display for RedriveCommand {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedriveCommand::Start { subscription, .. } => {
                write!(formatter, "start a redrive of {subscription}")
            }
            RedriveCommand::Progress {
                job_id,
                partition,
                next,
                ..
            } => write!(
                formatter,
                "redrive {job_id}: partition {partition} done below {next}"
            ),
            RedriveCommand::Fail { job_id, .. } => write!(formatter, "redrive {job_id} failed"),
            RedriveCommand::Cancel { subscription, .. } => {
                write!(formatter, "cancel the redrive of {subscription}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subscriptions::{
        DeadLetterPolicy, RetryPolicy, StartPosition, SubscriptionCommand, SubscriptionConfig,
    };

    fn subscriptions(with_dead_letters: bool) -> Subscriptions {
        let mut subscriptions = Subscriptions::default();
        for name in ["s", "other"] {
            subscriptions.apply(
                &SubscriptionCommand::Put {
                    name: name.into(),
                    config: SubscriptionConfig {
                        topic: "orders".into(),
                        ack_deadline_ms: 30_000,
                        retry_policy: RetryPolicy::default(),
                        dead_letter_policy: with_dead_letters.then(|| DeadLetterPolicy {
                            topic: "dead".into(),
                            max_delivery_attempts: 3,
                        }),
                        start: StartPosition::Earliest,
                        ordering: Default::default(),
                    },
                    now_ms: 1,
                },
                |_| true,
            );
        }
        subscriptions
    }

    fn start(ranges: Vec<(u32, u64, u64)>) -> RedriveCommand {
        RedriveCommand::Start {
            subscription: "s".into(),
            dead_letter_topic: "dead".into(),
            from_offset: None,
            to_offset: None,
            max_per_second: 50,
            ranges,
            now_ms: 10,
        }
    }

    fn progress(job: &RedriveJob, partition: u32, expected_next: u64, next: u64) -> RedriveCommand {
        RedriveCommand::Progress {
            subscription_id: job.subscription_id,
            job_id: job.id,
            partition,
            expected_next,
            next,
            redriven: next - expected_next,
            skipped: 0,
            now_ms: 20,
        }
    }

    fn started(redrives: &mut Redrives, subscriptions: &Subscriptions) -> RedriveJob {
        match redrives.apply(&start(vec![(0, 0, 10), (1, 5, 8)]), subscriptions) {
            RedriveOutcome::Job(job) => job,
            other => panic!("not started: {other:?}"),
        }
    }

    #[test]
    fn a_job_starts_running_and_a_second_start_is_refused_while_it_runs() {
        let subscriptions = subscriptions(true);
        let mut redrives = Redrives::default();
        let job = started(&mut redrives, &subscriptions);
        assert_eq!(job.state, RedriveState::Running);
        assert_eq!(job.total(), 13);
        assert_eq!(job.batch_size, 10);
        let before = redrives.clone();
        assert!(matches!(
            redrives.apply(&start(vec![(0, 0, 10)]), &subscriptions),
            RedriveOutcome::InProgress(running) if running.id == job.id
        ));
        assert_eq!(redrives, before);
    }

    #[test]
    fn the_checkpoint_moves_only_from_where_it_is_and_the_job_ends_done() {
        let subscriptions = subscriptions(true);
        let mut redrives = Redrives::default();
        let job = started(&mut redrives, &subscriptions);
        let RedriveOutcome::Job(moved) = redrives.apply(&progress(&job, 0, 0, 4), &subscriptions)
        else {
            panic!("not moved")
        };
        assert_eq!(moved.partitions[0].next, 4);
        assert_eq!(moved.redriven, 4);
        // A second runner replaying the same batch, and one behind it: nothing changes.
        let before = redrives.clone();
        assert_eq!(
            redrives.apply(&progress(&job, 0, 0, 4), &subscriptions),
            RedriveOutcome::Stale
        );
        assert_eq!(
            redrives.apply(&progress(&job, 0, 0, 2), &subscriptions),
            RedriveOutcome::Stale
        );
        assert!(matches!(
            redrives.apply(&progress(&job, 0, 4, 11), &subscriptions),
            RedriveOutcome::Invalid(_)
        ));
        assert!(matches!(
            redrives.apply(&progress(&job, 0, 4, 4), &subscriptions),
            RedriveOutcome::Invalid(_)
        ));
        assert_eq!(redrives, before);
        redrives.apply(&progress(&job, 0, 4, 10), &subscriptions);
        let RedriveOutcome::Job(done) = redrives.apply(&progress(&job, 1, 5, 8), &subscriptions)
        else {
            panic!("not moved")
        };
        assert_eq!(done.state, RedriveState::Done);
        assert_eq!(done.finished_at_ms, Some(20));
        assert_eq!(done.redriven, 13);
        // Done: no more moves, no failure, and a new job may start.
        assert_eq!(
            redrives.apply(&progress(&job, 1, 8, 9), &subscriptions),
            RedriveOutcome::Stale
        );
        let fail = RedriveCommand::Fail {
            subscription_id: job.subscription_id,
            job_id: job.id,
            reason: "x".into(),
            now_ms: 30,
        };
        assert_eq!(redrives.apply(&fail, &subscriptions), RedriveOutcome::Stale);
        let again = started(&mut redrives, &subscriptions);
        assert!(again.id > job.id);
    }

    #[test]
    fn an_empty_range_is_done_at_once_and_cancel_and_fail_end_a_running_job() {
        let subscriptions = subscriptions(true);
        let mut redrives = Redrives::default();
        let RedriveOutcome::Job(empty) = redrives.apply(&start(vec![(0, 3, 3)]), &subscriptions)
        else {
            panic!("not started")
        };
        assert_eq!(empty.state, RedriveState::Done);
        let cancel = RedriveCommand::Cancel {
            subscription: "s".into(),
            now_ms: 40,
        };
        assert_eq!(
            redrives.apply(&cancel, &subscriptions),
            RedriveOutcome::NotRunning
        );
        let job = started(&mut redrives, &subscriptions);
        assert!(matches!(
            redrives.apply(&cancel, &subscriptions),
            RedriveOutcome::Job(cancelled) if cancelled.state == RedriveState::Cancelled
        ));
        assert_eq!(
            redrives.apply(&progress(&job, 0, 0, 4), &subscriptions),
            RedriveOutcome::Stale
        );
        let job = started(&mut redrives, &subscriptions);
        let fail = RedriveCommand::Fail {
            subscription_id: job.subscription_id,
            job_id: job.id,
            reason: "the dead-letter topic was deleted".into(),
            now_ms: 50,
        };
        assert!(matches!(
            redrives.apply(&fail, &subscriptions),
            RedriveOutcome::Job(failed) if failed.state == RedriveState::Failed && failed.reason.is_some()
        ));
    }

    #[test]
    fn bad_starts_are_refused_without_change() {
        let mut redrives = Redrives::default();
        assert!(matches!(
            redrives.apply(&start(vec![(0, 0, 1)]), &subscriptions(false)),
            RedriveOutcome::NoDeadLetterPolicy(_)
        ));
        let subscriptions = subscriptions(true);
        let mut unknown = start(vec![]);
        if let RedriveCommand::Start { subscription, .. } = &mut unknown {
            *subscription = "missing".into();
        }
        assert_eq!(
            redrives.apply(&unknown, &subscriptions),
            RedriveOutcome::SubscriptionNotFound
        );
        let mut backwards = start(vec![(0, 0, 1)]);
        if let RedriveCommand::Start {
            from_offset,
            to_offset,
            ..
        } = &mut backwards
        {
            *from_offset = Some(5);
            *to_offset = Some(4);
        }
        assert!(matches!(
            redrives.apply(&backwards, &subscriptions),
            RedriveOutcome::Invalid(_)
        ));
        let mut too_fast = start(vec![(0, 0, 1)]);
        if let RedriveCommand::Start { max_per_second, .. } = &mut too_fast {
            *max_per_second = MAX_REDRIVE_PER_SECOND + 1;
        }
        assert!(matches!(
            redrives.apply(&too_fast, &subscriptions),
            RedriveOutcome::Invalid(_)
        ));
        assert_eq!(redrives, Redrives::default());
    }

    #[test]
    fn jobs_of_deleted_subscriptions_go() {
        let mut subscriptions = subscriptions(true);
        let mut redrives = Redrives::default();
        started(&mut redrives, &subscriptions);
        subscriptions.apply(&SubscriptionCommand::Delete { name: "s".into() }, |_| true);
        redrives.retain_subscriptions(&subscriptions);
        assert!(redrives.by_subscription.is_empty());
    }
}
