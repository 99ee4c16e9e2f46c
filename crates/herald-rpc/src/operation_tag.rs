//! The one convention the services carried over this transport share for their bodies: a
//! request (and its answer) starts with the operation's kind, a big-endian `u16`, and the
//! operation follows. The transport itself never reads it; the cluster's and the broker's
//! services both frame their operations this way (raft numbers its messages by their variant
//! instead, the same rules applying).
//!
//! The rules that let nodes of two releases talk during a rolling upgrade (see
//! `herald_domain::wire_version` for the wire version they refer to):
//!
//! - an operation's request and reply layouts are frozen once released; a change is a new
//!   operation with a new tag, and a tag is never reused, even after its operation is gone;
//! - a node keeps serving the tags of the previous release while a cluster may still have such
//!   nodes, so an older sender is always understood;
//! - a sender uses a new tag towards a node only once that node reported a wire version that
//!   knows it (or the cluster version says every node does). Discovering that version is the
//!   one exception, made safe by the next rule: a versioned ping may be tried on any node;
//! - a receiver answers a tag it does not know with [`unknown_operation`], which the sender's
//!   transport turns into [`crate::RpcError::UnknownOperation`]: distinct from a failure,
//!   certainly not done, so the sender falls back to what the older node knows.

/// A buffer holding `tag`, for the operation's encoding to be appended to.
pub fn with_tag(tag: u16) -> Vec<u8> {
    tag.to_be_bytes().to_vec()
}

/// A body's operation tag and what follows it; `None` for a body too short to have one.
pub fn split_tag(body: &[u8]) -> Option<(u16, &[u8])> {
    match body {
        [high, low, rest @ ..] => Some((u16::from_be_bytes([*high, *low]), rest)),
        _ => None,
    }
}

/// What every service answers a request with when it does not know its operation kind `tag`
/// (the error text of an answer-error frame): nothing was done.
pub fn unknown_operation(tag: u16) -> String {
    format!("{UNKNOWN_OPERATION}{tag} (this node's release does not know it; nothing was done)")
}

const UNKNOWN_OPERATION: &str = "unknown operation kind ";

/// What the cluster service of releases before wire version 1 answered an unknown tag with.
const UNKNOWN_CLUSTER_OPERATION_BEFORE_WIRE_VERSIONS: &str = "unknown cluster operation kind ";

/// The tag an answer-error text says its node does not know: [`unknown_operation`]'s, or the
/// words the cluster service of releases before wire versions answered with.
pub fn unknown_operation_tag(error: &str) -> Option<u16> {
    let rest = error
        .strip_prefix(UNKNOWN_OPERATION)
        .or_else(|| error.strip_prefix(UNKNOWN_CLUSTER_OPERATION_BEFORE_WIRE_VERSIONS))?;
    let digits = rest
        .find(|character: char| !character.is_ascii_digit())
        .map_or(rest, |end| &rest[..end]);
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_two_big_endian_bytes_before_the_operation() {
        let mut body = with_tag(0x0102);
        body.extend_from_slice(b"op");
        assert_eq!(body, [1, 2, b'o', b'p']);
        assert_eq!(split_tag(&body), Some((0x0102, &b"op"[..])));
        assert_eq!(split_tag(&[1, 2]), Some((0x0102, &[][..])));
        assert_eq!(split_tag(&[1]), None);
    }

    #[test]
    fn an_unknown_operation_is_recognised_from_this_release_and_the_one_before() {
        assert_eq!(unknown_operation_tag(&unknown_operation(5)), Some(5));
        assert_eq!(
            unknown_operation_tag(&unknown_operation(u16::MAX)),
            Some(u16::MAX)
        );
        // Exactly what the cluster service answered before wire versions.
        assert_eq!(
            unknown_operation_tag("unknown cluster operation kind 5"),
            Some(5)
        );
        assert_eq!(
            unknown_operation_tag("unknown cluster operation kind "),
            None
        );
        assert_eq!(unknown_operation_tag("bad cluster request Ping: eof"), None);
        assert_eq!(unknown_operation_tag("unknown service 9"), None);
    }
}
