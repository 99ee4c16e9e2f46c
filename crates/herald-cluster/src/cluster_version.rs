//! The cluster version (see `herald_domain::wire_version`): what every node of the cluster is
//! known to speak. The metadata leader raises it once every member node reports, in its
//! pings, at least a newer wire version; it is replicated in the metadata and never lowered,
//! so what it allows stays allowed. Members are every node the metadata lists (draining ones
//! included), the founders and the metadata group's voters and learners: a node that has not
//! registered yet still holds the cluster back.

use std::collections::BTreeSet;

use herald_domain::metadata::{MetadataCommand, MetadataState};
use herald_domain::wire_version::WireVersion;

use super::Cluster;

impl Cluster {
    /// On the metadata leader: raises the cluster version when every member reports a newer
    /// wire version than it (a node that has not answered a ping lately holds it back).
    pub(super) async fn raise_cluster_version(&self) {
        if !self.metadata.is_leader() {
            return;
        }
        let state = self.metadata.current();
        let reports: Vec<Option<WireVersion>> = self
            .version_members(&state)
            .into_iter()
            .map(|node| self.membership.wire_version_of(node))
            .collect();
        let Some(version) = state.cluster_version.raise_to(reports) else {
            return;
        };
        let from = state.cluster_version;
        match self
            .metadata
            .propose(MetadataCommand::RaiseClusterVersion { version })
            .await
        {
            Ok(_) => {
                tracing::info!(%from, to = %version, "raised the cluster version: every node speaks it")
            }
            Err(error) => tracing::debug!(%error, "could not raise the cluster version yet"),
        }
    }

    /// The nodes whose versions the cluster version waits for.
    fn version_members(&self, state: &MetadataState) -> BTreeSet<u64> {
        let group = self.metadata.replica().members();
        state
            .nodes
            .keys()
            .chain(self.metadata.founders().keys())
            .chain(group.voters.iter())
            .chain(group.learners.iter())
            .copied()
            .filter(|node| !state.removed_nodes.contains(node))
            .collect()
    }
}
