//! The consumer group bounds the OpenAPI document declares are the ones the broker and the
//! default configuration enforce, so a generated client refuses exactly what a node would. (It
//! spans the transport crate and the node configuration above it, so it lives here.)

use serde_json::Value;

use herald::api::dto::consume::{MAX_MAX_MESSAGES, MAX_WAIT_MS};
use herald::broker::{MAX_COMMIT_OFFSETS, MAX_GROUP_TOPICS};
use herald::config::GroupsConfig;

fn schema_of(name: &str) -> Value {
    let document = serde_json::to_value(herald::api::openapi()).unwrap();
    document["components"]["schemas"][name].clone()
}

/// What the document declares is what the broker and the default configuration enforce,
/// so a generated client refuses exactly what the server would.
#[test]
fn declared_bounds_match_the_enforced_ones() {
    let defaults = GroupsConfig::default();
    let join = schema_of("JoinGroupRequest");
    assert_eq!(join["properties"]["topics"]["minItems"], 1);
    assert_eq!(join["properties"]["topics"]["maxItems"], MAX_GROUP_TOPICS);
    let session = &join["properties"]["session_timeout_ms"];
    assert_eq!(session["minimum"], defaults.min_session_timeout_ms);
    assert_eq!(session["maximum"], defaults.max_session_timeout_ms);

    let poll = schema_of("PollRequest");
    assert_eq!(poll["properties"]["max_messages"]["minimum"], 1);
    assert_eq!(
        poll["properties"]["max_messages"]["maximum"],
        MAX_MAX_MESSAGES
    );
    assert_eq!(poll["properties"]["max_wait_ms"]["maximum"], MAX_WAIT_MS);
    assert_eq!(
        poll["properties"]["cursor"]["maxLength"],
        defaults.max_cursor_bytes
    );

    let commit = schema_of("CommitRequest");
    assert_eq!(commit["properties"]["offsets"]["minItems"], 1);
    assert_eq!(
        commit["properties"]["offsets"]["maxItems"],
        MAX_COMMIT_OFFSETS
    );
}
