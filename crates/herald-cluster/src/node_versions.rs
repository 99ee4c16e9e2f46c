//! The wire version each node reports, as this node last heard it in the pings (see
//! `herald_domain::wire_version`).
//!
//! A node of this release or later answers the versioned ping with its wire version. A node of
//! a release before wire versions does not know that ping and says so (an unknown operation):
//! it counts as [`WireVersion::UNREPORTED`], and is pinged the old way for a while before it is
//! asked again (it may have been upgraded meanwhile).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use herald_domain::wire_version::WireVersion;

use super::gossip::REPORT_TTL;

/// How long a node that did not know the versioned ping is pinged the old way before it is
/// asked again.
pub(super) const PROBE_AGAIN_AFTER: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
struct Report {
    version: WireVersion,
    seen: Instant,
    /// The node did not know the versioned ping (it is of a release before wire versions).
    unversioned: bool,
}

/// What every other node last reported. This node's own version is not in it.
#[derive(Default)]
pub(super) struct NodeVersions {
    reports: RwLock<HashMap<u64, Report>>,
}

impl NodeVersions {
    /// `node` answered the versioned ping with `version`.
    pub(super) fn reported(&self, node: u64, version: WireVersion) {
        self.reports.write().insert(
            node,
            Report {
                version,
                seen: Instant::now(),
                unversioned: false,
            },
        );
    }

    /// `node` did not know the versioned ping: a release before wire versions.
    pub(super) fn unversioned(&self, node: u64) {
        self.reports.write().insert(
            node,
            Report {
                version: WireVersion::UNREPORTED,
                seen: Instant::now(),
                unversioned: true,
            },
        );
    }

    /// Whether to ask `node` the versioned ping now (rather than the old one).
    pub(super) fn should_ask(&self, node: u64) -> bool {
        self.reports
            .read()
            .get(&node)
            .is_none_or(|report| !report.unversioned || report.seen.elapsed() >= PROBE_AGAIN_AFTER)
    }

    /// What `node` reported recently enough to rely on: `None` when it has not answered a ping
    /// lately (it may be down, or restarted with another release).
    pub(super) fn current(&self, node: u64) -> Option<WireVersion> {
        let reports = self.reports.read();
        let report = reports.get(&node)?;
        let fresh = report.unversioned || report.seen.elapsed() <= REPORT_TTL;
        fresh.then_some(report.version)
    }

    /// What `node` last reported, however long ago.
    pub(super) fn last(&self, node: u64) -> Option<WireVersion> {
        self.reports.read().get(&node).map(|report| report.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_of_an_older_release_counts_as_unreported_and_is_asked_again_later() {
        let versions = NodeVersions::default();
        assert!(versions.should_ask(2));
        assert_eq!(versions.current(2), None);

        versions.reported(2, WireVersion(1));
        assert_eq!(versions.current(2), Some(WireVersion(1)));
        assert!(versions.should_ask(2));

        versions.unversioned(3);
        assert_eq!(versions.current(3), Some(WireVersion::UNREPORTED));
        assert!(!versions.should_ask(3), "pinged the old way for a while");
        assert_eq!(versions.last(3), Some(WireVersion::UNREPORTED));
        // Upgraded meanwhile: its next answer says so.
        versions.reported(3, WireVersion(1));
        assert_eq!(versions.current(3), Some(WireVersion(1)));
        assert_eq!(versions.last(4), None);
    }
}
