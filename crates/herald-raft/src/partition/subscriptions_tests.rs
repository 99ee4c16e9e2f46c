//! The subscription apply logic: leases, fenced acks, redelivery with backoff, nacks,
//! extensions, dead-letter leases, the window bound and retention.

use super::subscriptions::{
    apply, backoff_ms, DeadLetter, DeliveryCommand, DeliveryOutcome, DeliveryStates, LeaseFacts,
    LeaseRef, MessageFacts, MAX_WINDOW,
};
use herald_domain::subscriptions::RetryPolicy;

/// Deliveries, dead letters (offset, attempt) and the lease token.
type Leased = (Vec<(u64, u32)>, Vec<(u64, u32)>, u64);

const SUB: u64 = 7;
const RETRY: RetryPolicy = RetryPolicy {
    min_backoff_ms: 100,
    max_backoff_ms: 1_000,
};

fn lease(states: &mut DeliveryStates, index: u64, now_ms: i64, max: u32, hw: u64) -> Leased {
    lease_with(states, index, now_ms, max, hw, None)
}

fn lease_with(
    states: &mut DeliveryStates,
    index: u64,
    now_ms: i64,
    max: u32,
    hw: u64,
    max_attempts: Option<u32>,
) -> Leased {
    let (deliveries, dead_letters, token) = lease_facts(
        states,
        index,
        now_ms,
        max,
        hw,
        max_attempts,
        false,
        &plain(hw),
    );
    let dead_letters = dead_letters
        .iter()
        .map(|dead| (dead.offset, dead.attempt))
        .collect();
    (deliveries, dead_letters, token)
}

/// Facts of `count` unkeyed messages without times from offset 0.
fn plain(count: u64) -> Vec<MessageFacts> {
    vec![MessageFacts::default(); count as usize]
}

/// A lease whose leader read `facts` from offset 0 on a log of `facts.len()` messages.
#[allow(clippy::too_many_arguments)]
fn lease_facts(
    states: &mut DeliveryStates,
    index: u64,
    now_ms: i64,
    max: u32,
    hw: u64,
    max_attempts: Option<u32>,
    key_ordering: bool,
    facts: &[MessageFacts],
) -> (Vec<(u64, u32)>, Vec<DeadLetter>, u64) {
    let command = DeliveryCommand::Lease {
        subscription: SUB,
        now_ms,
        max_messages: max,
        ack_deadline_ms: 1_000,
        start_offset: 0,
        retry: RETRY,
        max_attempts,
        key_ordering,
        facts: LeaseFacts {
            first_offset: 0,
            messages: facts.to_vec(),
        },
    };
    match apply(states, index, &command, 0, hw) {
        DeliveryOutcome::Leased {
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

fn ack(states: &mut DeliveryStates, now_ms: i64, leases: Vec<LeaseRef>) -> Vec<bool> {
    let command = DeliveryCommand::Ack {
        subscription: SUB,
        now_ms,
        leases,
    };
    match apply(states, 0, &command, 0, u64::MAX) {
        DeliveryOutcome::Settled { live } => live,
        other => panic!("not settled: {other:?}"),
    }
}

#[test]
fn two_leases_never_share_an_offset_and_acks_advance_the_acked_through_point() {
    let mut states = DeliveryStates::new();
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
    let mut states = DeliveryStates::new();
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
    let mut states = DeliveryStates::new();
    let (first, _, token) = lease(&mut states, 10, 0, 2, 2);
    let nack = DeliveryCommand::Nack {
        subscription: SUB,
        now_ms: 10,
        leases: refs(&first[..1], token),
        delay_ms: Some(500),
        retry: RETRY,
        dead_letter: false,
    };
    assert_eq!(
        apply(&mut states, 11, &nack, 0, 2),
        DeliveryOutcome::Settled { live: vec![true] }
    );
    let extend = DeliveryCommand::Extend {
        subscription: SUB,
        now_ms: 900,
        leases: refs(&first[1..], token),
        ack_deadline_ms: 5_000,
    };
    assert_eq!(
        apply(&mut states, 12, &extend, 0, 2),
        DeliveryOutcome::Settled { live: vec![true] }
    );
    assert!(lease(&mut states, 13, 509, 2, 2).0.is_empty());
    let (retried, _, _) = lease(&mut states, 14, 510, 2, 2);
    assert_eq!(retried, [(0, 2)]);
    // The extended lease is still live past its first deadline.
    assert_eq!(ack(&mut states, 4_000, refs(&first[1..], token)), [true]);
}

#[test]
fn past_its_attempts_a_message_is_leased_for_dead_lettering_until_confirmed() {
    let mut states = DeliveryStates::new();
    let (first, _, _) = lease_with(&mut states, 10, 0, 1, 1, Some(1));
    assert_eq!(first, [(0, 1)]);
    let due = 1_000 + backoff_ms(&RETRY, 0, 1) as i64;
    let (deliveries, dead, token) = lease_with(&mut states, 11, due, 1, 1, Some(1));
    assert!(deliveries.is_empty());
    assert_eq!(dead, [(0, 1)]);
    let done = DeliveryCommand::DeadLettered {
        subscription: SUB,
        now_ms: due + 1,
        leases: refs(&dead, token),
    };
    assert_eq!(
        apply(&mut states, 12, &done, 0, 1),
        DeliveryOutcome::Settled { live: vec![true] }
    );
    assert_eq!(states[&SUB].dead_lettered, 1);
    assert_eq!(states[&SUB].acked_through, 1);
}

#[test]
fn the_window_bounds_what_is_delivered_and_retention_drops_what_is_gone() {
    let mut states = DeliveryStates::new();
    let (first, _, _) = lease(&mut states, 10, 0, u32::MAX, MAX_WINDOW * 2);
    assert_eq!(first.len() as u64, MAX_WINDOW);
    assert!(lease(&mut states, 11, 0, 10, MAX_WINDOW * 2).0.is_empty());
    // Retention removed the first half: those offsets are gone, the window moves.
    let command = DeliveryCommand::Lease {
        subscription: SUB,
        now_ms: 0,
        max_messages: 10,
        ack_deadline_ms: 1_000,
        start_offset: 0,
        retry: RETRY,
        max_attempts: None,
        key_ordering: false,
        facts: LeaseFacts {
            first_offset: MAX_WINDOW,
            messages: plain(10),
        },
    };
    let DeliveryOutcome::Leased { deliveries, .. } =
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

fn keyed(key: u64) -> MessageFacts {
    MessageFacts {
        key_hash: Some(key),
        ..MessageFacts::default()
    }
}

fn nack(
    states: &mut DeliveryStates,
    index: u64,
    now_ms: i64,
    leases: Vec<LeaseRef>,
    dead_letter: bool,
) -> DeliveryOutcome {
    let command = DeliveryCommand::Nack {
        subscription: SUB,
        now_ms,
        leases,
        delay_ms: (!dead_letter).then_some(500),
        retry: RETRY,
        dead_letter,
    };
    apply(states, index, &command, 0, u64::MAX)
}

#[test]
fn with_key_ordering_a_key_waits_for_its_pending_message_and_other_keys_flow() {
    const A: u64 = 1;
    const B: u64 = 2;
    let facts = [
        keyed(A),
        keyed(A),
        keyed(B),
        MessageFacts::default(),
        keyed(A),
    ];
    // Without ordering everything flows at once.
    let mut unordered = DeliveryStates::new();
    let (all, _, _) = lease_facts(&mut unordered, 1, 0, 10, 5, None, false, &facts);
    assert_eq!(all.len(), 5);

    let mut states = DeliveryStates::new();
    let (first, _, token) = lease_facts(&mut states, 1, 0, 10, 5, None, true, &facts);
    assert_eq!(first, [(0, 1), (2, 1), (3, 1)], "A's second and third wait");
    // Read past, though: the read position moved and they wait in `pending`, not delayed.
    assert_eq!(states[&SUB].read_position, 5);
    let counts = states[&SUB].counts(0, 5);
    assert_eq!(
        (counts.in_flight, counts.delayed, counts.backlog),
        (3, 0, 5)
    );
    // Nothing can be leased before a lease expires (blocked keys do not count as due).
    assert!(states[&SUB]
        .next_deliverable(0, 5, &RETRY)
        .is_some_and(|at| at > 1_000));
    assert!(lease_facts(&mut states, 2, 0, 10, 5, None, true, &facts)
        .0
        .is_empty());

    // Acking A's first lets its second go, not its third.
    assert_eq!(ack(&mut states, 1, refs(&first[..1], token)), [true]);
    let (second, _, token) = lease_facts(&mut states, 3, 1, 10, 5, None, true, &facts);
    assert_eq!(second, [(1, 1)]);
    // Nacked, it is still pending: A's third waits through the retry too.
    assert_eq!(
        nack(&mut states, 4, 2, refs(&second, token), false),
        DeliveryOutcome::Settled { live: vec![true] }
    );
    assert!(lease_facts(&mut states, 5, 100, 10, 5, None, true, &facts)
        .0
        .is_empty());
    let (retried, _, token) = lease_facts(&mut states, 6, 502, 10, 5, None, true, &facts);
    assert_eq!(retried, [(1, 2)]);
    assert_eq!(ack(&mut states, 503, refs(&retried, token)), [true]);
    let (third, _, _) = lease_facts(&mut states, 7, 503, 10, 5, None, true, &facts);
    assert_eq!(third, [(4, 1)]);
}

#[test]
fn a_message_is_not_leased_before_its_deliver_at_and_counts_as_delayed() {
    let mut facts = plain(2);
    facts[0].deliver_at_ms = Some(1_000);
    let mut states = DeliveryStates::new();
    let (first, _, _) = lease_facts(&mut states, 1, 0, 10, 2, None, false, &facts);
    assert_eq!(first, [(1, 1)]);
    let counts = states[&SUB].counts(0, 2);
    assert_eq!((counts.in_flight, counts.delayed), (1, 1));
    assert_eq!(
        states[&SUB].acked_through, 0,
        "the delayed message is not done"
    );
    assert_eq!(states[&SUB].next_deliverable(0, 2, &RETRY), Some(1_000));
    assert!(lease_facts(&mut states, 2, 999, 10, 2, None, false, &facts)
        .0
        .is_empty());
    let (due, _, _) = lease_facts(&mut states, 3, 1_000, 10, 2, None, false, &facts);
    assert_eq!(due, [(0, 1)]);
}

#[test]
fn an_expired_message_is_dead_lettered_with_reason_expired_or_dropped_without_a_topic() {
    use super::subscriptions::DeadLetterReason;
    let mut facts = plain(2);
    facts[0].expires_at_ms = Some(50);
    facts[1].expires_at_ms = Some(5_000);
    let mut states = DeliveryStates::new();
    let (first, dead, token) = lease_facts(&mut states, 1, 100, 10, 2, Some(5), false, &facts);
    assert_eq!(first, [(1, 1)]);
    assert_eq!(
        dead,
        [DeadLetter {
            offset: 0,
            attempt: 0,
            reason: DeadLetterReason::Expired
        }]
    );
    let done = DeliveryCommand::DeadLettered {
        subscription: SUB,
        now_ms: 101,
        leases: vec![LeaseRef {
            offset: 0,
            attempt: 0,
            token,
        }],
    };
    assert_eq!(
        apply(&mut states, 2, &done, 0, 2),
        DeliveryOutcome::Settled { live: vec![true] }
    );
    assert_eq!(states[&SUB].dead_lettered, 1);
    // Offset 1 was delivered, not acked, and expires before its retry: dead-lettered then.
    let (again, dead, _) = lease_facts(&mut states, 3, 6_000, 10, 2, Some(5), false, &facts);
    assert!(again.is_empty());
    assert_eq!(
        dead,
        [DeadLetter {
            offset: 1,
            attempt: 1,
            reason: DeadLetterReason::Expired
        }]
    );

    // Without a dead-letter topic an expired message is done without delivery.
    let mut states = DeliveryStates::new();
    let (first, dead, _) = lease_facts(&mut states, 1, 100, 10, 2, None, false, &facts);
    assert_eq!((first, dead), (vec![(1, 1)], vec![]));
    assert_eq!(states[&SUB].acked_through, 1);
    assert_eq!(states[&SUB].dead_lettered, 0);
}

#[test]
fn a_nack_to_the_dead_letter_topic_leases_it_to_the_nacker_then_to_the_next_lease() {
    use super::subscriptions::{DeadLetterReason, DEAD_LETTER_LEASE_MS};
    let mut states = DeliveryStates::new();
    let (first, _, token) = lease(&mut states, 1, 0, 2, 2);
    let outcome = nack(&mut states, 2, 10, refs(&first, token), true);
    assert_eq!(
        outcome,
        DeliveryOutcome::NackedToDeadLetter {
            live: vec![true, true],
            token: 2
        }
    );
    // The nacker confirms one; the other is published by a later lease.
    let done = DeliveryCommand::DeadLettered {
        subscription: SUB,
        now_ms: 20,
        leases: refs(&first[..1], 2),
    };
    assert_eq!(
        apply(&mut states, 3, &done, 0, 2),
        DeliveryOutcome::Settled { live: vec![true] }
    );
    assert!(lease(&mut states, 4, 20, 2, 2).0.is_empty());
    let later = 10 + DEAD_LETTER_LEASE_MS as i64 + 1_000;
    let (deliveries, dead, _) = lease_facts(&mut states, 5, later, 2, 2, Some(5), false, &plain(2));
    assert!(deliveries.is_empty());
    assert_eq!(
        dead,
        [DeadLetter {
            offset: 1,
            attempt: 1,
            reason: DeadLetterReason::Nacked
        }]
    );
}

#[test]
fn seek_restarts_the_subscription_and_drops_leases_and_acks() {
    let mut states = DeliveryStates::new();
    let (first, _, token) = lease(&mut states, 1, 0, 5, 5);
    assert_eq!(ack(&mut states, 1, refs(&first[3..4], token)), [true]);
    let seek = |states: &mut DeliveryStates, offset: u64| {
        let command = DeliveryCommand::Seek {
            subscription: SUB,
            now_ms: 2,
            offset,
        };
        apply(states, 9, &command, 0, 5)
    };
    // Forward: 0 and 1 count as done, every lease is dropped, 3's ack too.
    assert_eq!(seek(&mut states, 2), DeliveryOutcome::Sought { offset: 2 });
    assert_eq!(ack(&mut states, 3, refs(&first[4..], token)), [false]);
    let facts = plain(5);
    let (again, _, _) = lease_facts(&mut states, 10, 3, 10, 5, None, false, &facts);
    assert_eq!(again, [(2, 1), (3, 1), (4, 1)]);
    // Backward: everything from 0 comes again; past the log it clamps to the end.
    assert_eq!(seek(&mut states, 0), DeliveryOutcome::Sought { offset: 0 });
    let (all, _, _) = lease_facts(&mut states, 11, 4, 10, 5, None, false, &facts);
    assert_eq!(all.len(), 5);
    assert_eq!(seek(&mut states, 99), DeliveryOutcome::Sought { offset: 5 });
    assert!(states[&SUB].pending.is_empty());
    // A partition never read starts where the seek says.
    let mut fresh = DeliveryStates::new();
    assert_eq!(seek(&mut fresh, 3), DeliveryOutcome::Sought { offset: 3 });
    let (from_seek, _, _) = lease_facts(&mut fresh, 12, 0, 10, 5, None, false, &facts);
    assert_eq!(from_seek, [(3, 1), (4, 1)]);
}
