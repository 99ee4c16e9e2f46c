use std::collections::BTreeMap;

use super::*;

fn counts(topic: &str, partitions: u32) -> BTreeMap<String, u32> {
    BTreeMap::from([(topic.to_string(), partitions)])
}

fn join(groups: &mut ConsumerGroups, member: &str, partitions: u32) -> (u64, usize) {
    match groups.apply(&GroupCommand::Join {
        owner: None,
        group: "g".into(),
        member_id: member.into(),
        topics: vec!["t".into()],
        session_timeout_ms: 10_000,
        offset_reset: None,
        partition_counts: counts("t", partitions),
        now_ms: 1,
        max_members: 10,
    }) {
        GroupOutcome::Joined {
            generation,
            assignments,
        } => (generation, assignments.len()),
        other => panic!("join answered {other:?}"),
    }
}

fn owned(groups: &ConsumerGroups, member: &str) -> Vec<TopicPartition> {
    groups.get("g").unwrap().members[member].assignments.clone()
}

fn commit(
    groups: &mut ConsumerGroups,
    member: &str,
    generation: u64,
    partition: u32,
    offset: u64,
) -> GroupOutcome {
    groups.apply(&GroupCommand::Commit {
        group: "g".into(),
        member_id: member.into(),
        generation,
        offsets: vec![(TopicPartition::new("t", partition), offset)],
        past_log_end: Vec::new(),
        now_ms: 2,
    })
}

#[test]
fn joins_bump_the_generation_and_rebalance() {
    let mut groups = ConsumerGroups::default();
    assert_eq!(join(&mut groups, "a", 6), (1, 6));
    assert_eq!(join(&mut groups, "b", 6), (2, 3));
    assert_eq!(owned(&groups, "a").len(), 3);
    assert_eq!(join(&mut groups, "c", 6).0, 3);
    for member in ["a", "b", "c"] {
        assert_eq!(owned(&groups, member).len(), 2);
    }
}

#[test]
fn a_stale_generation_cannot_commit() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 2);
    let partition = owned(&groups, "a")[0].partition;
    assert_eq!(
        commit(&mut groups, "a", 1, partition, 5),
        GroupOutcome::Committed {
            offsets: vec![(TopicPartition::new("t", partition), 5)]
        }
    );
    join(&mut groups, "b", 2);
    assert_eq!(
        commit(&mut groups, "a", 1, partition, 9),
        GroupOutcome::StaleGeneration { current: 2 }
    );
    assert_eq!(
        groups.get("g").unwrap().offsets[&TopicPartition::new("t", partition)].offset,
        5
    );
}

#[test]
fn members_commit_only_their_partitions_and_never_backwards() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 2);
    join(&mut groups, "b", 2);
    let theirs = owned(&groups, "b")[0].partition;
    assert_eq!(
        commit(&mut groups, "a", 2, theirs, 1),
        GroupOutcome::NotAssigned(TopicPartition::new("t", theirs))
    );
    let mine = owned(&groups, "a")[0].partition;
    commit(&mut groups, "a", 2, mine, 10);
    let partition = TopicPartition::new("t", mine);
    assert_eq!(
        commit(&mut groups, "a", 2, mine, 4),
        GroupOutcome::Committed {
            offsets: vec![(partition.clone(), 10)]
        },
        "a commit answers what is stored"
    );
    assert_eq!(groups.get("g").unwrap().committed(&partition), Some(10));
}

#[test]
fn a_commit_past_the_log_end_changes_nothing_once_ownership_is_checked() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 2);
    let past = |member: &str| GroupCommand::Commit {
        group: "g".into(),
        member_id: member.into(),
        generation: 1,
        offsets: vec![
            (TopicPartition::new("t", 0), 5),
            (TopicPartition::new("t", 1), 9),
        ],
        past_log_end: vec![TopicPartition::new("t", 1)],
        now_ms: 2,
    };
    assert_eq!(groups.apply(&past("zz")), GroupOutcome::UnknownMember);
    assert_eq!(
        groups.apply(&past("a")),
        GroupOutcome::PastLogEnd(TopicPartition::new("t", 1))
    );
    assert!(
        groups.get("g").unwrap().offsets.is_empty(),
        "no offset of the request is stored"
    );
}

#[test]
fn unknown_members_and_groups_are_told_apart() {
    let mut groups = ConsumerGroups::default();
    assert_eq!(
        commit(&mut groups, "a", 1, 0, 1),
        GroupOutcome::UnknownMember
    );
    assert!(
        groups.get("g").is_none(),
        "a refused commit creates nothing"
    );
    join(&mut groups, "a", 1);
    assert_eq!(
        commit(&mut groups, "zz", 1, 0, 1),
        GroupOutcome::UnknownMember
    );
    assert_eq!(
        groups.apply(&GroupCommand::Delete { group: "g".into() }),
        GroupOutcome::GroupNotEmpty { members: 1 }
    );
}

#[test]
fn compare_and_commit_sets_only_unchanged_offsets_and_all_or_nothing() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 2);
    let (zero, one) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let swap = |partition: &TopicPartition, expected, offset| OffsetSwap {
        partition: partition.clone(),
        expected,
        offset,
    };
    let compare_and_commit = |swaps: Vec<OffsetSwap>| GroupCommand::CompareAndCommit {
        group: "g".into(),
        member_id: "a".into(),
        generation: 1,
        offsets: swaps,
        now_ms: 3,
    };
    // The reset policy's first choice is recorded where the group had no offset.
    assert_eq!(
        groups.apply(&compare_and_commit(vec![swap(&zero, None, 7)])),
        GroupOutcome::Committed {
            offsets: vec![(zero.clone(), 7)]
        }
    );
    // A second poll that read "no offset" too lost the race: nothing of it is applied.
    assert_eq!(
        groups.apply(&compare_and_commit(vec![
            swap(&one, None, 3),
            swap(&zero, None, 12)
        ])),
        GroupOutcome::OffsetMoved {
            partition: zero.clone(),
            current: Some(7)
        }
    );
    let group = groups.get("g").unwrap();
    assert_eq!(group.committed(&zero), Some(7));
    assert_eq!(group.committed(&one), None, "all or nothing");
    assert_eq!(
        groups.apply(&compare_and_commit(vec![swap(&zero, Some(7), 15)])),
        GroupOutcome::Committed {
            offsets: vec![(zero.clone(), 15)]
        }
    );
    assert_eq!(groups.get("g").unwrap().committed(&zero), Some(15));
    join(&mut groups, "b", 2);
    assert_eq!(
        groups.apply(&compare_and_commit(vec![swap(&zero, Some(15), 20)])),
        GroupOutcome::StaleGeneration { current: 2 }
    );
}

#[test]
fn ownership_is_dated_by_the_generation_it_started_in() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 2);
    join(&mut groups, "b", 2);
    let group = groups.get("g").unwrap();
    let kept = owned(&groups, "a")[0].clone();
    let moved = owned(&groups, "b")[0].clone();
    assert_eq!(
        group.owned_since(&kept),
        Some(1),
        "kept through generation 2"
    );
    assert_eq!(group.owned_since(&moved), Some(2), "moved in generation 2");
    // b leaves: its partition goes back to a, which owns it anew from generation 3.
    groups.apply(&GroupCommand::Leave {
        group: "g".into(),
        member_id: "b".into(),
        partition_counts: counts("t", 2),
        now_ms: 4,
    });
    let group = groups.get("g").unwrap();
    assert_eq!(group.owned_since(&kept), Some(1));
    assert_eq!(group.owned_since(&moved), Some(3));
}

#[test]
fn expiry_and_leaving_rebalance_and_an_empty_group_keeps_its_offsets() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 4);
    join(&mut groups, "b", 4);
    let partition = owned(&groups, "a")[0].partition;
    commit(&mut groups, "a", 2, partition, 3);
    let expired = groups.apply(&GroupCommand::Expire {
        group: "g".into(),
        member_ids: vec!["b".into()],
        partition_counts: counts("t", 4),
        now_ms: 5,
    });
    assert_eq!(expired, GroupOutcome::Rebalanced { generation: 3 });
    assert_eq!(owned(&groups, "a").len(), 4);
    let left = groups.apply(&GroupCommand::Leave {
        group: "g".into(),
        member_id: "a".into(),
        partition_counts: counts("t", 4),
        now_ms: 6,
    });
    assert_eq!(left, GroupOutcome::Rebalanced { generation: 4 });
    let group = groups.get("g").expect("offsets keep the group");
    assert_eq!(group.state(), "empty");
    assert_eq!(group.offsets.len(), 1);
}

#[test]
fn reset_needs_an_empty_group_and_may_go_backwards() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 1);
    commit(&mut groups, "a", 1, 0, 30);
    let reset = GroupCommand::Reset {
        group: "g".into(),
        offsets: vec![(TopicPartition::new("t", 0), 5)],
        now_ms: 7,
    };
    assert_eq!(
        groups.apply(&reset),
        GroupOutcome::GroupNotEmpty { members: 1 }
    );
    groups.apply(&GroupCommand::Leave {
        group: "g".into(),
        member_id: "a".into(),
        partition_counts: counts("t", 1),
        now_ms: 8,
    });
    assert_eq!(groups.apply(&reset), GroupOutcome::Done);
    assert_eq!(
        groups
            .get("g")
            .unwrap()
            .committed(&TopicPartition::new("t", 0)),
        Some(5)
    );
    assert_eq!(
        groups.apply(&GroupCommand::Delete { group: "g".into() }),
        GroupOutcome::Done
    );
    assert!(groups.get("g").is_none());
}

#[test]
fn growing_a_topic_rebalances_and_deleting_it_drops_its_offsets() {
    let mut groups = ConsumerGroups::default();
    join(&mut groups, "a", 1);
    join(&mut groups, "b", 1);
    assert_eq!(owned(&groups, "a").len() + owned(&groups, "b").len(), 1);
    let resized = groups.apply(&GroupCommand::Resize {
        group: "g".into(),
        partition_counts: counts("t", 4),
        now_ms: 9,
    });
    assert_eq!(resized, GroupOutcome::Rebalanced { generation: 3 });
    assert_eq!(owned(&groups, "a").len(), 2);
    // The same counts again change nothing.
    groups.apply(&GroupCommand::Resize {
        group: "g".into(),
        partition_counts: counts("t", 4),
        now_ms: 10,
    });
    assert_eq!(groups.get("g").unwrap().generation, 3);
    let owner = owned(&groups, "a")[0].partition;
    commit(&mut groups, "a", 3, owner, 1);
    groups.apply(&GroupCommand::Resize {
        group: "g".into(),
        partition_counts: counts("t", 0),
        now_ms: 11,
    });
    let group = groups.get("g").unwrap();
    assert!(group.offsets.is_empty());
    assert!(group
        .members
        .values()
        .all(|member| member.assignments.is_empty()));
}

#[test]
fn a_full_group_refuses_another_member() {
    let mut groups = ConsumerGroups::default();
    for member in 0..10 {
        join(&mut groups, &format!("m{member}"), 3);
    }
    let refused = groups.apply(&GroupCommand::Join {
        owner: None,
        group: "g".into(),
        member_id: "late".into(),
        topics: vec!["t".into()],
        session_timeout_ms: 10_000,
        offset_reset: None,
        partition_counts: counts("t", 3),
        now_ms: 1,
        max_members: 10,
    });
    assert_eq!(refused, GroupOutcome::TooManyMembers { max: 10 });
}
