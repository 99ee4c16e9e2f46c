//! Idempotent producing, the broker's part: checking what the client asked for, the
//! fingerprint of what it sent, where unkeyed messages go so a retry lands identically, and what
//! a partition's dedup window answered.
//!
//! The decision itself is made by each partition's replicated dedup window at apply time (see
//! `raft::partition::dedup`); the broker only prepares the claim and reads the verdict.

use crate::ProduceService;

use serde::{Deserialize, Serialize};

use crate::{Acks, BrokerError, BrokerResult, Idempotence, ProduceMessage};
use herald_domain::batch::ProducerStamp;
use herald_domain::partitioner::partition_for_key;
use herald_domain::producers::RegisteredEpoch;
use herald_domain::{RecordKey, RecordValue, TopicConfig};
use herald_raft::DedupLimits;

/// The longest `Idempotency-Key` accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Checks an `Idempotency-Key`: 1 to 255 printable ASCII characters.
pub fn validate_idempotency_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(format!(
            "the Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters, got {}",
            key.len()
        ));
    }
    if let Some(bad) = key.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(format!(
            "the Idempotency-Key header must be printable ASCII; {bad:?} is not"
        ));
    }
    Ok(())
}

/// What a partition's share of an idempotent request asks its leader's dedup window; the leader
/// adds its clock when it proposes. The producer's identity travels in the batch header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OnceClaim {
    pub idempotency_key: Option<String>,
    pub fingerprint: u32,
    pub limits: DedupLimits,
}

/// Where an append landed, as a partition's leader answers it. An ordinary append is always
/// `Appended`; an idempotent one may be any of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Landing {
    Appended {
        base_offset: u64,
    },
    /// Written before; where, when the window still remembers.
    Duplicate {
        base_offset: Option<u64>,
    },
    OutOfOrderSequence {
        expected: i64,
    },
    ProducerFenced {
        current_epoch: i16,
    },
    IdempotencyKeyReused,
}

impl From<herald_raft::OnceOutcome> for Landing {
    fn from(outcome: herald_raft::OnceOutcome) -> Self {
        use herald_raft::OnceOutcome;
        match outcome {
            OnceOutcome::Appended { base_offset } => Landing::Appended { base_offset },
            OnceOutcome::Duplicate { base_offset } => Landing::Duplicate { base_offset },
            OnceOutcome::OutOfOrderSequence { expected } => {
                Landing::OutOfOrderSequence { expected }
            }
            OnceOutcome::ProducerFenced { current_epoch } => {
                Landing::ProducerFenced { current_epoch }
            }
            OnceOutcome::IdempotencyKeyReused => Landing::IdempotencyKeyReused,
        }
    }
}

impl Idempotence {
    /// Whether the request is idempotent at all.
    pub fn is_idempotent(&self) -> bool {
        self.idempotency_key.is_some() || self.producer.is_some()
    }

    /// The stamp the request's batch carries.
    pub(super) fn stamp(&self) -> ProducerStamp {
        match self.producer {
            Some(fields) => ProducerStamp {
                producer_id: fields.producer_id,
                producer_epoch: fields.producer_epoch,
                base_sequence: fields.sequence,
            },
            None => ProducerStamp::NONE,
        }
    }

    /// The claim of one partition's share of the request.
    pub(super) fn claim(&self, fingerprint: u32, config: &TopicConfig) -> OnceClaim {
        OnceClaim {
            idempotency_key: self.idempotency_key.clone(),
            fingerprint,
            limits: DedupLimits {
                max_age_ms: config.idempotency_window_ms,
                max_entries: config.idempotency_window_entries,
            },
        }
    }

    /// Where unkeyed messages without a partition go: an idempotent request must land the
    /// same way when it is retried, so not round-robin. A producer's go to one partition
    /// derived from its id (its sequences are per partition), otherwise the key's hash decides.
    pub(super) fn unkeyed_partition(&self, partition_count: u32) -> Option<u32> {
        if let Some(fields) = self.producer {
            let id = fields.producer_id.to_string();
            return Some(partition_for_key(id.as_bytes(), partition_count));
        }
        self.idempotency_key
            .as_ref()
            .map(|key| partition_for_key(key.as_bytes(), partition_count))
    }

    /// Checks what can be checked before looking at the messages.
    pub(super) fn validate(&self, acks: Acks, message_count: usize) -> BrokerResult<()> {
        if let Some(key) = &self.idempotency_key {
            validate_idempotency_key(key).map_err(BrokerError::InvalidRequest)?;
        }
        if let Some(fields) = self.producer {
            if fields.producer_id < 0 || fields.producer_epoch < 0 || fields.sequence < 0 {
                return Err(BrokerError::InvalidRequest(
                    "producer_id, producer_epoch and sequence must not be negative".into(),
                ));
            }
            let last = i64::from(fields.sequence) + message_count as i64 - 1;
            if last > i64::from(i32::MAX) {
                return Err(BrokerError::InvalidRequest(format!(
                    "the request's last sequence would be {last}, above the largest sequence {}",
                    i32::MAX
                )));
            }
        }
        if self.is_idempotent() && acks != Acks::All {
            return Err(BrokerError::InvalidRequest(
                "an idempotent produce (Idempotency-Key or producer fields) needs acks=all: its \
                 offsets are known only once the partition applied it"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Adds one message, as the client sent it, to a partition share's fingerprint: key, value,
/// headers (but `traceparent`), and the explicit partition and timestamp (a timestamp the broker filled in would
/// differ on a retry). Every part is length-prefixed and tagged, so different messages cannot
/// run together into the same bytes.
pub(super) fn fingerprint_message(crc: u32, message: &ProduceMessage) -> u32 {
    let mut crc = crc;
    let mut field = |tag: u8, bytes: &[u8]| {
        crc = crc32c::crc32c_append(crc, &[tag]);
        crc = crc32c::crc32c_append(crc, &(bytes.len() as u64).to_be_bytes());
        crc = crc32c::crc32c_append(crc, bytes);
    };
    match &message.key {
        None => field(0, &[]),
        Some(RecordKey::Text(text)) => field(1, text.as_bytes()),
        Some(RecordKey::Bytes(bytes)) => field(2, bytes),
    }
    match &message.value {
        RecordValue::Json(text) => field(3, text),
        RecordValue::Bytes(bytes) => field(4, bytes),
    }
    // A retry may carry a new trace context (a client's new attempt, or the server's span of
    // it): the same message all the same.
    let traced = |name: &String| name.eq_ignore_ascii_case("traceparent");
    let headers = message.headers.iter().filter(|(name, _)| !traced(name));
    field(5, &(headers.clone().count() as u64).to_be_bytes());
    for (name, value) in headers {
        field(6, name.as_bytes());
        field(7, value.as_bytes());
    }
    match message.partition {
        None => field(8, &[]),
        Some(partition) => field(9, &partition.to_be_bytes()),
    }
    match message.timestamp {
        None => field(10, &[]),
        Some(timestamp) => field(11, &timestamp.to_be_bytes()),
    }
    crc
}

impl ProduceService {
    /// Refuses a producer epoch the metadata already superseded, so a zombie is fenced even on
    /// partitions the new holder of its id has not written yet. A newer epoch than this node
    /// knows passes: its metadata may lag a registration made through another node.
    pub(super) fn check_registered_epoch(&self, idempotence: &Idempotence) -> BrokerResult<()> {
        let Some(fields) = idempotence.producer else {
            return Ok(());
        };
        let registered = self
            .core
            .cluster()
            .metadata()
            .current()
            .producers
            .registered_epoch(fields.producer_id);
        match registered {
            Some(RegisteredEpoch::Current(current)) if fields.producer_epoch < current => {
                Err(fenced(fields.producer_id, fields.producer_epoch, current))
            }
            Some(RegisteredEpoch::Retired) => Err(BrokerError::ProducerFenced(format!(
                "producer {} was retired when its name ran out of epochs and moved to a new id; register again with POST /v1/producers",
                fields.producer_id
            ))),
            _ => Ok(()),
        }
    }
}

/// The error of a fenced epoch.
pub(super) fn fenced(producer_id: i64, epoch: i16, current: i16) -> BrokerError {
    BrokerError::ProducerFenced(format!(
        "producer {producer_id} epoch {epoch} is fenced: epoch {current} took over the id"
    ))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ProducerFields;

    fn message(key: Option<&str>, value: &str) -> ProduceMessage {
        ProduceMessage {
            key: key.map(|key| RecordKey::Text(key.into())),
            value: RecordValue::Json(Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
            partition: None,
            timestamp: None,
        }
    }

    #[test]
    fn keys_are_printable_ascii_of_bounded_length() {
        assert!(validate_idempotency_key("order-17 retry #2").is_ok());
        assert!(validate_idempotency_key(&"k".repeat(255)).is_ok());
        for bad in ["", "tab\there", "é", "new\nline", "\u{7f}"] {
            assert!(validate_idempotency_key(bad).is_err(), "{bad:?}");
        }
        assert!(validate_idempotency_key(&"k".repeat(256)).is_err());
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let base = fingerprint_message(0, &message(Some("a"), "1"));
        assert_eq!(base, fingerprint_message(0, &message(Some("a"), "1")));
        assert_ne!(base, fingerprint_message(0, &message(Some("a"), "2")));
        assert_ne!(base, fingerprint_message(0, &message(None, "1")));
        let mut with_timestamp = message(Some("a"), "1");
        with_timestamp.timestamp = Some(5);
        assert_ne!(base, fingerprint_message(0, &with_timestamp));
        let mut with_header = message(Some("a"), "1");
        with_header.headers.push(("h".into(), "v".into()));
        assert_ne!(base, fingerprint_message(0, &with_header));
        // Fields cannot run together: key "ab" + value "c" is not key "a" + value "bc".
        assert_ne!(
            fingerprint_message(0, &message(Some("ab"), "\"c\"")),
            fingerprint_message(0, &message(Some("a"), "b\"c\""))
        );
    }

    #[test]
    fn idempotent_requests_need_acks_all_and_sane_producer_fields() {
        let keyed = Idempotence {
            idempotency_key: Some("k".into()),
            producer: None,
        };
        assert!(keyed.validate(Acks::All, 3).is_ok());
        assert!(keyed.validate(Acks::Leader, 3).is_err());
        assert!(keyed.validate(Acks::None, 3).is_err());
        assert!(Idempotence::default().validate(Acks::None, 3).is_ok());
        let producer = |sequence| Idempotence {
            idempotency_key: None,
            producer: Some(ProducerFields {
                producer_id: 4,
                producer_epoch: 0,
                sequence,
            }),
        };
        assert!(producer(i32::MAX - 2).validate(Acks::All, 3).is_ok());
        assert!(producer(i32::MAX - 1).validate(Acks::All, 3).is_err());
        assert!(producer(-1).validate(Acks::All, 1).is_err());
    }

    #[test]
    fn unkeyed_messages_of_an_idempotent_request_land_the_same_way_every_time() {
        let keyed = Idempotence {
            idempotency_key: Some("retry-me".into()),
            producer: None,
        };
        let first = keyed.unkeyed_partition(6);
        assert!(first.is_some());
        assert_eq!(first, keyed.unkeyed_partition(6));
        assert_eq!(Idempotence::default().unkeyed_partition(6), None);
    }
}
