//! Redrive: starting, showing and cancelling a subscription's redrive job. The job itself runs
//! on the metadata leader (`redrive_runner`); any node answers these calls.

use std::time::Duration;

use super::SubscriptionService;
use crate::topics::now_ms;
use crate::{BrokerError, BrokerResult, ErrorCode, FetchRequest, OffsetSpec};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_domain::redrive::{validate_request, RedriveCommand, RedriveJob, RedriveOutcome};

/// What a client asks of a new redrive.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedriveRequest {
    pub from_offset: Option<u64>,
    pub to_offset: Option<u64>,
    pub max_per_second: Option<u32>,
}

impl SubscriptionService {
    /// Starts a redrive of the subscription's dead letters; answers the job as started.
    pub async fn start_redrive(
        &self,
        name: &str,
        request: RedriveRequest,
    ) -> BrokerResult<RedriveJob> {
        let rate = validate_request(
            request.from_offset,
            request.to_offset,
            request.max_per_second,
        )
        .map_err(BrokerError::InvalidRequest)?;
        let meta = self.get(name)?;
        let Some(policy) = meta.config.dead_letter_policy.clone() else {
            return Err(no_dead_letter_policy(format!(
                "subscription '{name}' has no dead_letter_policy: it has no dead letters to redrive"
            )));
        };
        if let Some(job) = self.redrive_job(meta.id) {
            if job.state == herald_domain::redrive::RedriveState::Running {
                return Err(in_progress(&job));
            }
        }
        let partitions = {
            let metadata = self.core.cluster().metadata().current();
            metadata
                .topics
                .get(&policy.topic)
                .map(|topic| topic.partitions.len() as u32)
                .ok_or_else(|| BrokerError::TopicNotFound(policy.topic.clone()))?
        };
        // The end is fixed now, so what is dead-lettered again during the redrive is not
        // redriven by it (no loop).
        let mut ranges = Vec::with_capacity(partitions as usize);
        for partition in 0..partitions {
            let read = self
                .fetch
                .fetch(FetchRequest {
                    topic: policy.topic.clone(),
                    partition,
                    offset: OffsetSpec::Latest,
                    max_messages: 1,
                    max_wait: Duration::ZERO,
                })
                .await?;
            let start = request.from_offset.unwrap_or(0).max(read.log_start_offset);
            let end = request
                .to_offset
                .map_or(read.high_watermark, |to| to.saturating_add(1))
                .min(read.high_watermark);
            ranges.push((partition, start.min(end), end));
        }
        let command = RedriveCommand::Start {
            subscription: name.to_string(),
            dead_letter_topic: policy.topic,
            from_offset: request.from_offset,
            to_offset: request.to_offset,
            max_per_second: rate,
            ranges,
            now_ms: now_ms(),
        };
        match self.propose_redrive(command).await? {
            RedriveOutcome::Job(job) => Ok(job),
            other => Err(redrive_refusal(name, other)),
        }
    }

    /// The subscription's latest redrive, as this node applied the metadata.
    pub fn redrive(&self, name: &str) -> BrokerResult<RedriveJob> {
        let meta = self.get(name)?;
        self.redrive_job(meta.id)
            .ok_or_else(|| BrokerError::NotFound {
                code: ErrorCode::RedriveNotFound,
                message: format!("subscription '{name}' has no redrive"),
            })
    }

    /// The latest redrive of a subscription, if it ever had one.
    pub fn redrive_job(&self, subscription_id: u64) -> Option<RedriveJob> {
        self.core
            .cluster()
            .metadata()
            .current()
            .redrives
            .by_subscription
            .get(&subscription_id)
            .cloned()
    }

    /// Cancels the running redrive: what it republished stays, the rest is left.
    pub async fn cancel_redrive(&self, name: &str) -> BrokerResult<RedriveJob> {
        self.get(name)?;
        let command = RedriveCommand::Cancel {
            subscription: name.to_string(),
            now_ms: now_ms(),
        };
        match self.propose_redrive(command).await? {
            RedriveOutcome::Job(job) => Ok(job),
            other => Err(redrive_refusal(name, other)),
        }
    }

    pub(super) async fn propose_redrive(
        &self,
        command: RedriveCommand,
    ) -> BrokerResult<RedriveOutcome> {
        match self
            .core
            .cluster()
            .metadata()
            .propose(MetadataCommand::Redrive(command))
            .await?
        {
            MetadataOutcome::Redrive(outcome) => Ok(outcome),
            other => Err(BrokerError::Internal(format!(
                "unexpected answer to a redrive command: {other:?}"
            ))),
        }
    }
}

fn no_dead_letter_policy(message: String) -> BrokerError {
    BrokerError::Conflict {
        code: ErrorCode::NoDeadLetterPolicy,
        message,
    }
}

fn in_progress(job: &RedriveJob) -> BrokerError {
    BrokerError::Conflict {
        code: ErrorCode::RedriveInProgress,
        message: format!(
            "redrive {} of subscription '{}' is running ({} redriven so far); wait for it or cancel it",
            job.id, job.subscription, job.redriven
        ),
    }
}

fn redrive_refusal(name: &str, outcome: RedriveOutcome) -> BrokerError {
    match outcome {
        RedriveOutcome::SubscriptionNotFound => super::subscription_not_found(name),
        RedriveOutcome::NoDeadLetterPolicy(message) => no_dead_letter_policy(message),
        RedriveOutcome::InProgress(job) => in_progress(&job),
        RedriveOutcome::NotRunning => BrokerError::NotFound {
            code: ErrorCode::RedriveNotFound,
            message: format!("subscription '{name}' has no running redrive to cancel"),
        },
        RedriveOutcome::Invalid(message) => BrokerError::InvalidRequest(message),
        other => BrokerError::Internal(format!(
            "unexpected redrive outcome for '{name}': {other:?}"
        )),
    }
}
