//! The one convention the services carried over this transport share for their bodies: a
//! request (and its answer) starts with the operation's kind, a big-endian `u16`, and the
//! operation follows. The transport itself never reads it; the cluster's and the broker's
//! services both frame their operations this way.

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
}
