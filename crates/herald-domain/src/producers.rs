//! Idempotent producer ids: handed out by the metadata group, so they are unique in the
//! cluster, and for named producers with an epoch that grows with each registration.
//!
//! A name always gets the same id back with the next epoch: the new holder (a restarted
//! worker) fences the previous one, whose batches carry the older epoch. When a name's
//! epochs run out (`i16::MAX`), it gets a fresh id at epoch 0 and the old id is retired:
//! every epoch of it is fenced. An unnamed registration gets a fresh id at epoch 0 and is not
//! remembered (there is nobody to fence).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A producer id and epoch, as `POST /v1/producers` answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerRegistration {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// What the cluster knows of an id at produce time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisteredEpoch {
    /// A named producer's current epoch: older ones are fenced.
    Current(i16),
    /// An id its name gave up: every epoch is fenced.
    Retired,
}

/// The registry in the replicated metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerRegistry {
    /// The id the next registration that needs one gets.
    pub next_producer_id: i64,
    /// Named producers, by name.
    pub named: BTreeMap<String, ProducerRegistration>,
    /// The name holding each named id, to look an id up at produce time.
    pub names_by_id: BTreeMap<i64, String>,
    /// Ids whose name moved to a new id when its epochs ran out.
    pub retired_ids: BTreeSet<i64>,
}

impl ProducerRegistry {
    /// Registers a producer (deterministic: every metadata replica gets the same answer).
    pub fn init(&mut self, name: Option<&str>) -> ProducerRegistration {
        let Some(name) = name else {
            return ProducerRegistration {
                producer_id: self.allocate_id(),
                producer_epoch: 0,
            };
        };
        let registration = match self.named.get(name).copied() {
            Some(known) if known.producer_epoch < i16::MAX => ProducerRegistration {
                producer_id: known.producer_id,
                producer_epoch: known.producer_epoch + 1,
            },
            Some(exhausted) => {
                self.names_by_id.remove(&exhausted.producer_id);
                self.retired_ids.insert(exhausted.producer_id);
                ProducerRegistration {
                    producer_id: self.allocate_id(),
                    producer_epoch: 0,
                }
            }
            None => ProducerRegistration {
                producer_id: self.allocate_id(),
                producer_epoch: 0,
            },
        };
        self.named.insert(name.to_string(), registration);
        self.names_by_id
            .insert(registration.producer_id, name.to_string());
        registration
    }

    /// What the registry says of `producer_id`: `None` for an unnamed (or unknown) id.
    pub fn registered_epoch(&self, producer_id: i64) -> Option<RegisteredEpoch> {
        if self.retired_ids.contains(&producer_id) {
            return Some(RegisteredEpoch::Retired);
        }
        let name = self.names_by_id.get(&producer_id)?;
        let registration = self.named.get(name)?;
        Some(RegisteredEpoch::Current(registration.producer_epoch))
    }

    fn allocate_id(&mut self) -> i64 {
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_producers_get_fresh_ids_at_epoch_zero() {
        let mut registry = ProducerRegistry::default();
        let first = registry.init(None);
        let second = registry.init(None);
        assert_ne!(first.producer_id, second.producer_id);
        assert_eq!((first.producer_epoch, second.producer_epoch), (0, 0));
        assert_eq!(registry.registered_epoch(first.producer_id), None);
    }

    #[test]
    fn a_name_keeps_its_id_and_bumps_the_epoch() {
        let mut registry = ProducerRegistry::default();
        let first = registry.init(Some("etl-worker-1"));
        let other = registry.init(Some("etl-worker-2"));
        let again = registry.init(Some("etl-worker-1"));
        assert_eq!(again.producer_id, first.producer_id);
        assert_ne!(other.producer_id, first.producer_id);
        assert_eq!(again.producer_epoch, first.producer_epoch + 1);
        assert_eq!(
            registry.registered_epoch(first.producer_id),
            Some(RegisteredEpoch::Current(1))
        );
    }

    #[test]
    fn exhausted_epochs_move_the_name_to_a_new_id() {
        let mut registry = ProducerRegistry::default();
        let first = registry.init(Some("w"));
        registry.named.insert(
            "w".into(),
            ProducerRegistration {
                producer_id: first.producer_id,
                producer_epoch: i16::MAX,
            },
        );
        let moved = registry.init(Some("w"));
        assert_ne!(moved.producer_id, first.producer_id);
        assert_eq!(moved.producer_epoch, 0);
        assert_eq!(
            registry.registered_epoch(first.producer_id),
            Some(RegisteredEpoch::Retired)
        );
        assert_eq!(
            registry.registered_epoch(moved.producer_id),
            Some(RegisteredEpoch::Current(0))
        );
    }
}
