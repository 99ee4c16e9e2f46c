//! The two names a request carries: `herald-reply-to`, which names the requester's node (so a
//! reply posted to any node finds its way there), and `herald-correlation-id`, which names the
//! waiting request on that node.
//!
//! `reply_to` is `<node id>.<16 hex digits>`: the node id, and the requester process's random
//! instance number, so a reply for a node that restarted since (and forgot its waiters) is
//! answered "nobody waits" rather than matched against a new request by chance. The
//! correlation id is 128 random bits (32 lowercase hex digits): it must not be guessable, since
//! whoever knows it can answer the request.

use super::super::{BrokerError, BrokerResult};

/// `reply_to`: one or more digits, a dot, 16 lowercase hex digits.
pub const REPLY_TO_PATTERN: &str = "^[0-9]{1,20}\\.[0-9a-f]{16}$";
/// `correlation_id`: 32 lowercase hex digits.
pub const CORRELATION_ID_PATTERN: &str = "^[0-9a-f]{32}$";

/// Where a reply goes: a node, and the instance of the herald process that waits there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    pub node: u64,
    pub instance: u64,
}

impl ReplyTo {
    pub fn parse(text: &str) -> BrokerResult<ReplyTo> {
        let bad = || {
            BrokerError::InvalidRequest(format!(
                "reply_to must be the herald-reply-to header of a request (<node id>.<16 lowercase hex digits>), got '{}'",
                text.chars().take(64).collect::<String>()
            ))
        };
        let (node, instance) = text.split_once('.').ok_or_else(bad)?;
        if node.is_empty() || node.len() > 20 || !node.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        Ok(ReplyTo {
            node: node.parse().map_err(|_| bad())?,
            instance: parse_lower_hex(instance, 16).ok_or_else(bad)? as u64,
        })
    }
}

impl std::fmt::Display for ReplyTo {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}.{:016x}", self.node, self.instance)
    }
}

/// Names one waiting request on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CorrelationId(pub u128);

impl CorrelationId {
    pub fn parse(text: &str) -> BrokerResult<CorrelationId> {
        parse_lower_hex(text, 32).map(CorrelationId).ok_or_else(|| {
            BrokerError::InvalidRequest(format!(
                "correlation_id must be the herald-correlation-id header of a request (32 lowercase hex digits), got '{}'",
                text.chars().take(64).collect::<String>()
            ))
        })
    }
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{:032x}", self.0)
    }
}

/// Exactly `digits` lowercase hex digits (one spelling per number, so an id has one form).
fn parse_lower_hex(text: &str, digits: usize) -> Option<u128> {
    if text.len() != digits || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

/// Random bits from the operating system. Correlation ids must not be guessable, so there is no
/// weaker fallback: a node that cannot get randomness refuses the request.
pub fn random_u128() -> BrokerResult<u128> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|error| BrokerError::Internal(format!("no randomness for an id: {error}")))?;
    Ok(u128::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_they_parse() {
        let reply_to = ReplyTo {
            node: 3,
            instance: 0xab,
        };
        assert_eq!(reply_to.to_string(), "3.00000000000000ab");
        assert_eq!(ReplyTo::parse(&reply_to.to_string()).unwrap(), reply_to);
        let id = CorrelationId(random_u128().unwrap());
        assert_eq!(id.to_string().len(), 32);
        assert_eq!(CorrelationId::parse(&id.to_string()).unwrap(), id);
    }

    #[test]
    fn malformed_ids_are_invalid_requests() {
        for text in [
            "",
            "3",
            "3.",
            ".00000000000000ab",
            "3.00000000000000AB",
            "3.0000000000000ab",
            "+3.00000000000000ab",
            "x.00000000000000ab",
            "99999999999999999999.00000000000000ab",
            "3.00000000000000ab.1",
        ] {
            assert!(ReplyTo::parse(text).is_err(), "{text}");
        }
        for text in ["", "abc", &"A".repeat(32), &"0".repeat(31), &"g".repeat(32)] {
            assert!(CorrelationId::parse(text).is_err(), "{text}");
        }
    }
}
