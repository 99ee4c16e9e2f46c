use std::collections::{BTreeMap, BTreeSet};

use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use herald_domain::topic::TopicConfig;

use super::plan::{plan_rebalance, RebalancePlan};
use crate::placement::place_partitions;

fn cluster(nodes: &[u64], zones: &[(u64, &str)]) -> MetadataState {
    let mut state = MetadataState::default();
    for node in nodes {
        state.apply(&MetadataCommand::AddNode {
            node_id: *node,
            http_addr: format!("h{node}"),
            raft_addr: format!("r{node}"),
        });
    }
    for (node, zone) in zones {
        state.apply(&MetadataCommand::SetNodeZone {
            node_id: *node,
            zone: Some((*zone).into()),
        });
    }
    state
}

fn create(state: &mut MetadataState, name: &str, replicas: Vec<Vec<u64>>) {
    let outcome = state.apply(&MetadataCommand::CreateTopic {
        name: name.into(),
        replication_factor: replicas[0].len() as u16,
        config: TopicConfig::default(),
        replicas,
        created_at_ms: 0,
    });
    assert_eq!(outcome, MetadataOutcome::Done);
}

fn all(nodes: &[u64]) -> BTreeSet<u64> {
    nodes.iter().copied().collect()
}

/// Applies the plan as the rebalance does, checking each move is accepted.
fn apply(state: &mut MetadataState, plan: &RebalancePlan) {
    let outcome = state.apply(&MetadataCommand::MoveReplicas {
        moves: plan.moves.clone(),
    });
    assert_eq!(outcome, MetadataOutcome::Done, "{plan:?}");
}

fn counts(state: &MetadataState) -> (BTreeMap<u64, usize>, BTreeMap<u64, usize>) {
    let (mut replicas, mut leaders) = (BTreeMap::new(), BTreeMap::new());
    for (_, _, assignment) in state.partitions() {
        for node in &assignment.replicas {
            *replicas.entry(*node).or_insert(0) += 1;
        }
        *leaders.entry(assignment.replicas[0]).or_insert(0) += 1;
    }
    (replicas, leaders)
}

fn within_one(counts: &BTreeMap<u64, usize>, nodes: &[u64]) -> bool {
    let values: Vec<usize> = nodes
        .iter()
        .map(|node| counts.get(node).copied().unwrap_or(0))
        .collect();
    values.iter().max().unwrap() - values.iter().min().unwrap() <= 1
}

#[test]
fn a_joined_node_gets_an_equal_share_of_replicas_and_leaders() {
    let mut state = cluster(&[1, 2, 3], &[]);
    let placed = place_partitions(&[1, 2, 3], &state.zones, 0, 12, 3).unwrap();
    create(&mut state, "t", placed);
    state.apply(&MetadataCommand::AddNode {
        node_id: 4,
        http_addr: "h4".into(),
        raft_addr: "r4".into(),
    });
    let plan = plan_rebalance(&state, &all(&[1, 2, 3, 4]));
    let share4 = plan.nodes.iter().find(|share| share.node_id == 4).unwrap();
    assert_eq!((share4.replicas_before, share4.replicas_after), (0, 9));
    assert_eq!(share4.leaders_after, 3);
    // Nine partitions copy to node 4, each once; the rest at most reorder.
    assert_eq!(plan.moves.iter().filter(|mv| mv.copies_data()).count(), 9);
    apply(&mut state, &plan);
    let (replicas, leaders) = counts(&state);
    assert_eq!(replicas.values().copied().collect::<Vec<_>>(), vec![9; 4]);
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![3; 4]);
    assert!(plan_rebalance(&state, &all(&[1, 2, 3, 4])).moves.is_empty());
}

#[test]
fn partitions_created_on_one_node_spread_when_others_join() {
    let mut state = cluster(&[1, 2, 3, 4], &[]);
    create(&mut state, "lonely", vec![vec![1]; 10]);
    let plan = plan_rebalance(&state, &all(&[1, 2, 3, 4]));
    apply(&mut state, &plan);
    let (replicas, leaders) = counts(&state);
    assert!(within_one(&replicas, &[1, 2, 3, 4]), "{replicas:?}");
    assert!(within_one(&leaders, &[1, 2, 3, 4]), "{leaders:?}");
}

#[test]
fn a_balanced_cluster_has_nothing_to_do() {
    let mut state = cluster(&[1, 2, 3], &[]);
    let placed = place_partitions(&[1, 2, 3], &state.zones, 0, 30, 3).unwrap();
    create(&mut state, "t", placed);
    let placed = place_partitions(&[1, 2, 3], &state.zones, 30, 7, 2).unwrap();
    create(&mut state, "u", placed);
    let plan = plan_rebalance(&state, &all(&[1, 2, 3]));
    assert!(plan.moves.is_empty(), "{plan:?}");
    assert!(plan
        .nodes
        .iter()
        .all(|share| share.replicas_before == share.replicas_after));
}

#[test]
fn replicas_placed_before_zones_spread_over_them_and_no_move_narrows_a_partition() {
    let zones = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")];
    let mut state = cluster(&[1, 2, 3, 4, 5, 6], &zones);
    // Placed as if zones were unknown: some partitions sit in one or two zones.
    create(
        &mut state,
        "old",
        vec![
            vec![1, 2, 3],
            vec![2, 1, 4],
            vec![3, 4, 5],
            vec![5, 6, 1],
            vec![1, 2, 5],
        ],
    );
    let spread_before: Vec<usize> = spreads(&state, &zones);
    let plan = plan_rebalance(&state, &all(&[1, 2, 3, 4, 5, 6]));
    apply(&mut state, &plan);
    let spread_after = spreads(&state, &zones);
    assert!(
        spread_after.iter().all(|spread| *spread == 3),
        "{spread_after:?}"
    );
    assert!(spread_before.iter().any(|spread| *spread < 3));
    let (replicas, _) = counts(&state);
    assert!(within_one(&replicas, &[1, 2, 3, 4, 5, 6]), "{replicas:?}");
}

fn spreads(state: &MetadataState, zones: &[(u64, &str)]) -> Vec<usize> {
    let zone: BTreeMap<u64, &str> = zones.iter().copied().collect();
    state
        .partitions()
        .map(|(_, _, assignment)| {
            assignment
                .replicas
                .iter()
                .map(|node| zone[node])
                .collect::<BTreeSet<_>>()
                .len()
        })
        .collect()
}

#[test]
fn balancing_keeps_spread_when_zones_are_uneven() {
    // Zone a has three nodes, b one: a replica on node 4 (b) never moves to a zone-a node
    // where the partition has one already, however loaded node 4 is.
    let zones = [(1, "a"), (2, "a"), (3, "a"), (4, "b")];
    let mut state = cluster(&[1, 2, 3, 4], &zones);
    create(
        &mut state,
        "t",
        vec![vec![4, 1], vec![4, 2], vec![4, 3], vec![4, 1]],
    );
    let plan = plan_rebalance(&state, &all(&[1, 2, 3, 4]));
    apply(&mut state, &plan);
    let spread = spreads(&state, &zones);
    assert!(spread.iter().all(|spread| *spread == 2), "{spread:?}");
    assert!(plan.moves.iter().all(|mv| !mv.copies_data()), "{plan:?}");
}

#[test]
fn leaders_balance_by_reordering_without_copying() {
    let mut state = cluster(&[1, 2, 3], &[]);
    create(&mut state, "t", vec![vec![1, 2, 3]; 6]);
    let plan = plan_rebalance(&state, &all(&[1, 2, 3]));
    assert!(!plan.moves.is_empty());
    assert!(plan.moves.iter().all(|mv| !mv.copies_data()), "{plan:?}");
    apply(&mut state, &plan);
    let (_, leaders) = counts(&state);
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
}

#[test]
fn partitions_on_a_node_that_takes_no_part_are_left_alone() {
    let mut state = cluster(&[1, 2, 3, 4], &[]);
    create(
        &mut state,
        "t",
        vec![vec![1, 2], vec![1, 3], vec![1, 2], vec![1, 3]],
    );
    // Node 3 is down: partitions 1 and 3 stay; node 3's load is not counted.
    let plan = plan_rebalance(&state, &all(&[1, 2, 4]));
    assert!(plan
        .moves
        .iter()
        .all(|mv| mv.partition == 0 || mv.partition == 2));
    assert!(plan.moves.iter().all(|mv| !mv.to.contains(&3)));
    assert!(plan.nodes.iter().all(|share| share.node_id != 3));
}

#[test]
fn one_node_has_nothing_to_balance() {
    let mut state = cluster(&[1], &[]);
    create(&mut state, "t", vec![vec![1]; 3]);
    assert!(plan_rebalance(&state, &all(&[1])).moves.is_empty());
}

#[test]
fn planning_ten_thousand_partitions_for_a_fourth_node_is_bounded() {
    let mut state = cluster(&[1, 2, 3], &[]);
    for topic in 0..100 {
        let placed = place_partitions(&[1, 2, 3], &state.zones, topic * 100, 100, 3).unwrap();
        create(&mut state, &format!("t{topic}"), placed);
    }
    state.apply(&MetadataCommand::AddNode {
        node_id: 4,
        http_addr: "h4".into(),
        raft_addr: "r4".into(),
    });
    let plan = plan_rebalance(&state, &all(&[1, 2, 3, 4]));
    apply(&mut state, &plan);
    let (replicas, leaders) = counts(&state);
    assert!(within_one(&replicas, &[1, 2, 3, 4]), "{replicas:?}");
    assert!(within_one(&leaders, &[1, 2, 3, 4]), "{leaders:?}");
}
