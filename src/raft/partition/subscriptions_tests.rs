//! The subscription apply logic: leases, fenced acks, redelivery with backoff, nacks,
//! extensions, dead-letter leases, the window bound and retention.

use super::subscriptions::{
    apply, backoff_ms, LeaseRef, QueueCommand, QueueOutcome, QueueStates, MAX_WINDOW,
};
use crate::domain::subscriptions::RetryPolicy;

/// Deliveries, dead letters and the lease token.
type Leased = (Vec<(u64, u32)>, Vec<(u64, u32)>, u64);

const SUB: u64 = 7;
const RETRY: RetryPolicy = RetryPolicy {
    min_backoff_ms: 100,
    max_backoff_ms: 1_000,
};

fn lease(states: &mut QueueStates, index: u64, now_ms: i64, max: u32, hw: u64) -> Leased {
    lease_with(states, index, now_ms, max, hw, None)
}

fn lease_with(
    states: &mut QueueStates,
    index: u64,
    now_ms: i64,
    max: u32,
    hw: u64,
    max_attempts: Option<u32>,
) -> Leased {
    let command = QueueCommand::Lease {
        subscription: SUB,
        now_ms,
        max_messages: max,
        ack_deadline_ms: 1_000,
        start_offset: 0,
        retry: RETRY,
        max_attempts,
    };
    match apply(states, index, &command, 0, hw) {
        QueueOutcome::Leased {
            deliveries,
            dead_letters,
            token,
            ..
        } => (deliveries, dead_letters, token),
        other => panic!("not leased: {other:?}"),
    }
}

fn refs(deliveries: &[(u64, u32)], token: u64) -> Vec<LeaseRef> {
    deliveries
        .iter()
        .map(|(offset, attempt)| LeaseRef {
            offset: *offset,
            attempt: *attempt,
            token,
        })
        .collect()
}

fn ack(states: &mut QueueStates, now_ms: i64, leases: Vec<LeaseRef>) -> Vec<bool> {
    let command = QueueCommand::Ack {
        subscription: SUB,
        now_ms,
        leases,
    };
    match apply(states, 0, &command, 0, u64::MAX) {
        QueueOutcome::Settled { live } => live,
        other => panic!("not settled: {other:?}"),
    }
}

#[test]
fn two_leases_never_share_an_offset_and_acks_advance_the_acked_through_point() {
    let mut states = QueueStates::new();
    let (first, _, token_a) = lease(&mut states, 10, 0, 3, 5);
    let (second, _, token_b) = lease(&mut states, 11, 0, 3, 5);
    assert_eq!(first, [(0, 1), (1, 1), (2, 1)]);
    assert_eq!(second, [(3, 1), (4, 1)]);
    let (third, _, _) = lease(&mut states, 12, 0, 3, 5);
    assert!(third.is_empty(), "nothing left to lease");
    // Acked out of order: the acked-through point waits for the gap.
    assert_eq!(ack(&mut states, 1, refs(&second, token_b)), [true, true]);
    assert_eq!(states[&SUB].acked_through, 0);
    assert_eq!(
        ack(&mut states, 1, refs(&first, token_a)),
        [true, true, true]
    );
    assert_eq!(states[&SUB].acked_through, 5);
    assert!(states[&SUB].pending.is_empty());
    // The same acks again change nothing.
    assert_eq!(
        ack(&mut states, 2, refs(&first, token_a)),
        [false, false, false]
    );
}

#[test]
fn an_expired_lease_comes_back_after_the_backoff_and_a_late_ack_is_expired() {
    let mut states = QueueStates::new();
    let (first, _, token) = lease(&mut states, 10, 0, 1, 1);
    assert_eq!(first, [(0, 1)]);
    // At the deadline the lease is over; the backoff is not yet.
    let backoff = backoff_ms(&RETRY, 0, 1) as i64;
    assert!((100..=1_000).contains(&backoff));
    let (none, _, _) = lease(&mut states, 11, 1_000 + backoff - 1, 1, 1);
    assert!(none.is_empty());
    let (again, _, token_2) = lease(&mut states, 12, 1_000 + backoff, 1, 1);
    assert_eq!(again, [(0, 2)]);
    assert_eq!(
        ack(&mut states, 1_000 + backoff, refs(&first, token)),
        [false]
    );
    assert_eq!(
        ack(&mut states, 1_000 + backoff, refs(&again, token_2)),
        [true]
    );
    assert_eq!(states[&SUB].acked_through, 1);
}

#[test]
fn nack_with_a_delay_and_extend_move_the_delivery() {
    let mut states = QueueStates::new();
    let (first, _, token) = lease(&mut states, 10, 0, 2, 2);
    let nack = QueueCommand::Nack {
        subscription: SUB,
        now_ms: 10,
        leases: refs(&first[..1], token),
        delay_ms: Some(500),
        retry: RETRY,
    };
    assert_eq!(
        apply(&mut states, 11, &nack, 0, 2),
        QueueOutcome::Settled { live: vec![true] }
    );
    let extend = QueueCommand::Extend {
        subscription: SUB,
        now_ms: 900,
        leases: refs(&first[1..], token),
        ack_deadline_ms: 5_000,
    };
    assert_eq!(
        apply(&mut states, 12, &extend, 0, 2),
        QueueOutcome::Settled { live: vec![true] }
    );
    assert!(lease(&mut states, 13, 509, 2, 2).0.is_empty());
    let (retried, _, _) = lease(&mut states, 14, 510, 2, 2);
    assert_eq!(retried, [(0, 2)]);
    // The extended lease is still live past its first deadline.
    assert_eq!(ack(&mut states, 4_000, refs(&first[1..], token)), [true]);
}

#[test]
fn past_its_attempts_a_message_is_leased_for_dead_lettering_until_confirmed() {
    let mut states = QueueStates::new();
    let (first, _, _) = lease_with(&mut states, 10, 0, 1, 1, Some(1));
    assert_eq!(first, [(0, 1)]);
    let due = 1_000 + backoff_ms(&RETRY, 0, 1) as i64;
    let (deliveries, dead, token) = lease_with(&mut states, 11, due, 1, 1, Some(1));
    assert!(deliveries.is_empty());
    assert_eq!(dead, [(0, 1)]);
    let done = QueueCommand::DeadLettered {
        subscription: SUB,
        now_ms: due + 1,
        leases: refs(&dead, token),
    };
    assert_eq!(
        apply(&mut states, 12, &done, 0, 1),
        QueueOutcome::Settled { live: vec![true] }
    );
    assert_eq!(states[&SUB].dead_lettered, 1);
    assert_eq!(states[&SUB].acked_through, 1);
}

#[test]
fn the_window_bounds_what_is_delivered_and_retention_drops_what_is_gone() {
    let mut states = QueueStates::new();
    let (first, _, _) = lease(&mut states, 10, 0, u32::MAX, MAX_WINDOW * 2);
    assert_eq!(first.len() as u64, MAX_WINDOW);
    assert!(lease(&mut states, 11, 0, 10, MAX_WINDOW * 2).0.is_empty());
    // Retention removed the first half: those offsets are gone, the window moves.
    let command = QueueCommand::Lease {
        subscription: SUB,
        now_ms: 0,
        max_messages: 10,
        ack_deadline_ms: 1_000,
        start_offset: 0,
        retry: RETRY,
        max_attempts: None,
    };
    let QueueOutcome::Leased { deliveries, .. } =
        apply(&mut states, 12, &command, MAX_WINDOW / 2, MAX_WINDOW * 2)
    else {
        panic!("not leased")
    };
    assert_eq!(deliveries.first(), Some(&(MAX_WINDOW, 1)));
    assert_eq!(states[&SUB].acked_through, MAX_WINDOW / 2);
    assert_eq!(states[&SUB].pending.len() as u64, MAX_WINDOW / 2 + 10);
}

#[test]
fn backoff_doubles_within_the_policy_and_replicas_agree() {
    for attempt in 1..30 {
        for offset in 0..50 {
            let backoff = backoff_ms(&RETRY, offset, attempt);
            assert!((100..=1_000).contains(&backoff), "{backoff}");
            assert_eq!(backoff, backoff_ms(&RETRY, offset, attempt));
        }
    }
    assert!(backoff_ms(&RETRY, 1, 1) <= 100);
    assert!(backoff_ms(&RETRY, 1, 3) >= 320);
    assert!(backoff_ms(&RETRY, 1, 10) >= 800);
}
