//! What a topic holds, as the comparison of a source and its import needs it: per partition,
//! every message's key, value, headers and timestamp in offset order (offsets themselves are
//! the target's own), and what an export file holds.

use std::collections::BTreeMap;

use herald_client::cli::archive::{ArchiveReader, Frame};
use serde_json::{Map, Value};

use crate::common::{RawMessage, Server};

/// One message without its offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub key: Option<String>,
    pub key_b64: Option<String>,
    /// The value's JSON text, or `b64:` and its base64.
    pub value: String,
    pub headers: Option<Map<String, Value>>,
    pub timestamp: i64,
}

impl From<RawMessage> for Message {
    fn from(raw: RawMessage) -> Message {
        let value = match &raw.value_b64 {
            Some(b64) => format!("b64:{b64}"),
            None => raw.value_text().to_string(),
        };
        Message {
            key: raw.key,
            key_b64: raw.key_b64,
            value,
            headers: raw.headers,
            timestamp: raw.timestamp,
        }
    }
}

/// Every partition's messages of `topic` on `server`, read from its start to its high
/// watermark.
pub async fn read_topic(server: &Server, topic: &str, partitions: u32) -> Vec<Vec<Message>> {
    let mut all = Vec::new();
    for partition in 0..partitions {
        let messages = server.read_all(topic, partition).await;
        all.push(messages.into_iter().map(Message::from).collect());
    }
    all
}

/// The partitions' high watermarks, added up.
pub async fn total_high_watermark(server: &Server, topic: &str) -> u64 {
    server.high_watermarks(topic).await.iter().sum()
}

/// The partitions' high watermarks, added up, once the topic exists (an import creates it).
pub async fn written_so_far(server: &Server, topic: &str) -> Option<u64> {
    let (status, described) = server
        .json(server.get(&format!("/v1/topics/{topic}")).await)
        .await;
    if status != reqwest::StatusCode::OK {
        return None;
    }
    let partitions = described["partitions"].as_array()?;
    partitions
        .iter()
        .map(|partition| partition["high_watermark"].as_u64())
        .sum()
}

/// The topic's configuration as the node describes it.
pub async fn config(server: &Server, topic: &str) -> Value {
    server.describe(topic).await["config"].clone()
}

/// Every frame of an export file; the file must be whole.
pub fn frames(file: &[u8]) -> Vec<Frame> {
    let mut reader = ArchiveReader::open(file).expect("an export file");
    let mut frames = Vec::new();
    while let Some(frame) = reader.next_frame().expect("a sound frame") {
        frames.push(frame);
    }
    frames
}

/// Where each frame of an export file ends, in bytes from the file's start: the file cut there
/// holds exactly the frames before.
pub fn frame_ends(file: &[u8]) -> Vec<usize> {
    let word = |at: usize| u32::from_be_bytes(file[at..at + 4].try_into().expect("4 bytes"));
    // Magic (8), version (2), header length (4), header JSON, its CRC (4).
    let mut at = 14 + word(10) as usize + 4;
    let mut ends = Vec::new();
    while file[at] == 0x01 {
        // Tag (1), partition (4), base offset (8), length (4), the batch.
        at += 17 + word(at + 13) as usize;
        ends.push(at);
    }
    ends
}

/// Records per partition of `frames`.
pub fn records_in(frames: &[Frame]) -> BTreeMap<u32, u64> {
    let mut records = BTreeMap::new();
    for frame in frames {
        *records.entry(frame.partition).or_default() += u64::from(frame.header.record_count);
    }
    records
}
