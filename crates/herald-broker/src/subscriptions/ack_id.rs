//! Ack ids: what names one delivery of one message to one puller. Opaque to clients; here
//! it is five lowercase hex numbers joined by dots: subscription id, partition, offset,
//! delivery attempt and lease token (the raft index of the lease). Parsed strictly.

use crate::{BrokerError, BrokerResult};
use herald_raft::LeaseRef;

/// The longest ack id (5 numbers of at most 16 hex digits and 4 dots).
pub const MAX_ACK_ID_LEN: usize = 84;
/// The pattern the OpenAPI document declares; every string it matches parses.
pub const ACK_ID_PATTERN: &str =
    "^[0-9a-f]{1,16}\\.[0-9a-f]{1,8}\\.[0-9a-f]{1,16}\\.[0-9a-f]{1,8}\\.[0-9a-f]{1,16}$";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckId {
    pub subscription: u64,
    pub partition: u32,
    pub lease: LeaseRef,
}

impl AckId {
    pub fn encode(&self) -> String {
        format!(
            "{:x}.{:x}.{:x}.{:x}.{:x}",
            self.subscription,
            self.partition,
            self.lease.offset,
            self.lease.attempt,
            self.lease.token
        )
    }

    pub fn parse(text: &str) -> BrokerResult<AckId> {
        let malformed = || {
            BrokerError::InvalidRequest(format!(
                "ack_id '{}' is malformed: use an ack_id exactly as a pull answered it",
                text.chars().take(100).collect::<String>()
            ))
        };
        let mut parts = text.split('.');
        let mut next = |max_digits: usize| -> BrokerResult<u64> {
            let part = parts.next().ok_or_else(malformed)?;
            if part.is_empty()
                || part.len() > max_digits
                || !part
                    .bytes()
                    .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
            {
                return Err(malformed());
            }
            u64::from_str_radix(part, 16).map_err(|_| malformed())
        };
        let subscription = next(16)?;
        let partition = next(8)? as u32;
        let offset = next(16)?;
        let attempt = next(8)? as u32;
        let token = next(16)?;
        if parts.next().is_some() {
            return Err(malformed());
        }
        Ok(AckId {
            subscription,
            partition,
            lease: LeaseRef {
                offset,
                attempt,
                token,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_ids_round_trip_and_anything_else_is_refused() {
        let id = AckId {
            subscription: 3,
            partition: 2,
            lease: LeaseRef {
                offset: u64::MAX,
                attempt: u32::MAX,
                token: 99,
            },
        };
        let text = id.encode();
        assert!(text.len() <= MAX_ACK_ID_LEN);
        assert_eq!(AckId::parse(&text).unwrap(), id);
        for bad in [
            "",
            "1.2.3.4",
            "1.2.3.4.5.6",
            "1.2.3.4.G",
            "1.2.3.4.-5",
            "1..3.4.5",
            "1.2.3.4.5 ",
            "1.123456789.3.4.5",
            "11111111111111111.2.3.4.5",
            "A.2.3.4.5",
            "+1.2.3.4.5",
        ] {
            assert!(AckId::parse(bad).is_err(), "{bad:?} parsed");
        }
        let pattern = regex_lite_check(ACK_ID_PATTERN);
        assert!(pattern);
    }

    /// The declared pattern's shape matches what `parse` takes (checked by hand: the crate
    /// has no regex engine).
    fn regex_lite_check(pattern: &str) -> bool {
        pattern.matches("[0-9a-f]").count() == 5
            && pattern.starts_with('^')
            && pattern.ends_with('$')
    }
}
