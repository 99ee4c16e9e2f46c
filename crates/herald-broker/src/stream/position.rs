//! Where a stream starts and how it resumes.
//!
//! A resume token lists, for every partition of a stream, the offset it continues from (the
//! next offset to deliver): `0:18,1:5,2:0`. Each delivered message carries the token as it is
//! right after that message, so a client that hands back the last token it received gets every
//! later message of every partition once, none it already had. A single `p:o` is the same list
//! with one entry; partitions a token does not name start from the stream's `from`.

use std::collections::BTreeMap;
use std::fmt;

use super::super::{BrokerError, BrokerResult};

/// The longest token accepted: 1024 partitions of `pppp:oooooooooooooooooooo,`.
pub const MAX_TOKEN_LEN: usize = 1024 * 26;

/// Where each partition of a new stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
    /// The same offset in every partition.
    Offset(u64),
    /// The first message at or after this time (ms since the epoch), per partition.
    Timestamp(i64),
    /// A resume token: exact positions for the partitions it names, `Earliest` for others.
    Positions(Positions),
}

impl StartFrom {
    /// Parses `earliest`, `latest`, an offset, `timestamp:<ms>` or a resume token.
    pub fn parse(text: &str) -> BrokerResult<StartFrom> {
        match text {
            "earliest" => return Ok(StartFrom::Earliest),
            "latest" => return Ok(StartFrom::Latest),
            _ => {}
        }
        if let Some(ms) = text.strip_prefix("timestamp:") {
            return match ms.parse::<i64>() {
                Ok(ms) if ms >= 0 => Ok(StartFrom::Timestamp(ms)),
                _ => Err(BrokerError::InvalidRequest(format!(
                    "from=timestamp:<ms> needs milliseconds since the epoch (>= 0), got '{ms}'"
                ))),
            };
        }
        if text.contains(':') {
            return Positions::parse(text).map(StartFrom::Positions);
        }
        text.parse::<u64>().map(StartFrom::Offset).map_err(|_| {
            BrokerError::InvalidRequest(format!(
                "from must be 'earliest', 'latest', a non-negative offset, 'timestamp:<ms>' or a resume token like '0:17,1:4', got '{}'",
                truncated(text)
            ))
        })
    }
}

/// The next offset to deliver, per partition: a stream's position and its resume token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions(BTreeMap<u32, u64>);

impl Positions {
    /// Parses `p:o` or `p0:o0,p1:o1,...` (each partition at most once).
    pub fn parse(text: &str) -> BrokerResult<Positions> {
        let invalid = |why: &str| {
            BrokerError::InvalidRequest(format!(
                "resume token '{}' is not valid ({why}); expected 'partition:offset' pairs separated by commas, like '0:17,1:4'",
                truncated(text)
            ))
        };
        if text.len() > MAX_TOKEN_LEN {
            return Err(invalid("too long"));
        }
        let mut positions = BTreeMap::new();
        for pair in text.split(',') {
            let (partition, offset) = pair.split_once(':').ok_or_else(|| invalid("no ':'"))?;
            let partition = digits(partition)
                .and_then(|p| p.parse::<u32>().ok())
                .ok_or_else(|| invalid("bad partition"))?;
            let offset = digits(offset)
                .and_then(|o| o.parse::<u64>().ok())
                .ok_or_else(|| invalid("bad offset"))?;
            if positions.insert(partition, offset).is_some() {
                return Err(invalid("a partition appears twice"));
            }
        }
        Ok(Positions(positions))
    }

    pub fn get(&self, partition: u32) -> Option<u64> {
        self.0.get(&partition).copied()
    }

    pub fn set(&mut self, partition: u32, offset: u64) {
        self.0.insert(partition, offset);
    }

    pub fn partitions(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.keys().copied()
    }
}

/// Only ASCII digits (no sign, no spaces), so a token has one spelling.
fn digits(text: &str) -> Option<&str> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then_some(text)
}

fn truncated(text: &str) -> String {
    text.chars().take(64).collect()
}

impl fmt::Display for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, (partition, offset)) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{partition}:{offset}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let positions = Positions::parse("2:0,0:18,1:5").expect("valid");
        assert_eq!(positions.to_string(), "0:18,1:5,2:0");
        assert_eq!(positions.get(1), Some(5));
        assert_eq!(Positions::parse("3:7").expect("one").to_string(), "3:7");
    }

    #[test]
    fn bad_tokens_are_refused() {
        for text in [
            "", "0", "0:", ":1", "a:1", "0:-1", "0:1,0:2", "0:1,", "+1:2", "0: 1",
        ] {
            assert!(Positions::parse(text).is_err(), "{text:?}");
        }
        assert!(Positions::parse(&"0:1,".repeat(10_000)).is_err());
    }

    #[test]
    fn from_forms_parse() {
        assert_eq!(StartFrom::parse("earliest").unwrap(), StartFrom::Earliest);
        assert_eq!(StartFrom::parse("latest").unwrap(), StartFrom::Latest);
        assert_eq!(StartFrom::parse("42").unwrap(), StartFrom::Offset(42));
        assert_eq!(
            StartFrom::parse("timestamp:1000").unwrap(),
            StartFrom::Timestamp(1000)
        );
        assert!(matches!(
            StartFrom::parse("0:3,1:4").unwrap(),
            StartFrom::Positions(_)
        ));
        for text in ["", "-1", "soon", "timestamp:", "timestamp:-5", "0:x"] {
            assert!(StartFrom::parse(text).is_err(), "{text:?}");
        }
    }
}
