//! Planning a rebalance: which replicas and preferred leaders to move so that every node
//! holds about as many replicas, and leads about as many partitions, as any other, without
//! ever narrowing a partition's spread over zones.
//!
//! The plan is a pure function of the metadata and of which nodes may take part, so the dry
//! run (`GET /v1/cluster/rebalance`) shows exactly what the next steps would propose. It works
//! in three passes over a copy of the assignments:
//!
//! 1. **zones**: a partition whose replicas span fewer zones than it could (replicas placed
//!    before its nodes reported zones, or before a zone existed) gets a replica moved into a
//!    zone it lacks;
//! 2. **replicas**: while the most loaded node holds two or more replicas more than the least
//!    loaded, one of its replicas moves there, never into a zone the partition has already
//!    used when that would narrow its spread;
//! 3. **leaders**: while one node is the preferred leader of two or more partitions more than
//!    another that also holds a replica of one of them, those two swap places in its replica
//!    list. Raft leadership follows the preferred leader (`handback`), without copying data.
//!
//! Partitions with a replica on a node that does not take part (down or draining) are left as
//! they are, and that node's load is not counted.

use std::collections::{BTreeMap, BTreeSet};

use herald_domain::metadata::MetadataState;
use herald_domain::replica_moves::ReplicaMove;
use herald_domain::zones::{ZoneKey, Zones};

/// Each eligible node's zone as a small number, so the passes compare zones without
/// allocating.
struct ZoneIndex(BTreeMap<u64, usize>);

impl ZoneIndex {
    fn new(eligible: &BTreeSet<u64>, zones: &Zones) -> ZoneIndex {
        let mut numbers: BTreeMap<ZoneKey, usize> = BTreeMap::new();
        let mut index = BTreeMap::new();
        for node in eligible {
            let next = numbers.len();
            let number = *numbers.entry(zones.key(*node)).or_insert(next);
            index.insert(*node, number);
        }
        ZoneIndex(index)
    }

    fn of(&self, node: u64) -> usize {
        self.0.get(&node).copied().unwrap_or(usize::MAX)
    }

    fn count(&self) -> usize {
        self.0.values().collect::<BTreeSet<_>>().len()
    }

    fn spread(&self, replicas: &[u64]) -> usize {
        replicas
            .iter()
            .map(|node| self.of(*node))
            .collect::<BTreeSet<_>>()
            .len()
    }
}

/// What a rebalance would do, and each node's share before and after.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebalancePlan {
    /// One per partition that changes, zone fixes first, then replica moves, then leader swaps.
    pub moves: Vec<ReplicaMove>,
    pub nodes: Vec<NodeShare>,
}

/// A node's replicas and preferred leaderships, before and after the plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeShare {
    pub node_id: u64,
    pub replicas_before: usize,
    pub replicas_after: usize,
    pub leaders_before: usize,
    pub leaders_after: usize,
}

/// One partition in the planner's working copy.
struct Slot {
    topic: String,
    /// The topic as a number, for the per-topic counts of pass 2.
    topic_index: usize,
    partition: u32,
    before: Vec<u64>,
    replicas: Vec<u64>,
    /// The pass that first changed it (0 zones, 1 replicas, 2 leaders): the order of moves.
    pass: Option<u8>,
}

/// The plan for the nodes in `eligible` (registered, up, not draining).
pub fn plan_rebalance(state: &MetadataState, eligible: &BTreeSet<u64>) -> RebalancePlan {
    let mut topic_numbers: BTreeMap<&str, usize> = BTreeMap::new();
    let mut slots: Vec<Slot> = state
        .partitions()
        .filter(|(_, _, assignment)| {
            assignment
                .replicas
                .iter()
                .all(|node| eligible.contains(node))
        })
        .map(|(topic, partition, assignment)| Slot {
            topic: topic.name.clone(),
            topic_index: {
                let next = topic_numbers.len();
                *topic_numbers.entry(topic.name.as_str()).or_insert(next)
            },
            partition,
            before: assignment.replicas.clone(),
            replicas: assignment.replicas.clone(),
            pass: None,
        })
        .collect();
    let before = shares(&slots, eligible);
    if eligible.len() > 1 {
        let zones = ZoneIndex::new(eligible, &state.zones);
        spread_zones(&mut slots, eligible, &zones);
        balance_replicas(&mut slots, eligible, &zones);
        balance_leaders(&mut slots, eligible);
    }
    let after = shares(&slots, eligible);
    let nodes = eligible
        .iter()
        .map(|node| NodeShare {
            node_id: *node,
            replicas_before: before.get(node).map_or(0, |share| share.0),
            replicas_after: after.get(node).map_or(0, |share| share.0),
            leaders_before: before.get(node).map_or(0, |share| share.1),
            leaders_after: after.get(node).map_or(0, |share| share.1),
        })
        .collect();
    let mut changed: Vec<Slot> = slots
        .into_iter()
        .filter(|slot| slot.replicas != slot.before)
        .collect();
    changed.sort_by_key(|slot| slot.pass);
    RebalancePlan {
        moves: changed
            .into_iter()
            .map(|slot| ReplicaMove {
                topic: slot.topic,
                partition: slot.partition,
                from: slot.before,
                to: slot.replicas,
            })
            .collect(),
        nodes,
    }
}

/// Per node: (replicas, preferred leaderships).
fn shares(slots: &[Slot], eligible: &BTreeSet<u64>) -> BTreeMap<u64, (usize, usize)> {
    let mut shares: BTreeMap<u64, (usize, usize)> =
        eligible.iter().map(|node| (*node, (0, 0))).collect();
    for slot in slots {
        for (position, node) in slot.replicas.iter().enumerate() {
            if let Some(share) = shares.get_mut(node) {
                share.0 += 1;
                if position == 0 {
                    share.1 += 1;
                }
            }
        }
    }
    shares
}

fn replica_load(slots: &[Slot], eligible: &BTreeSet<u64>) -> BTreeMap<u64, usize> {
    shares(slots, eligible)
        .into_iter()
        .map(|(node, (replicas, _))| (node, replicas))
        .collect()
}

fn mark(slot: &mut Slot, pass: u8) {
    slot.pass.get_or_insert(pass);
}

/// Pass 1: each partition spans `min(replicas, zones)` zones.
fn spread_zones(slots: &mut [Slot], eligible: &BTreeSet<u64>, zones: &ZoneIndex) {
    let zone_count = zones.count();
    let mut load = replica_load(slots, eligible);
    for slot in slots.iter_mut() {
        loop {
            if zones.spread(&slot.replicas) >= slot.replicas.len().min(zone_count) {
                break;
            }
            // Leave: a replica sharing its zone with another, on the most loaded node, not the
            // preferred leader when another will do.
            let Some(position) = (0..slot.replicas.len())
                .filter(|position| {
                    let zone = zones.of(slot.replicas[*position]);
                    slot.replicas
                        .iter()
                        .filter(|node| zones.of(**node) == zone)
                        .count()
                        > 1
                })
                .max_by_key(|position| (*position > 0, load[&slot.replicas[*position]]))
            else {
                break;
            };
            // Enter: the least loaded node of a zone the partition lacks.
            let used: BTreeSet<usize> = slot.replicas.iter().map(|node| zones.of(*node)).collect();
            let Some(arrival) = eligible
                .iter()
                .filter(|node| !used.contains(&zones.of(**node)))
                .min_by_key(|node| (load[*node], **node))
                .copied()
            else {
                break;
            };
            let leaving = slot.replicas[position];
            *load.entry(leaving).or_default() -= 1;
            *load.entry(arrival).or_default() += 1;
            slot.replicas[position] = arrival;
            mark(slot, 0);
        }
    }
}

/// Which slots each node holds a replica of (or leads), and where the last search on each
/// node stopped: the passes look a node's partitions up instead of scanning every partition
/// for each move, and a search starts where the last one stopped, so the partitions passed
/// over are not examined again on every move.
struct NodeSlots {
    by_node: BTreeMap<u64, BTreeSet<usize>>,
    cursors: BTreeMap<u64, usize>,
}

impl NodeSlots {
    fn new(slots: &[Slot], leaders_only: bool) -> NodeSlots {
        let mut by_node: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
        for (index, slot) in slots.iter().enumerate() {
            let held = if leaders_only {
                &slot.replicas[..slot.replicas.len().min(1)]
            } else {
                &slot.replicas[..]
            };
            for node in held {
                by_node.entry(*node).or_default().insert(index);
            }
        }
        NodeSlots {
            by_node,
            cursors: BTreeMap::new(),
        }
    }

    /// `node`'s slots from its cursor on, then those before it.
    fn of(&self, node: u64) -> impl Iterator<Item = usize> + '_ {
        let cursor = self.cursors.get(&node).copied().unwrap_or(0);
        let held = self.by_node.get(&node);
        let after = held.into_iter().flat_map(move |set| set.range(cursor..));
        let before = held.into_iter().flat_map(move |set| set.range(..cursor));
        after.chain(before).copied()
    }

    /// Slot `index` went from `from` to `to`.
    fn moved(&mut self, index: usize, from: u64, to: u64) {
        self.by_node.entry(from).or_default().remove(&index);
        self.cursors.insert(from, index);
        self.by_node.entry(to).or_default().insert(index);
    }
}

/// The next move of a pass: for the nodes by `counts`, heaviest first and lightest first,
/// the first pair at least two apart for which `find` names a slot, as (slot, heavy, light).
fn next_move(
    counts: &BTreeMap<u64, usize>,
    mut find: impl FnMut(u64, u64) -> Option<usize>,
) -> Option<(usize, u64, u64)> {
    let mut by_count: Vec<u64> = counts.keys().copied().collect();
    by_count.sort_by_key(|node| (counts[node], *node));
    for heavy in by_count.iter().rev() {
        for light in &by_count {
            if counts[heavy] < counts[light] + 2 {
                break;
            }
            if let Some(index) = find(*heavy, *light) {
                return Some((index, *heavy, *light));
            }
        }
    }
    None
}

/// Pass 2: replica counts within one of each other, and within each topic as near as the
/// moves allow (a hot topic's partitions spread over the nodes too).
fn balance_replicas(slots: &mut [Slot], eligible: &BTreeSet<u64>, zones: &ZoneIndex) {
    let mut load = replica_load(slots, eligible);
    let mut held = NodeSlots::new(slots, false);
    let mut per_topic: BTreeMap<(usize, u64), usize> = BTreeMap::new();
    for slot in slots.iter() {
        for node in &slot.replicas {
            *per_topic.entry((slot.topic_index, *node)).or_default() += 1;
        }
    }
    // Each move narrows the gap between two nodes: more moves than replicas cannot be needed.
    let bound: usize = load.values().sum::<usize>() + 1;
    for _ in 0..bound {
        let found = next_move(&load, |heavy, light| {
            movable(slots, held.of(heavy), (heavy, light), zones, &per_topic)
        });
        let Some((index, heavy, light)) = found else {
            return;
        };
        let slot = &mut slots[index];
        if let Some(position) = slot.replicas.iter().position(|node| *node == heavy) {
            slot.replicas[position] = light;
            mark(slot, 1);
        }
        *load.entry(heavy).or_default() -= 1;
        *load.entry(light).or_default() += 1;
        let topic = slots[index].topic_index;
        *per_topic.entry((topic, heavy)).or_default() -= 1;
        *per_topic.entry((topic, light)).or_default() += 1;
        held.moved(index, heavy, light);
    }
}

/// Of the partitions in `held` (those on `heavy`), the best to move to `light`: never one
/// already on `light` or whose zones `light` would narrow; first one of the topic `heavy`
/// holds the most replicas of more than `light` does, then one `heavy` does not lead (so
/// leaderships move only where they must).
fn movable(
    slots: &[Slot],
    held: impl Iterator<Item = usize>,
    (heavy, light): (u64, u64),
    zones: &ZoneIndex,
    per_topic: &BTreeMap<(usize, u64), usize>,
) -> Option<usize> {
    let (heavy_zone, light_zone) = (zones.of(heavy), zones.of(light));
    let mut best: Option<((i64, bool), usize)> = None;
    for index in held {
        let slot = &slots[index];
        let Some(position) = slot.replicas.iter().position(|node| *node == heavy) else {
            continue;
        };
        if slot.replicas.contains(&light) {
            continue;
        }
        // The spread narrows when `heavy` alone held its zone and `light`'s is held already.
        let others = || {
            slot.replicas
                .iter()
                .enumerate()
                .filter(move |(other, _)| *other != position)
                .map(|(_, node)| zones.of(*node))
        };
        let heavy_zone_kept = others().any(|zone| zone == heavy_zone);
        let light_zone_held = others().any(|zone| zone == light_zone);
        if light_zone_held && !heavy_zone_kept {
            continue;
        }
        let count = |node| {
            per_topic
                .get(&(slot.topic_index, node))
                .copied()
                .unwrap_or(0) as i64
        };
        let rank = (count(heavy) - count(light), position > 0);
        if rank.0 >= 2 && rank.1 {
            // Narrows the topic's gap and keeps the leader: as good as any.
            return Some(index);
        }
        if best.is_none_or(|(best_rank, _)| rank > best_rank) {
            best = Some((rank, index));
        }
    }
    best.map(|(_, index)| index)
}

/// Pass 3: preferred leaderships within one of each other, by reordering replicas.
fn balance_leaders(slots: &mut [Slot], eligible: &BTreeSet<u64>) {
    let mut leaders: BTreeMap<u64, usize> = shares(slots, eligible)
        .into_iter()
        .map(|(node, (_, leads))| (node, leads))
        .collect();
    let mut led = NodeSlots::new(slots, true);
    let bound = slots.len() + 1;
    for _ in 0..bound {
        let found = next_move(&leaders, |heavy, light| {
            led.of(heavy)
                .find(|index| slots[*index].replicas.contains(&light))
        });
        let Some((index, heavy, light)) = found else {
            return;
        };
        let slot = &mut slots[index];
        if let Some(position) = slot.replicas.iter().position(|node| *node == light) {
            slot.replicas.swap(0, position);
            mark(slot, 2);
        }
        *leaders.entry(heavy).or_default() -= 1;
        *leaders.entry(light).or_default() += 1;
        led.moved(index, heavy, light);
    }
}
