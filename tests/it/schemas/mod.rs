//! The schema registry (docs/schemas.md): Confluent's own clients against a node, the REST API's
//! answers and refusals, and the registry replicated over three nodes.

mod confluent_clients;
mod decoded_streams;
mod registry_api;
mod registry_cluster;

/// Avro's encoding of a long (zig-zag varint).
pub fn avro_long(value: i64) -> Vec<u8> {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let byte = (zigzag & 0x7f) as u8;
        zigzag >>= 7;
        if zigzag == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// `payload` in the Confluent wire format: magic byte 0, the schema id (big-endian).
pub fn framed(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}
