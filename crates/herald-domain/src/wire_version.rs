//! Versions of what nodes say to each other and what they replicate, so that nodes of two
//! releases can run in one cluster during a rolling upgrade.
//!
//! Two numbers, for two different things:
//!
//! - the RPC transport's hello version (`herald_rpc`): framing, the handshake. It changes
//!   rarely, and two nodes settle on one both speak when they connect;
//! - the **wire version** ([`WireVersion`]), a release's feature level: which request and reply
//!   layouts of the services (their operation tags), which raft messages and which raft entry
//!   variants it knows. [`WIRE_VERSION`] is this release's.
//!
//! The rules every change follows:
//!
//! 1. What is on the wire or in a log is frozen: the encoding of an existing operation, reply,
//!    raft message or entry variant never changes (golden byte fixtures in `migrations/wire/`
//!    fail CI when it does).
//! 2. A changed request or reply layout is a new operation tag, never a reused one; a changed
//!    entry is a new variant appended at the end of its enum (postcard numbers variants by
//!    position, so old bytes keep decoding). Either comes with the wire version that
//!    introduces it: [`WIRE_VERSION`] goes up by one in that release.
//! 3. A receiver that does not know a tag answers a distinct error (`herald_rpc`'s unknown
//!    operation), so a sender tells "that node is too old" from a failure; nothing was done.
//! 4. Each node reports the wire version it speaks (the cluster service's versioned ping). A
//!    sender uses a new tag towards a node only once that node reported a version that knows
//!    it; a node that reports nothing is of a release before wire versions
//!    ([`WireVersion::UNREPORTED`]).
//! 5. What every replica must understand (a new entry variant, a new metadata command) waits
//!    for the **cluster version** ([`ClusterVersion`]): replicated in the metadata, raised by
//!    the metadata leader once every member node reports at least that version, never lowered.
//!    Proposers ask [`ClusterVersion::allows`] before they propose such a thing.
//!
//! Once the cluster version is N, a node of a release below N must not join or come back: it
//! could not decode the log. Rolling back is possible until every node is upgraded and the
//! cluster version rises.

use serde::{Deserialize, Serialize};

/// A release's feature level on the wire (see the module documentation). Serialized as its
/// number.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct WireVersion(pub u16);

impl WireVersion {
    /// What a node counts as when it reports no version: a release from before wire versions
    /// (it serves only the unversioned ping).
    pub const UNREPORTED: WireVersion = WireVersion(0);

    pub fn get(self) -> u16 {
        self.0
    }
}

impl std::fmt::Display for WireVersion {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}", self.0)
    }
}

/// This release's wire version: 3 (quiescent groups' `QuiesceGroups` request, nodes' zones,
/// replica moves; 2
/// brought the schema registry's metadata commands, 1 was the first release that reports one).
pub const WIRE_VERSION: WireVersion = WireVersion(3);

/// Something that needs every replica (or every node) to know it before anyone uses it, with
/// the wire version that introduced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// The metadata command that raises the cluster version
    /// (`MetadataCommand::RaiseClusterVersion`): a node before wire version 1 could not decode
    /// it.
    ClusterVersionCommand,
    /// The schema registry's metadata command (`MetadataCommand::Schemas`) and the metadata
    /// state extension that stores the registry: a node before wire version 2 could decode
    /// neither.
    SchemaRegistry,
    /// Quiescent partition groups: the cluster service's `QuiesceGroups` request, which a node
    /// before wire version 3 does not serve.
    Quiescence,
    /// Nodes' zones: the metadata command `SetNodeZone` and the metadata state extension that
    /// stores them, which a node before wire version 3 could decode neither of.
    Zones,
    /// Rebalancing: the metadata command `MoveReplicas`, which a node before wire version 3
    /// could not decode.
    ReplicaMoves,
}

impl Feature {
    /// Every feature, oldest first.
    pub const ALL: &'static [Feature] = &[
        Feature::ClusterVersionCommand,
        Feature::SchemaRegistry,
        Feature::Quiescence,
        Feature::Zones,
        Feature::ReplicaMoves,
    ];

    /// The wire version that introduced it: the lowest cluster version that allows it.
    pub fn since(self) -> WireVersion {
        match self {
            Feature::ClusterVersionCommand => WireVersion(1),
            Feature::SchemaRegistry => WireVersion(2),
            Feature::Quiescence => WireVersion(3),
            Feature::Zones => WireVersion(3),
            Feature::ReplicaMoves => WireVersion(3),
        }
    }
}

/// The wire version every node of the cluster is known to speak: what may be proposed to
/// every replica and sent to any node. Replicated in the metadata (`MetadataState`), raised by
/// the metadata leader, never lowered.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ClusterVersion(pub WireVersion);

impl ClusterVersion {
    pub fn version(self) -> WireVersion {
        self.0
    }

    /// Whether what `feature` needs may be used: the gate every proposer of something newer
    /// than the oldest release asks first.
    pub fn allows(self, feature: Feature) -> bool {
        self.0 >= feature.since()
    }

    /// The version the cluster may rise to, given what each member node reports (`None`: it
    /// reported nothing recently, so it may be of any release): the lowest report, when every
    /// member reported, it is above the current version, and the command that raises it is
    /// known to every member. `None` when it stays.
    pub fn raise_to(
        self,
        reports: impl IntoIterator<Item = Option<WireVersion>>,
    ) -> Option<WireVersion> {
        let mut lowest: Option<WireVersion> = None;
        for report in reports {
            let report = report?;
            lowest = Some(lowest.map_or(report, |lowest| lowest.min(report)));
        }
        let target = lowest?;
        let understood = ClusterVersion(target).allows(Feature::ClusterVersionCommand);
        (target > self.0 && understood).then_some(target)
    }
}

impl std::fmt::Display for ClusterVersion {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(formatter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_is_allowed_from_its_version_on() {
        for feature in Feature::ALL {
            let since = feature.since();
            assert!(
                since <= WIRE_VERSION,
                "{feature:?} is newer than this release"
            );
            assert!(ClusterVersion(since).allows(*feature));
            assert!(ClusterVersion(WIRE_VERSION).allows(*feature));
            let before = WireVersion(since.get() - 1);
            assert!(!ClusterVersion(before).allows(*feature), "{feature:?}");
        }
        assert!(!ClusterVersion::default().allows(Feature::ClusterVersionCommand));
    }

    #[test]
    fn the_cluster_version_rises_to_the_lowest_report_of_all_members() {
        let current = ClusterVersion(WireVersion::UNREPORTED);
        let v1 = Some(WireVersion(1));
        let v2 = Some(WireVersion(2));
        assert_eq!(current.raise_to([v1, v2, v1]), Some(WireVersion(1)));
        assert_eq!(current.raise_to([v2, v2]), Some(WireVersion(2)));
        // A member that reported nothing may be of any release: no raise.
        assert_eq!(current.raise_to([v2, None]), None);
        // A member of a release before wire versions.
        assert_eq!(current.raise_to([v1, Some(WireVersion::UNREPORTED)]), None);
        // Never lowered, never "raised" to where it is.
        assert_eq!(ClusterVersion(WireVersion(2)).raise_to([v1, v1]), None);
        assert_eq!(ClusterVersion(WireVersion(1)).raise_to([v1]), None);
        assert_eq!(
            ClusterVersion(WireVersion(1)).raise_to([v2]),
            Some(WireVersion(2))
        );
        // No members, no reports: nothing to base a raise on.
        assert_eq!(current.raise_to([]), None);
    }
}
