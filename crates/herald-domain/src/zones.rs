//! Zones (failure domains: availability zones, racks): which zone each node is in, so that a
//! partition's replicas and the metadata group's voters spread over as many zones as there are
//! and the loss of a whole zone loses no quorum. As Kafka's `broker.rack`.
//!
//! A node names its own zone (`zone` in its config); it reports it to the metadata, which
//! keeps it beside the node's registration (wire version 3 on). A node without one counts as a
//! zone of its own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The longest zone name.
pub const MAX_ZONE_LEN: usize = 64;

/// Checks a zone name: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn validate_zone(zone: &str) -> Result<(), String> {
    if zone.is_empty() || zone.len() > MAX_ZONE_LEN {
        return Err(format!(
            "a zone name is 1 to {MAX_ZONE_LEN} characters, got {}",
            zone.len()
        ));
    }
    if let Some(bad) = zone
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "a zone name holds only letters, digits, '.', '_' and '-', not {bad:?}"
        ));
    }
    Ok(())
}

/// Each node's zone, for the nodes that named one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zones(pub BTreeMap<u64, String>);

/// What zone spreading compares: a named zone, or the node itself when it names none.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ZoneKey {
    Named(String),
    Node(u64),
}

impl Zones {
    pub fn of(&self, node: u64) -> Option<&str> {
        self.0.get(&node).map(String::as_str)
    }

    pub fn key(&self, node: u64) -> ZoneKey {
        match self.0.get(&node) {
            Some(zone) => ZoneKey::Named(zone.clone()),
            None => ZoneKey::Node(node),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `nodes` ordered so that consecutive nodes are in different zones as long as possible:
    /// the first node of every zone (zones in name order, nodes in id order within a zone),
    /// then the second of every zone, and so on. Without zones, the ids in order.
    pub fn interleave(&self, nodes: &[u64]) -> Vec<u64> {
        let mut by_zone: BTreeMap<ZoneKey, Vec<u64>> = BTreeMap::new();
        let mut sorted = nodes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        for node in sorted {
            by_zone.entry(self.key(node)).or_default().push(node);
        }
        let rounds = by_zone.values().map(Vec::len).max().unwrap_or(0);
        let mut ordered = Vec::with_capacity(nodes.len());
        for round in 0..rounds {
            for members in by_zone.values() {
                if let Some(node) = members.get(round) {
                    ordered.push(*node);
                }
            }
        }
        ordered
    }

    /// Sets (or with `None` clears) a node's zone.
    pub fn set(&mut self, node: u64, zone: Option<String>) {
        match zone {
            Some(zone) => {
                self.0.insert(node, zone);
            }
            None => {
                self.0.remove(&node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(pairs: &[(u64, &str)]) -> Zones {
        Zones(pairs.iter().map(|(n, z)| (*n, z.to_string())).collect())
    }

    #[test]
    fn interleaving_alternates_zones_and_keeps_id_order_without_them() {
        let three = zones(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
        assert_eq!(
            three.interleave(&[6, 5, 4, 3, 2, 1]),
            vec![1, 3, 5, 2, 4, 6]
        );
        assert_eq!(Zones::default().interleave(&[3, 1, 2]), vec![1, 2, 3]);
        // Uneven zones: the big zone's extra nodes come last.
        let uneven = zones(&[(1, "a"), (2, "a"), (3, "a"), (4, "b")]);
        assert_eq!(uneven.interleave(&[1, 2, 3, 4]), vec![1, 4, 2, 3]);
    }

    #[test]
    fn zone_names_are_checked() {
        assert!(validate_zone("eu-west-1a").is_ok());
        assert!(validate_zone("rack_7.b").is_ok());
        for bad in ["", "has space", "ü", &"x".repeat(65)] {
            assert!(validate_zone(bad).is_err(), "{bad:?}");
        }
    }
}
