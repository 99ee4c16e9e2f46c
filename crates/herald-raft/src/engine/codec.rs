//! Binary encoding of what raft stores: postcard, compact and schema-driven.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::types::Entry;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, std::io::Error> {
    postcard::to_stdvec(value).map_err(|error| std::io::Error::other(format!("encode: {error}")))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, std::io::Error> {
    postcard::from_bytes(bytes).map_err(|error| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("decode: {error}"))
    })
}

pub fn encode_entry(entry: &Entry) -> Result<Vec<u8>, std::io::Error> {
    encode(entry)
}

pub fn decode_entry(bytes: &[u8]) -> Result<Entry, std::io::Error> {
    decode(bytes)
}

/// `value`, then `extension`: how a value whose own encoding is frozen (it is in data
/// directories and snapshots already) carries something new. A release that does not know the
/// extension decodes the value and ignores the bytes after it (postcard reads what the type
/// needs and no more); [`decode_extended`] reads both.
pub fn encode_extended<T: Serialize, E: Serialize>(
    value: &T,
    extension: &E,
) -> Result<Vec<u8>, std::io::Error> {
    let bytes = encode(value)?;
    postcard::to_extend(extension, bytes)
        .map_err(|error| std::io::Error::other(format!("encode: {error}")))
}

/// A value and its extension (`None` when the bytes end with the value: written by a release
/// before the extension).
pub fn decode_extended<T: DeserializeOwned, E: DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, Option<E>), std::io::Error> {
    let invalid = |error: postcard::Error| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("decode: {error}"))
    };
    let (value, rest) = postcard::take_from_bytes::<T>(bytes).map_err(invalid)?;
    if rest.is_empty() {
        return Ok((value, None));
    }
    let extension = postcard::from_bytes::<E>(rest).map_err(invalid)?;
    Ok((value, Some(extension)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_is_read_by_who_knows_it_and_skipped_by_who_does_not() {
        let bytes = encode_extended(&(7u32, "state".to_string()), &42u16).unwrap();
        // A release before the extension: the value alone.
        let old: (u32, String) = decode(&bytes).unwrap();
        assert_eq!(old, (7, "state".to_string()));
        // This release, on its own bytes and on an older release's.
        let (value, extension) = decode_extended::<(u32, String), u16>(&bytes).unwrap();
        assert_eq!((value.0, extension), (7, Some(42)));
        let older = encode(&(7u32, "state".to_string())).unwrap();
        let (_, extension) = decode_extended::<(u32, String), u16>(&older).unwrap();
        assert_eq!(extension, None);
    }
}
