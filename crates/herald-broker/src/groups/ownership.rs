//! Whose a member is. A member belongs to the principal that joined it (`GroupMember::owner`);
//! the transports ask for its owner and topics before they poll, heartbeat, commit or leave for
//! it, so another principal that read the member's id (anyone with `view` on the group can)
//! cannot act as it.

use crate::GroupService;

use std::time::Duration;

use super::refusal::{check_group_name, unknown_member};
use crate::BrokerResult;

/// How long a node waits for its copy of a group to show a member the coordinator knows (one
/// joined through another node a moment ago).
const MEMBER_CATCH_UP: Duration = Duration::from_secs(1);

/// What a transport checks before it acts for a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFacts {
    /// The subject of the principal that joined it (`None`: authentication was off).
    pub owner: Option<String>,
    /// The topics it joined for: what its polls read.
    pub topics: Vec<String>,
}

impl GroupService {
    /// The owner and topics of `member_id` in `group`, from this node's copy of the group. A
    /// member this copy does not show yet is asked for at the group coordinator (the metadata
    /// leader), and this copy awaited; one the coordinator does not know is `unknown_member`.
    pub async fn group_member(&self, group: &str, member_id: &str) -> BrokerResult<MemberFacts> {
        check_group_name(group)?;
        if let Some(facts) = self.local_member(group, member_id) {
            return Ok(facts);
        }
        let membership = self.group_heartbeat(group, member_id).await?;
        let mut changes = self.core.cluster().groups().changes();
        let caught_up = async {
            loop {
                if let Some(facts) = self.local_member(group, member_id) {
                    return Some(facts);
                }
                let generation = self
                    .core
                    .cluster()
                    .groups()
                    .read(|groups| groups.get(group).map(|group| group.generation));
                if generation.is_some_and(|generation| generation >= membership.generation) {
                    // This copy is at the coordinator's generation without the member: it left.
                    return None;
                }
                if changes.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(MEMBER_CATCH_UP, caught_up)
            .await
            .ok()
            .flatten()
            .ok_or_else(|| unknown_member(group, member_id))
    }

    fn local_member(&self, group: &str, member_id: &str) -> Option<MemberFacts> {
        self.core.cluster().groups().read(|groups| {
            let member = groups.get(group)?.members.get(member_id)?;
            Some(MemberFacts {
                owner: member.owner.clone(),
                topics: member.topics.clone(),
            })
        })
    }
}
