//! Network partitions inside a test cluster: cutting the link between two nodes (one way or
//! both), isolating a node from every other member, and healing. A cut drops the packets from
//! one node's address to another's (see `nft`), so the processes keep running and their sockets
//! stay open: they hear silence, as across a real partition, not a refused connection. Only
//! node-to-node traffic is cut; the test still reaches every node over HTTP.

use super::cluster::TestCluster;
use super::nft::Firewall;

impl TestCluster {
    /// Drops every packet from node `from` to node `to` (TCP in both directions suffers: the
    /// acknowledgements of `to`'s segments do not come back either, but what `to` sends still
    /// arrives at `from`).
    pub fn cut_one_way(&mut self, from: u64, to: u64) {
        assert_ne!(from, to, "a node is not cut from itself");
        if self.cut_links.contains(&(from, to)) {
            return;
        }
        let (from_ip, to_ip) = (self.node(from).ip(), self.node(to).ip());
        if self.firewall.is_none() {
            let firewall = Firewall::create().unwrap_or_else(|why| self.fail(&why));
            self.firewall = Some(firewall);
        }
        let firewall = self.firewall.as_ref().expect("created above");
        if let Err(why) = firewall.drop_packets(from_ip, to_ip) {
            self.fail(&format!("cutting node {from} -> node {to}: {why}"));
        }
        self.cut_links.insert((from, to));
    }

    /// Cuts the link between `a` and `b` both ways.
    pub fn cut(&mut self, a: u64, b: u64) {
        self.cut_one_way(a, b);
        self.cut_one_way(b, a);
    }

    /// Cuts node `id` from every other member, both ways.
    pub fn isolate(&mut self, id: u64) {
        for other in self.others_than(id) {
            self.cut(id, other);
        }
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        if let Some(firewall) = &self.firewall {
            if let Err(why) = firewall.clear() {
                self.fail(&format!("healing the links: {why}"));
            }
        }
        self.cut_links.clear();
    }

    /// The directed links `(from, to)` cut now.
    pub fn cut_links(&self) -> Vec<(u64, u64)> {
        self.cut_links.iter().copied().collect()
    }
}
