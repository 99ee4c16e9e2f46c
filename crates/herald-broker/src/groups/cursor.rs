//! The poll cursor: where a member's next poll continues, carried by the client instead of
//! replicated by the server.
//!
//! A poll never moves a position the client has not confirmed: every answer carries a cursor
//! naming, for each partition the member was assigned in that answer, the next offset after
//! what it delivered; the client sends back the cursor of the last answer it received. An
//! answer lost on the way (a client timeout, a dropped connection, a 504) leaves the client
//! with the previous cursor, so its next poll delivers those messages again. Polls cost no
//! raft write, and any node can serve the next one.
//!
//! The text is URL-safe base64 (no padding) of a postcard [`CursorBody`]: a layout version, a
//! hash of the group and member id (a cursor of another member is ignored, not refused), the
//! generation of the answer, and the offsets grouped by topic so a topic name is written once.

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::{BrokerError, BrokerResult};
use herald_domain::groups::TopicPartition;

/// The layout written; a cursor of another layout is malformed.
const LAYOUT: u8 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct CursorBody {
    layout: u8,
    member: u64,
    generation: u64,
    topics: Vec<(String, Vec<(u32, u64)>)>,
}

/// A decoded cursor of the member that polls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollCursor {
    /// The generation of the answer that carried it.
    pub generation: u64,
    /// The next offset to read, per partition.
    pub positions: BTreeMap<TopicPartition, u64>,
}

impl PollCursor {
    /// Reads a cursor a client sent: None when it is another member's (or group's), an
    /// `InvalidRequest` when it is longer than `max_len` or not a cursor at all.
    pub fn decode(
        text: &str,
        group: &str,
        member_id: &str,
        max_len: usize,
    ) -> BrokerResult<Option<PollCursor>> {
        if text.len() > max_len {
            return Err(BrokerError::InvalidRequest(format!(
                "the cursor is {} characters long; the limit is {max_len}",
                text.len()
            )));
        }
        let malformed = || {
            BrokerError::InvalidRequest(
                "malformed cursor: send back the `cursor` of a poll answer unchanged".into(),
            )
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(|_| malformed())?;
        let (body, rest) =
            postcard::take_from_bytes::<CursorBody>(&bytes).map_err(|_| malformed())?;
        if !rest.is_empty() || body.layout != LAYOUT {
            return Err(malformed());
        }
        if body.member != member_hash(group, member_id) {
            return Ok(None);
        }
        let positions = body
            .topics
            .into_iter()
            .flat_map(|(topic, partitions)| {
                partitions.into_iter().map(move |(partition, offset)| {
                    (TopicPartition::new(topic.clone(), partition), offset)
                })
            })
            .collect();
        Ok(Some(PollCursor {
            generation: body.generation,
            positions,
        }))
    }

    /// The cursor's text, at most `max_len` characters: when every position does not fit
    /// (a member with thousands of partitions), those at `committed` go first (a poll without
    /// them starts there anyway), then the last ones by name; the partitions left out
    /// restart at the committed offset, which redelivers, never skips.
    pub fn encode(
        &self,
        group: &str,
        member_id: &str,
        max_len: usize,
        committed: impl Fn(&TopicPartition) -> Option<u64>,
    ) -> String {
        let text = self.encode_all(group, member_id);
        if text.len() <= max_len {
            return text;
        }
        let mut trimmed = PollCursor {
            generation: self.generation,
            positions: self
                .positions
                .iter()
                .filter(|(partition, offset)| committed(partition) != Some(**offset))
                .map(|(partition, offset)| (partition.clone(), *offset))
                .collect(),
        };
        loop {
            let text = trimmed.encode_all(group, member_id);
            if text.len() <= max_len || trimmed.positions.is_empty() {
                return text;
            }
            // Shrink in proportion to the excess, by at least one position.
            let keep =
                (trimmed.positions.len() * max_len / text.len()).min(trimmed.positions.len() - 1);
            trimmed.positions = trimmed.positions.into_iter().take(keep).collect();
        }
    }

    fn encode_all(&self, group: &str, member_id: &str) -> String {
        let mut topics: Vec<(String, Vec<(u32, u64)>)> = Vec::new();
        for (partition, offset) in &self.positions {
            match topics.last_mut() {
                Some((topic, partitions)) if *topic == partition.topic => {
                    partitions.push((partition.partition, *offset));
                }
                _ => topics.push((
                    partition.topic.clone(),
                    vec![(partition.partition, *offset)],
                )),
            }
        }
        let body = CursorBody {
            layout: LAYOUT,
            member: member_hash(group, member_id),
            generation: self.generation,
            topics,
        };
        // Plain integers, strings and vectors: encoding cannot fail.
        let bytes = postcard::to_stdvec(&body).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(bytes)
    }
}

/// FNV-1a of the group and member id: stable across nodes and versions (unlike std's
/// hasher), and enough to tell one member's cursor from another's.
fn member_hash(group: &str, member_id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in group.bytes().chain([0]).chain(member_id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(partitions: u32) -> PollCursor {
        PollCursor {
            generation: 7,
            positions: (0..partitions)
                .map(|partition| {
                    let topic = if partition % 2 == 0 {
                        "orders"
                    } else {
                        "payments"
                    };
                    (
                        TopicPartition::new(topic, partition),
                        u64::from(partition) * 1000,
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_cursor_reads_back_for_its_member_only() {
        let sent = cursor(6);
        let text = sent.encode("g", "member-1", 1000, |_| None);
        assert!(text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
        assert_eq!(
            PollCursor::decode(&text, "g", "member-1", 1000).expect("valid"),
            Some(sent)
        );
        assert_eq!(
            PollCursor::decode(&text, "g", "member-2", 1000).expect("valid"),
            None,
            "another member's cursor is ignored"
        );
        assert_eq!(
            PollCursor::decode(&text, "h", "member-1", 1000).expect("valid"),
            None
        );
    }

    #[test]
    fn malformed_and_oversized_cursors_are_refused() {
        let text = cursor(3).encode("g", "m", 1000, |_| None);
        for bad in [
            "",
            "not a cursor!",
            "AAAA",
            &text[..text.len() - 2],
            &format!("{text}AA"),
        ] {
            assert!(
                matches!(
                    PollCursor::decode(bad, "g", "m", 1000),
                    Err(BrokerError::InvalidRequest(_))
                ),
                "{bad:?} was accepted"
            );
        }
        assert!(matches!(
            PollCursor::decode(&text, "g", "m", text.len() - 1),
            Err(BrokerError::InvalidRequest(message)) if message.contains("limit")
        ));
    }

    #[test]
    fn an_answer_cursor_keeps_within_the_limit() {
        let full = cursor(2000);
        let committed = |partition: &TopicPartition| {
            (partition.partition < 1000).then_some(u64::from(partition.partition) * 1000)
        };
        let whole = full.encode("g", "m", usize::MAX, committed);
        let limit = whole.len() / 2;
        let text = full.encode("g", "m", limit, committed);
        assert!(text.len() <= limit, "{} > {limit}", text.len());
        let kept = PollCursor::decode(&text, "g", "m", limit)
            .expect("valid")
            .expect("ours");
        assert!(
            kept.positions
                .keys()
                .all(|partition| partition.partition >= 1000),
            "positions at the committed offset go first"
        );
        assert!(!kept.positions.is_empty());
        let tiny = full.encode("g", "m", 30, committed);
        assert!(tiny.len() <= 30, "{tiny}");
    }
}
