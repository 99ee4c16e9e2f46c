//! Golden bytes of a partition's queue commands and their outcomes (raft entries and replies
//! of partition groups): one sample of every [`DeliveryCommand`] and [`DeliveryOutcome`]
//! variant (see `engine::entry_fixtures`).

use herald_domain::subscriptions::RetryPolicy;

use super::subscriptions::{
    DeadLetter, DeadLetterReason, DeliveryCommand, DeliveryOutcome, LeaseFacts, LeaseRef,
    MessageFacts,
};
use crate::engine::entry_fixtures::check_enum;

const NOW_MS: i64 = 1_700_000_000_000;

fn retry() -> RetryPolicy {
    RetryPolicy {
        min_backoff_ms: 1_000,
        max_backoff_ms: 60_000,
    }
}

fn leases() -> Vec<LeaseRef> {
    vec![LeaseRef {
        offset: 17,
        attempt: 2,
        token: 901,
    }]
}

fn command_name(command: &DeliveryCommand) -> &'static str {
    match command {
        DeliveryCommand::Lease { .. } => "lease",
        DeliveryCommand::Ack { .. } => "ack",
        DeliveryCommand::Nack { .. } => "nack",
        DeliveryCommand::Extend { .. } => "extend",
        DeliveryCommand::DeadLettered { .. } => "dead-lettered",
        DeliveryCommand::Seek { .. } => "seek",
        DeliveryCommand::Forget { .. } => "forget",
    }
}

fn commands() -> Vec<DeliveryCommand> {
    vec![
        DeliveryCommand::Lease {
            subscription: 4,
            now_ms: NOW_MS,
            max_messages: 10,
            ack_deadline_ms: 30_000,
            start_offset: 0,
            retry: retry(),
            max_attempts: Some(5),
            key_ordering: true,
            facts: LeaseFacts {
                first_offset: 17,
                messages: vec![MessageFacts {
                    key_hash: Some(0x0123_4567_89ab_cdef),
                    deliver_at_ms: Some(NOW_MS + 60_000),
                    expires_at_ms: None,
                }],
            },
        },
        DeliveryCommand::Ack {
            subscription: 4,
            now_ms: NOW_MS,
            leases: leases(),
        },
        DeliveryCommand::Nack {
            subscription: 4,
            now_ms: NOW_MS,
            leases: leases(),
            delay_ms: Some(5_000),
            retry: retry(),
            dead_letter: false,
        },
        DeliveryCommand::Extend {
            subscription: 4,
            now_ms: NOW_MS,
            leases: leases(),
            ack_deadline_ms: 60_000,
        },
        DeliveryCommand::DeadLettered {
            subscription: 4,
            now_ms: NOW_MS,
            leases: leases(),
        },
        DeliveryCommand::Seek {
            subscription: 4,
            now_ms: NOW_MS,
            offset: 100,
        },
        DeliveryCommand::Forget { subscription: 4 },
    ]
}

fn outcome_name(outcome: &DeliveryOutcome) -> &'static str {
    match outcome {
        DeliveryOutcome::Leased { .. } => "leased",
        DeliveryOutcome::Settled { .. } => "settled",
        DeliveryOutcome::NackedToDeadLetter { .. } => "nacked-to-dead-letter",
        DeliveryOutcome::Sought { .. } => "sought",
        DeliveryOutcome::Forgotten => "forgotten",
    }
}

fn outcomes() -> Vec<DeliveryOutcome> {
    vec![
        DeliveryOutcome::Leased {
            deliveries: vec![(17, 2)],
            dead_letters: vec![DeadLetter {
                offset: 9,
                attempt: 5,
                reason: DeadLetterReason::MaxAttempts,
            }],
            token: 901,
            deadline_ms: NOW_MS + 30_000,
        },
        DeliveryOutcome::Settled {
            live: vec![true, false],
        },
        DeliveryOutcome::NackedToDeadLetter {
            live: vec![true],
            token: 902,
        },
        DeliveryOutcome::Sought { offset: 100 },
        DeliveryOutcome::Forgotten,
    ]
}

fn reason_name(reason: &DeadLetterReason) -> &'static str {
    match reason {
        DeadLetterReason::MaxAttempts => "max-attempts",
        DeadLetterReason::Expired => "expired",
        DeadLetterReason::Nacked => "nacked",
    }
}

#[test]
fn queue_commands_and_outcomes_match_their_golden_bytes() {
    check_enum("delivery-command", &commands(), command_name);
    check_enum("delivery-outcome", &outcomes(), outcome_name);
    let reasons = [
        DeadLetterReason::MaxAttempts,
        DeadLetterReason::Expired,
        DeadLetterReason::Nacked,
    ];
    check_enum("dead-letter-reason", &reasons, reason_name);
}
