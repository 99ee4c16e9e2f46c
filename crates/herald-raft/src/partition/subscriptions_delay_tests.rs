//! Delayed messages cost one entry of the window, not the offsets read after them (issue 29,
//! item 6): a message due in ten minutes at the head of a partition does not stop it once
//! more than [`MAX_WINDOW`] later offsets were read and acked.

use super::subscriptions::{
    apply, DeliveryCommand, DeliveryOutcome, DeliveryStates, LeaseFacts, LeaseRef, MessageFacts,
    MAX_WINDOW,
};
use herald_domain::subscriptions::RetryPolicy;

const SUB: u64 = 3;
const NOW: i64 = 1_000_000;
const RETRY: RetryPolicy = RetryPolicy {
    min_backoff_ms: 100,
    max_backoff_ms: 1_000,
};

fn lease(states: &mut DeliveryStates, index: u64, facts: &[MessageFacts], from: u64) -> Vec<u64> {
    let command = DeliveryCommand::Lease {
        subscription: SUB,
        now_ms: NOW,
        max_messages: 1_000,
        ack_deadline_ms: 30_000,
        start_offset: 0,
        retry: RETRY,
        max_attempts: None,
        key_ordering: false,
        facts: LeaseFacts {
            first_offset: from,
            messages: facts[from as usize..].to_vec(),
        },
    };
    let DeliveryOutcome::Leased {
        deliveries, token, ..
    } = apply(states, index, &command, 0, facts.len() as u64)
    else {
        panic!("not leased")
    };
    let leases: Vec<LeaseRef> = deliveries
        .iter()
        .map(|(offset, attempt)| LeaseRef {
            offset: *offset,
            attempt: *attempt,
            token,
        })
        .collect();
    let ack = DeliveryCommand::Ack {
        subscription: SUB,
        now_ms: NOW,
        leases,
    };
    apply(states, index + 1, &ack, 0, facts.len() as u64);
    deliveries.into_iter().map(|(offset, _)| offset).collect()
}

#[test]
fn a_message_due_later_does_not_stall_its_partition_past_the_window() {
    let total = MAX_WINDOW + 100;
    let mut facts = vec![MessageFacts::default(); total as usize];
    facts[0].deliver_at_ms = Some(NOW + 600_000);
    let mut states = DeliveryStates::new();
    let mut delivered = Vec::new();
    for round in 0..100 {
        let from = states.get(&SUB).map_or(0, |state| state.read_position);
        let leased = lease(&mut states, 10 + round * 2, &facts, from);
        if leased.is_empty() {
            break;
        }
        delivered.extend(leased);
    }
    // Every message but the delayed one, with nothing stuck behind it.
    assert_eq!(delivered, (1..total).collect::<Vec<_>>());
    let state = &states[&SUB];
    assert_eq!(
        state.acked_through, 0,
        "the delayed message holds the point"
    );
    assert_eq!(state.pending.len(), 1, "it costs one entry");
    assert_eq!(state.read_position, total);
}

#[test]
fn the_window_still_bounds_entries_not_done() {
    // Every message delayed: the state takes MAX_WINDOW of them, then reads no further.
    let total = MAX_WINDOW + 50;
    let facts = vec![
        MessageFacts {
            deliver_at_ms: Some(NOW + 600_000),
            ..MessageFacts::default()
        };
        total as usize
    ];
    let mut states = DeliveryStates::new();
    assert!(lease(&mut states, 10, &facts, 0).is_empty());
    let state = &states[&SUB];
    assert_eq!(state.pending.len() as u64, MAX_WINDOW);
    assert_eq!(state.read_position, MAX_WINDOW);
}
