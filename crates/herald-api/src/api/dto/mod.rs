//! The wire types of the HTTP API (with OpenAPI schemas), apart from the domain types they
//! convert to and from, so the contract and the model can change independently.

pub mod audit;
pub mod auth;
pub mod backups;
pub mod cluster;
pub mod consume;
pub mod decoded;
pub mod groups;
pub mod headers;
pub mod idempotence;
pub mod produce;
pub mod produce_answer;
pub mod produce_batch;
mod produce_borrowed;
pub mod produce_limits;
pub mod producer;
pub mod rebalance;
pub mod redrive;
pub mod requests;
pub mod schemas;
pub mod streams;
pub mod subscriptions;
pub mod topic;
pub mod topic_list;

use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// A field that may be left out (`None`), `null` (`Some(None)`) or a value: a patch that
/// clears something with `null` (`#[serde(default, deserialize_with = "nullable")]`).
pub fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Deserializes a struct only from a JSON object. serde's derived `Deserialize` also takes a
/// struct from an array of its fields in order (`"config": [null, 5]`), which the OpenAPI
/// document does not allow and no client means; a field holding a struct uses this
/// (`#[serde(deserialize_with = "object_only")]`). The top-level body is checked by
/// `api::extract::json_from_bytes`.
pub fn object_only<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ObjectOnly<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
        type Value = T;

        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_map(ObjectOnly(PhantomData))
}
