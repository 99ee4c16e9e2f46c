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
