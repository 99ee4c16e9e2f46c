//! Where a topic's partitions live: `replication_factor` distinct nodes per partition, spread
//! so that replicas and preferred leaders (the first replica) are balanced across nodes.

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
pub fn place_partitions(
    nodes: &[u64],
    rotation: u32,
    count: u32,
    replication_factor: u16,
) -> Result<Vec<Vec<u64>>, PlacementError> {
    let factor = usize::from(replication_factor);
    if factor == 0 {
        return Err(PlacementError::ZeroFactor);
    }
    if factor > nodes.len() {
        return Err(PlacementError::NotEnoughNodes {
            factor: replication_factor,
            available: nodes.len(),
        });
    }
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    let placements = (rotation..rotation.saturating_add(count))
        .map(|partition| {
            let start = partition as usize % sorted.len();
            (0..factor)
                .map(|replica| sorted[(start + replica) % sorted.len()])
                .collect()
        })
        .collect();
    Ok(placements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_holds_every_partition() {
        assert_eq!(
            place_partitions(&[1], 0, 3, 1).unwrap(),
            vec![vec![1], vec![1], vec![1]]
        );
    }

    #[test]
    fn replicas_are_distinct_and_leaders_balanced() {
        let placements = place_partitions(&[3, 1, 2], 0, 6, 3).unwrap();
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
            place_partitions(&[1], 0, 1, 3),
            Err(PlacementError::NotEnoughNodes {
                factor: 3,
                available: 1
            })
        );
        assert_eq!(
            place_partitions(&[1], 0, 1, 0),
            Err(PlacementError::ZeroFactor)
        );
    }
}
