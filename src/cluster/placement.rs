//! Where a topic's partitions live: `replication_factor` distinct nodes per partition, spread
//! so that replicas and preferred leaders (the first replica) are balanced across nodes.

/// Picks replicas for `count` partitions. `rotation` shifts where the first partition starts
/// (callers pass how many partitions the cluster has), so the first partitions of successive
/// topics do not all land on the same node.
pub fn place_partitions(
    nodes: &[u64],
    rotation: u32,
    count: u32,
    replication_factor: u16,
) -> Result<Vec<Vec<u64>>, String> {
    let factor = usize::from(replication_factor);
    if factor == 0 {
        return Err("replication_factor must be at least 1".into());
    }
    if factor > nodes.len() {
        return Err(format!(
            "replication_factor {replication_factor} exceeds the {} available node(s) of the cluster (up and not draining)",
            nodes.len()
        ));
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
        let error = place_partitions(&[1], 0, 1, 3).unwrap_err();
        assert!(error.contains("exceeds"), "{error}");
        assert!(place_partitions(&[1], 0, 1, 0).is_err());
    }
}
