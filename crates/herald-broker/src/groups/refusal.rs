//! The broker errors for group requests the replicated state refused, in one place so every
//! group operation words them alike.

use crate::{BrokerError, BrokerResult, ErrorCode};
use herald_domain::groups::GroupOutcome;
use herald_domain::names::validate_name;

pub(super) fn check_group_name(name: &str) -> BrokerResult<()> {
    validate_name("group", name).map_err(BrokerError::InvalidRequest)
}

pub(super) fn unknown_member(group: &str, member_id: &str) -> BrokerError {
    BrokerError::NotFound {
        code: ErrorCode::UnknownMember,
        message: format!(
            "group '{group}' has no member '{member_id}' (it left, or its session expired): join again"
        ),
    }
}

pub(super) fn group_not_found(group: &str) -> BrokerError {
    BrokerError::NotFound {
        code: ErrorCode::GroupNotFound,
        message: format!("group '{group}' does not exist"),
    }
}

pub(super) fn not_empty(group: &str, members: usize) -> BrokerError {
    BrokerError::Conflict {
        code: ErrorCode::GroupNotEmpty,
        message: format!(
            "group '{group}' has {members} live member(s); this needs a group without members"
        ),
    }
}

pub(super) fn stale_generation(group: &str, current: u64) -> BrokerError {
    BrokerError::Conflict {
        code: ErrorCode::StaleGeneration,
        message: format!(
            "group '{group}' rebalanced: its generation is {current} now; heartbeat for the new assignments"
        ),
    }
}

/// The broker error for a group command the state refused.
pub(super) fn refusal(group: &str, member_id: &str, outcome: GroupOutcome) -> BrokerError {
    match outcome {
        GroupOutcome::GroupNotFound => group_not_found(group),
        GroupOutcome::UnknownMember => unknown_member(group, member_id),
        GroupOutcome::StaleGeneration { current } => stale_generation(group, current),
        GroupOutcome::NotAssigned(partition) => BrokerError::Conflict {
            code: ErrorCode::PartitionNotAssigned,
            message: format!(
                "partition {partition} is not assigned to member '{member_id}' in this generation"
            ),
        },
        GroupOutcome::GroupNotEmpty { members } => not_empty(group, members),
        GroupOutcome::TooManyMembers { max } => BrokerError::Conflict {
            code: ErrorCode::GroupFull,
            message: format!("group '{group}' already has its maximum of {max} members"),
        },
        GroupOutcome::OffsetMoved { partition, .. } => BrokerError::Conflict {
            code: ErrorCode::ConcurrentPoll,
            message: format!(
                "another poll or commit of this member changed the offset of {partition} first"
            ),
        },
        GroupOutcome::PastLogEnd(_)
        | GroupOutcome::Joined { .. }
        | GroupOutcome::Rebalanced { .. }
        | GroupOutcome::Committed { .. }
        | GroupOutcome::Done => {
            BrokerError::Internal(format!("group '{group}': unexpected outcome {outcome:?}"))
        }
    }
}
