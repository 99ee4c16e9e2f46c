//! Where a topic's partitions live: `replication_factor` distinct nodes per partition, spread
//! so that replicas and preferred leaders (the first replica) are balanced across nodes.

use std::collections::BTreeSet;

use herald_domain::zones::{ZoneKey, Zones};

/// Why partitions cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A request error: there is no such thing as zero replicas.
    #[error("replication_factor must be at least 1")]
    ZeroFactor,
    /// The cluster, as it is now, cannot hold that many replicas: nodes may be added or come
    /// back up.
    #[error("replication_factor {factor} exceeds the {available} available node(s) of the cluster (up and not draining)")]
    NotEnoughNodes { factor: u16, available: usize },
}

/// Picks replicas for `count` partitions. `rotation` shifts where the first partition starts
/// (callers pass how many partitions the cluster has), so the first partitions of successive
/// topics do not all land on the same node.
///
/// Nodes are taken in [`Zones::interleave`] order (zone after zone), each partition's preferred
/// leader the next in turn, so leaders spread over zones and nodes alike; its other replicas
/// are the nodes that follow it, skipping any in a zone the partition already uses while
/// another zone is left. A partition thus spans `min(replication_factor, zones)` zones. Without
/// zones this is the plain rotation over node ids.
pub fn place_partitions(
    nodes: &[u64],
    zones: &Zones,
    rotation: u32,
    count: u32,
    replication_factor: u16,
) -> Result<Vec<Vec<u64>>, PlacementError> {
    let factor = usize::from(replication_factor);
    if factor == 0 {
        return Err(PlacementError::ZeroFactor);
    }
    let ordered = zones.interleave(nodes);
    if factor > ordered.len() {
        return Err(PlacementError::NotEnoughNodes {
            factor: replication_factor,
            available: ordered.len(),
        });
    }
    let placements = (rotation..rotation.saturating_add(count))
        .map(|partition| {
            let start = partition as usize % ordered.len();
            spread_from(&ordered, start, factor, zones)
        })
        .collect();
    Ok(placements)
}

/// `factor` nodes from `ordered`, starting at `start`: first those in zones not used yet, then
/// (once every zone is used) the next ones in turn.
fn spread_from(ordered: &[u64], start: usize, factor: usize, zones: &Zones) -> Vec<u64> {
    let mut chosen: Vec<u64> = Vec::with_capacity(factor);
    let mut used: BTreeSet<ZoneKey> = BTreeSet::new();
    let turn = (0..ordered.len()).map(|step| ordered[(start + step) % ordered.len()]);
    for node in turn.clone() {
        if chosen.len() == factor {
            return chosen;
        }
        if used.insert(zones.key(node)) {
            chosen.push(node);
        }
    }
    for node in turn {
        if chosen.len() == factor {
            break;
        }
        if !chosen.contains(&node) {
            chosen.push(node);
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_holds_every_partition() {
        assert_eq!(
            place_partitions(&[1], &Zones::default(), 0, 3, 1).unwrap(),
            vec![vec![1], vec![1], vec![1]]
        );
    }

    #[test]
    fn replicas_are_distinct_and_leaders_balanced() {
        let placements = place_partitions(&[3, 1, 2], &Zones::default(), 0, 6, 3).unwrap();
        for replicas in &placements {
            let mut unique = replicas.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), 3);
        }
        let leaders: Vec<u64> = placements.iter().map(|replicas| replicas[0]).collect();
        assert_eq!(leaders, vec![1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn too_few_nodes_is_refused() {
        assert_eq!(
            place_partitions(&[1], &Zones::default(), 0, 1, 3),
            Err(PlacementError::NotEnoughNodes {
                factor: 3,
                available: 1
            })
        );
        assert_eq!(
            place_partitions(&[1], &Zones::default(), 0, 1, 0),
            Err(PlacementError::ZeroFactor)
        );
    }

    fn zones(pairs: &[(u64, &str)]) -> Zones {
        Zones(pairs.iter().map(|(n, z)| (*n, z.to_string())).collect())
    }

    #[test]
    fn replicas_span_every_zone_and_leaders_spread_over_zones_and_nodes() {
        // Six nodes in three zones, in an order that puts a zone's nodes next to each other.
        let zones = zones(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
        let placements = place_partitions(&[1, 2, 3, 4, 5, 6], &zones, 0, 12, 3).unwrap();
        for replicas in &placements {
            let spanned: BTreeSet<ZoneKey> = replicas.iter().map(|n| zones.key(*n)).collect();
            assert_eq!(spanned.len(), 3, "{replicas:?}");
        }
        let mut led = std::collections::BTreeMap::<u64, usize>::new();
        for replicas in &placements {
            *led.entry(replicas[0]).or_default() += 1;
        }
        assert_eq!(
            led.values().copied().collect::<Vec<_>>(),
            vec![2; 6],
            "{led:?}"
        );
        // Two zones, replication factor 3: both zones, then a second node of one.
        let two = zones_two();
        for replicas in place_partitions(&[1, 2, 3, 4], &two, 0, 4, 3).unwrap() {
            let spanned: BTreeSet<ZoneKey> = replicas.iter().map(|n| two.key(*n)).collect();
            assert_eq!(spanned.len(), 2, "{replicas:?}");
            let mut distinct = replicas.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 3);
        }
    }

    fn zones_two() -> Zones {
        zones(&[(1, "x"), (2, "x"), (3, "y"), (4, "y")])
    }

    #[test]
    fn an_uneven_zone_layout_still_spans_every_zone() {
        let zones = zones(&[(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "c")]);
        for replicas in place_partitions(&[1, 2, 3, 4, 5], &zones, 0, 10, 3).unwrap() {
            let spanned: BTreeSet<ZoneKey> = replicas.iter().map(|n| zones.key(*n)).collect();
            assert_eq!(spanned.len(), 3, "{replicas:?}");
        }
    }
}
