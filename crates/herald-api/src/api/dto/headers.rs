//! Serde helpers shared by message DTOs: headers as a JSON object kept in order, and "present
//! even when null" JSON values.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::value::RawValue;

/// Reads `{"name": "value", ...}` into pairs, in the order the client wrote them. Header values
/// must be strings; anything else is refused with serde's "invalid type" message.
pub fn deserialize_headers<'de, D>(deserializer: D) -> Result<Vec<(String, String)>, D::Error>
where
    D: Deserializer<'de>,
{
    struct HeadersVisitor;

    impl<'de> Visitor<'de> for HeadersVisitor {
        type Value = Vec<(String, String)>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("an object of string header values")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut headers = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some((name, value)) = map.next_entry::<String, String>()? {
                headers.push((name, value));
            }
            Ok(headers)
        }
    }

    deserializer.deserialize_any(HeadersVisitor)
}

/// Writes pairs as a JSON object.
pub fn serialize_headers<S>(headers: &[(String, String)], serializer: S) -> Result<S::Ok, S::Error>
where
    S: Serializer,
{
    let mut map = serializer.serialize_map(Some(headers.len()))?;
    for (name, value) in headers {
        map.serialize_entry(name, value)?;
    }
    map.end()
}

/// `Some(raw)` whenever the field is present, including an explicit `null` (the JSON text
/// `null`); absent fields get `None` through `#[serde(default)]`.
pub fn deserialize_present_raw<'de, D>(deserializer: D) -> Result<Option<Box<RawValue>>, D::Error>
where
    D: Deserializer<'de>,
{
    Box::<RawValue>::deserialize(deserializer).map(Some)
}
