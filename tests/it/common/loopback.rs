//! One loopback address per node of a test cluster: `127.A.B.<node id>`, with `A.B` unique to
//! the cluster. Linux routes all of 127.0.0.0/8 to `lo`, so no setup is needed, and since a node
//! listens on its address and dials its peers from it (`crates/herald-rpc/src/connection.rs`), every packet
//! between two nodes names both: that is what lets `nft` cut one link (see `nft`), and what keeps
//! the rules of one cluster away from every other cluster on the machine (other test binaries,
//! other engineers' runs), which get other `A.B`.
//!
//! The test's own HTTP client talks from 127.0.0.1, which no cluster uses, so cutting links
//! between nodes never cuts the test off from a node.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, Ordering};

/// Clusters this process made so far.
static CLUSTERS: AtomicU32 = AtomicU32::new(0);

/// How many `A.B` pairs there are (`A` from 100 to 249): concurrent processes collide only when
/// their pids are that far apart modulo it, with the same count of clusters.
const SUBNETS: u32 = 150 * 256;

/// The `127.A.B.0/24` of one cluster.
#[derive(Clone, Copy, Debug)]
pub struct ClusterNet {
    a: u8,
    b: u8,
}

impl ClusterNet {
    /// A subnet no other cluster of this process has had, and (with near certainty) none of a
    /// concurrent process.
    pub fn next() -> ClusterNet {
        let count = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let key = (std::process::id().wrapping_mul(16).wrapping_add(count)) % SUBNETS;
        ClusterNet {
            a: (100 + key / 256) as u8,
            b: (key % 256) as u8,
        }
    }

    /// The address of node `id` (1..=254).
    pub fn ip_of(&self, id: u64) -> IpAddr {
        let host = u8::try_from(id)
            .ok()
            .filter(|host| (1..=254).contains(host))
            .unwrap_or_else(|| panic!("node id {id} does not fit one loopback address"));
        IpAddr::V4(Ipv4Addr::new(127, self.a, self.b, host))
    }
}
