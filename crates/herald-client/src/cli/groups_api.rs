//! Consumer group calls of the HTTP client: join, heartbeat, poll, commit and leave, for the
//! benchmarks (and any client command that reads as a group member).

use serde::Deserialize;
use serde_json::{json, Value};

use super::client::Api;

/// A member's place in its group, as a join or heartbeat answers it.
#[derive(Debug, Clone, Deserialize)]
pub struct Membership {
    pub member_id: String,
    pub generation: u64,
    pub assignments: Vec<GroupPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub struct GroupPartition {
    pub topic: String,
    pub partition: u32,
}

impl Api {
    /// `POST /v1/groups/{group}/members`.
    pub async fn join_group(
        &self,
        group: &str,
        topics: &[&str],
        session_timeout_ms: u64,
    ) -> anyhow::Result<Membership> {
        let body = json!({"topics": topics, "session_timeout_ms": session_timeout_ms});
        self.send_json(
            self.http()
                .post(self.url(&["v1", "groups", group, "members"]))
                .json(&body),
        )
        .await
    }

    /// `POST /v1/groups/{group}/members/{member}/heartbeat`.
    pub async fn group_heartbeat(&self, group: &str, member: &str) -> anyhow::Result<Membership> {
        self.send_json(self.http().post(self.url(&[
            "v1",
            "groups",
            group,
            "members",
            member,
            "heartbeat",
        ])))
        .await
    }

    /// The URL of `POST /v1/groups/{group}/members/{member}/poll`.
    pub fn poll_url(&self, group: &str, member: &str) -> reqwest::Url {
        self.url(&["v1", "groups", group, "members", member, "poll"])
    }

    /// `POST /v1/groups/{group}/offsets` with a prepared body.
    pub async fn commit_offsets(&self, group: &str, body: &Value) -> anyhow::Result<()> {
        self.send(
            self.http()
                .post(self.url(&["v1", "groups", group, "offsets"]))
                .json(body),
        )
        .await
        .map(drop)
    }

    /// `DELETE /v1/groups/{group}/members/{member}`.
    pub async fn leave_group(&self, group: &str, member: &str) -> anyhow::Result<()> {
        self.send(
            self.http()
                .delete(self.url(&["v1", "groups", group, "members", member])),
        )
        .await
        .map(drop)
    }
}
