//! Which member of a consumer group reads which partition.
//!
//! Every partition of the subscribed topics goes to exactly one member subscribed to its topic.
//! The assignment is *sticky*: a partition stays with its owner unless that owner left, or
//! keeping it would leave the group unbalanced by more than one partition. Moving fewer
//! partitions means fewer consumers re-reading from a committed offset after a rebalance.
//!
//! Runs on every replica of the metadata group as part of applying a command, so it is
//! deterministic: ordered maps, ties broken by member id.

use std::collections::{BTreeMap, BTreeSet};

use super::TopicPartition;

/// The assignment of every partition of the members' topics, by member (each list sorted).
/// `subscriptions` maps member ids to their topics; `previous` maps partitions to their
/// current owners; `partition_counts` gives each topic's partition count (a topic missing or
/// with 0 partitions has nothing to assign).
pub fn assign(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    previous: &BTreeMap<TopicPartition, String>,
    partition_counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut owned: BTreeMap<&str, BTreeSet<TopicPartition>> = subscriptions
        .keys()
        .map(|member| (member.as_str(), BTreeSet::new()))
        .collect();
    let topics: BTreeSet<&String> = subscriptions.values().flatten().collect();
    let mut unassigned = Vec::new();
    for topic in topics {
        let count = partition_counts.get(topic).copied().unwrap_or(0);
        for partition in 0..count {
            let topic_partition = TopicPartition::new(topic, partition);
            let keeper = previous.get(&topic_partition).filter(|owner| {
                subscriptions
                    .get(*owner)
                    .is_some_and(|topics| topics.contains(topic))
            });
            match keeper {
                Some(owner) => {
                    if let Some(partitions) = owned.get_mut(owner.as_str()) {
                        partitions.insert(topic_partition);
                    }
                }
                None => unassigned.push(topic_partition),
            }
        }
    }
    for topic_partition in unassigned {
        let least_loaded = owned
            .iter()
            .filter(|(member, _)| subscribes(subscriptions, member, &topic_partition))
            .min_by_key(|(member, partitions)| (partitions.len(), **member))
            .map(|(member, _)| *member);
        if let Some(member) = least_loaded {
            owned
                .get_mut(member)
                .expect("chosen among the members")
                .insert(topic_partition);
        }
    }
    while let Some((from, to, topic_partition)) = next_move(subscriptions, &owned) {
        owned
            .get_mut(from)
            .expect("a member")
            .remove(&topic_partition);
        owned.get_mut(to).expect("a member").insert(topic_partition);
    }
    owned
        .into_iter()
        .map(|(member, partitions)| (member.to_string(), partitions.into_iter().collect()))
        .collect()
}

fn subscribes(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    member: &str,
    topic_partition: &TopicPartition,
) -> bool {
    subscriptions
        .get(member)
        .is_some_and(|topics| topics.contains(&topic_partition.topic))
}

/// One move that makes the group more even: from the most loaded member that has a partition
/// some member with at least two fewer could take, its highest partition (the low ones stay
/// put) to the least loaded such member. None when no move helps. Every move lowers the sum
/// of squared loads, so repeating it ends.
fn next_move<'a>(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    owned: &BTreeMap<&'a str, BTreeSet<TopicPartition>>,
) -> Option<(&'a str, &'a str, TopicPartition)> {
    let mut by_load: Vec<(&'a str, usize)> = owned
        .iter()
        .map(|(member, partitions)| (*member, partitions.len()))
        .collect();
    by_load.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    for &(from, load) in &by_load {
        if load < 2 {
            break;
        }
        for topic_partition in owned[from].iter().rev() {
            let taker = by_load
                .iter()
                .filter(|(member, member_load)| {
                    *member != from
                        && member_load + 1 < load
                        && subscribes(subscriptions, member, topic_partition)
                })
                .min_by_key(|(member, member_load)| (*member_load, *member));
            if let Some(&(to, _)) = taker {
                return Some((from, to, topic_partition.clone()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(list: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        list.iter()
            .map(|(member, topics)| {
                (
                    member.to_string(),
                    topics.iter().map(|topic| topic.to_string()).collect(),
                )
            })
            .collect()
    }

    fn counts(list: &[(&str, u32)]) -> BTreeMap<String, u32> {
        list.iter()
            .map(|(topic, count)| (topic.to_string(), *count))
            .collect()
    }

    fn owners(
        assignment: &BTreeMap<String, Vec<TopicPartition>>,
    ) -> BTreeMap<TopicPartition, String> {
        assignment
            .iter()
            .flat_map(|(member, partitions)| {
                partitions
                    .iter()
                    .map(move |partition| (partition.clone(), member.clone()))
            })
            .collect()
    }

    fn loads(assignment: &BTreeMap<String, Vec<TopicPartition>>) -> Vec<usize> {
        assignment.values().map(Vec::len).collect()
    }

    #[test]
    fn two_members_split_six_partitions_three_and_three() {
        let subscriptions = members(&[("a", &["t"]), ("b", &["t"])]);
        let assignment = assign(&subscriptions, &BTreeMap::new(), &counts(&[("t", 6)]));
        assert_eq!(loads(&assignment), vec![3, 3]);
        assert_eq!(
            owners(&assignment).len(),
            6,
            "every partition has one owner"
        );
    }

    #[test]
    fn a_third_member_takes_one_from_each_and_nothing_else_moves() {
        let two = members(&[("a", &["t"]), ("b", &["t"])]);
        let before = assign(&two, &BTreeMap::new(), &counts(&[("t", 6)]));
        let three = members(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
        let after = assign(&three, &owners(&before), &counts(&[("t", 6)]));
        assert_eq!(loads(&after), vec![2, 2, 2]);
        let (before_owners, after_owners) = (owners(&before), owners(&after));
        let moved = after_owners
            .iter()
            .filter(|(partition, owner)| before_owners[*partition] != **owner)
            .count();
        assert_eq!(moved, 2, "only what the new member needs moves");
    }

    #[test]
    fn a_leaving_members_partitions_spread_over_the_rest() {
        let ten: Vec<String> = (0..10).map(|index| format!("m{index:02}")).collect();
        let all = ten
            .iter()
            .map(|member| (member.clone(), BTreeSet::from(["t".to_string()])))
            .collect::<BTreeMap<_, _>>();
        let before = assign(&all, &BTreeMap::new(), &counts(&[("t", 30)]));
        assert!(loads(&before).iter().all(|load| *load == 3));
        let mut nine = all.clone();
        nine.remove("m03");
        let after = assign(&nine, &owners(&before), &counts(&[("t", 30)]));
        let after_loads = loads(&after);
        assert_eq!(after_loads.iter().sum::<usize>(), 30);
        assert!(after_loads.iter().all(|load| (3..=4).contains(load)));
        let before_owners = owners(&before);
        for (partition, owner) in owners(&after) {
            if before_owners[&partition] != "m03" {
                assert_eq!(owner, before_owners[&partition], "{partition:?} moved");
            }
        }
    }

    #[test]
    fn members_only_get_partitions_of_their_topics() {
        let subscriptions = members(&[("a", &["x"]), ("b", &["x", "y"]), ("c", &["y"])]);
        let assignment = assign(
            &subscriptions,
            &BTreeMap::new(),
            &counts(&[("x", 4), ("y", 2)]),
        );
        for (member, partitions) in &assignment {
            for partition in partitions {
                assert!(subscriptions[member].contains(&partition.topic));
            }
        }
        assert_eq!(owners(&assignment).len(), 6);
        let spread = loads(&assignment);
        assert!(spread.iter().max().unwrap() - spread.iter().min().unwrap() <= 1);
    }

    #[test]
    fn grown_partitions_are_assigned_and_old_ones_stay() {
        let subscriptions = members(&[("a", &["t"]), ("b", &["t"])]);
        let before = assign(&subscriptions, &BTreeMap::new(), &counts(&[("t", 2)]));
        let after = assign(&subscriptions, &owners(&before), &counts(&[("t", 4)]));
        assert_eq!(loads(&after), vec![2, 2]);
        let after_owners = owners(&after);
        for (partition, owner) in owners(&before) {
            assert_eq!(after_owners[&partition], owner);
        }
    }

    #[test]
    fn more_members_than_partitions_leaves_some_idle() {
        let subscriptions = members(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
        let assignment = assign(&subscriptions, &BTreeMap::new(), &counts(&[("t", 2)]));
        let mut spread = loads(&assignment);
        spread.sort();
        assert_eq!(spread, vec![0, 1, 1]);
    }
}
