//! Every variant of an enum, read from its serde derive, so a test knows whether its samples
//! cover them all without a hand-kept list that could fall behind.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeOwned, Visitor};
use serde::Serialize;

/// The variants of enum `T`, in declaration order (postcard's variant numbers), as
/// `#[derive(Deserialize)]` declares them.
///
/// # Panics
///
/// When `T` is not an enum.
pub fn variant_names<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut capture = VariantCapture { variants: None };
    let _ = T::deserialize(&mut capture);
    capture
        .variants
        .unwrap_or_else(|| panic!("{} is not an enum", std::any::type_name::<T>()))
}

/// The variant number a postcard encoding of an enum starts with.
pub fn variant_index(bytes: &[u8]) -> u32 {
    postcard::take_from_bytes::<u32>(bytes)
        .map(|(index, _)| index)
        .unwrap_or(u32::MAX)
}

/// Panics unless `samples` hold at least one of every variant of `T`.
pub fn assert_covers_every_variant<T: Serialize + DeserializeOwned>(samples: &[T]) {
    let names = variant_names::<T>();
    let covered: BTreeSet<u32> = samples
        .iter()
        .map(|sample| variant_index(&postcard::to_stdvec(sample).unwrap_or_default()))
        .collect();
    let missing: Vec<&str> = names
        .iter()
        .enumerate()
        .filter(|(index, _)| !covered.contains(&(*index as u32)))
        .map(|(_, name)| *name)
        .collect();
    assert!(
        missing.is_empty(),
        "no sample (so no golden fixture) of {}::{{{}}}: add one to the samples",
        std::any::type_name::<T>(),
        missing.join(", ")
    );
}

/// A deserializer that answers nothing: it only keeps the variant list an enum's derive hands
/// to `deserialize_enum`.
struct VariantCapture {
    variants: Option<&'static [&'static str]>,
}

#[derive(Debug)]
struct Captured;

impl fmt::Display for Captured {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("only the variant names were wanted")
    }
}

impl std::error::Error for Captured {}

impl de::Error for Captured {
    fn custom<M: fmt::Display>(_message: M) -> Self {
        Captured
    }
}

impl<'de> de::Deserializer<'de> for &mut VariantCapture {
    type Error = Captured;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Captured> {
        Err(Captured)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Captured> {
        self.variants = Some(variants);
        Err(Captured)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize)]
    enum Three {
        First,
        Second(u8),
        Third { value: u16 },
    }

    #[test]
    fn variants_come_from_the_derive_and_samples_are_counted_by_their_bytes() {
        assert_eq!(variant_names::<Three>(), ["First", "Second", "Third"]);
        assert_eq!(
            variant_index(&postcard::to_stdvec(&Three::Second(4)).unwrap()),
            1
        );
        assert_covers_every_variant(&[Three::Third { value: 1 }, Three::First, Three::Second(0)]);
        let partial = std::panic::catch_unwind(|| {
            assert_covers_every_variant(&[Three::First]);
        });
        assert!(partial.is_err());
    }
}
