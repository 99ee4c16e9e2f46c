//! `herald produce`: one message per stdin line, sent in batches.
//!
//! Lines are batched (`--batch-size`) into JSON produce requests, because one request per line
//! would make piping a large file needlessly slow; batches are sent one after the other so the
//! order of lines is the order of offsets within a partition. A batch answered 207 (some
//! partitions wrote their messages, others did not) stops the run with the lines that were not
//! written, so exactly those can be sent again, and a non-zero exit.

use std::collections::BTreeMap;

use anyhow::Context;
use base64::Engine;
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::client::{Api, ProduceResponse};
use super::schema_encoder::SchemaEncoder;
use super::ProduceArgs;
use herald_domain::batch::{encode_batch, ProducerStamp};
use herald_domain::{Compression, Record, RecordKey, RecordValue};

/// How a stdin line becomes a message's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueMode {
    /// A line that is valid JSON is sent as that JSON value; any other line as a JSON string.
    JsonOrString,
    /// Every line is sent as raw bytes (`value_b64`), untouched.
    Bytes,
}

/// Strips the line terminator that `read_until` keeps: `\n`, and in text mode also a `\r` before
/// it (files written on Windows). In bytes mode only `\n` goes: the bytes are the user's.
pub fn strip_newline(line: &[u8], mode: ValueMode) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    match mode {
        ValueMode::JsonOrString => line.strip_suffix(b"\r").unwrap_or(line),
        ValueMode::Bytes => line,
    }
}

/// Turns one line (without its newline) into a produce-side message object.
///
/// `line_number` (1-based) only serves the error message for a non-UTF-8 line in text mode.
pub fn line_to_message(
    line: &[u8],
    mode: ValueMode,
    key: Option<&str>,
    partition: Option<u32>,
    line_number: u64,
) -> anyhow::Result<Value> {
    let mut message = Map::new();
    if let Some(key) = key {
        message.insert("key".into(), Value::String(key.to_string()));
    }
    if let Some(partition) = partition {
        message.insert("partition".into(), Value::from(partition));
    }
    match mode {
        ValueMode::Bytes => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(line);
            message.insert("value_b64".into(), Value::String(encoded));
        }
        ValueMode::JsonOrString => {
            let text = std::str::from_utf8(line).map_err(|_| {
                anyhow::anyhow!(
                    "stdin line {line_number} is not valid UTF-8; use --bytes to send raw bytes"
                )
            })?;
            let value = serde_json::from_str::<Value>(text)
                .unwrap_or_else(|_| Value::String(text.to_string()));
            message.insert("value".into(), value);
        }
    }
    Ok(Value::Object(message))
}

/// Turns one line (without its newline) into a record of a binary batch (`--binary`): the value
/// as [`line_to_message`] would send it, as the stored layout holds it.
pub fn line_to_record(
    line: &[u8],
    mode: ValueMode,
    key: Option<&str>,
    offset_delta: u32,
    timestamp: i64,
    line_number: u64,
) -> anyhow::Result<Record> {
    let value = match mode {
        ValueMode::Bytes => RecordValue::Bytes(Bytes::copy_from_slice(line)),
        ValueMode::JsonOrString => {
            let text = std::str::from_utf8(line).map_err(|_| {
                anyhow::anyhow!(
                    "stdin line {line_number} is not valid UTF-8; use --bytes to send raw bytes"
                )
            })?;
            let json = match serde_json::from_str::<&RawValue>(text) {
                Ok(raw) => raw.get().to_string(),
                Err(_) => Value::String(text.to_string()).to_string(),
            };
            RecordValue::Json(Bytes::from(json))
        }
    };
    Ok(Record {
        offset_delta,
        timestamp,
        key: key.map(|key| RecordKey::Text(key.to_string())),
        value,
        headers: Vec::new(),
    })
}

/// What was produced, per partition, for the summary on stderr.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProduceSummary {
    pub messages: u64,
    pub requests: u64,
    /// partition -> (messages, lowest offset, highest offset); offsets are `None` with `acks=none`.
    pub partitions: BTreeMap<u32, (u64, Option<u64>, Option<u64>)>,
}

impl ProduceSummary {
    /// Adds the offsets of one answered request (its written messages only).
    pub fn record(&mut self, response: &ProduceResponse) {
        self.requests += 1;
        for produced in response.offsets.iter().filter(|p| p.error.is_none()) {
            self.messages += 1;
            let entry = self
                .partitions
                .entry(produced.partition)
                .or_insert((0, None, None));
            entry.0 += 1;
            if let Some(offset) = produced.offset {
                entry.1 = Some(entry.1.map_or(offset, |low: u64| low.min(offset)));
                entry.2 = Some(entry.2.map_or(offset, |high: u64| high.max(offset)));
            }
        }
    }

    /// Human-readable lines, e.g. `partition 0: 3 messages, offsets 10..=12`.
    pub fn render(&self, topic: &str) -> String {
        let mut out = format!(
            "produced {} message(s) to `{topic}` in {} request(s)\n",
            self.messages, self.requests
        );
        for (partition, (count, low, high)) in &self.partitions {
            match (low, high) {
                (Some(low), Some(high)) => out.push_str(&format!(
                    "  partition {partition}: {count} message(s), offsets {low}..={high}\n"
                )),
                _ => out.push_str(&format!(
                    "  partition {partition}: {count} message(s), offsets not acknowledged\n"
                )),
            }
        }
        out
    }
}

/// The lines of a partly written batch that were not written, grouped by partition with their
/// error, for the user to retry exactly them; `None` when every message was written.
/// `first_line` is the batch's first stdin line (1-based).
pub fn unwritten_lines(response: &ProduceResponse, first_line: u64) -> Option<String> {
    /// How many line numbers are listed per partition; the rest are counted.
    const SHOWN: usize = 10;
    let mut by_partition: BTreeMap<u32, (String, Vec<u64>)> = BTreeMap::new();
    for (index, produced) in response.offsets.iter().enumerate() {
        if let Some(error) = produced.error_text() {
            let entry = by_partition
                .entry(produced.partition)
                .or_insert_with(|| (error, Vec::new()));
            entry.1.push(first_line + index as u64);
        }
    }
    if by_partition.is_empty() {
        return None;
    }
    let failed: usize = by_partition.values().map(|(_, lines)| lines.len()).sum();
    let mut out = format!(
        "{failed} of {} message(s) were not written (the others were); retry exactly these lines:",
        response.offsets.len()
    );
    for (partition, (error, lines)) in &by_partition {
        let shown: Vec<String> = lines.iter().take(SHOWN).map(u64::to_string).collect();
        let more = match lines.len().saturating_sub(SHOWN) {
            0 => String::new(),
            rest => format!(" and {rest} more"),
        };
        out.push_str(&format!(
            "\n  partition {partition}, line(s) {}{more}: {error}",
            shown.join(", ")
        ));
    }
    Some(out)
}

/// Sends one batch and records it; on failure says how much was already written, and for a
/// partly written batch which lines were not. `first_line` is the batch's first stdin line.
async fn flush(
    api: &Api,
    args: &ProduceArgs,
    batch: &mut Vec<Value>,
    first_line: u64,
    summary: &mut ProduceSummary,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let count = batch.len();
    let body = serde_json::json!({ "messages": std::mem::take(batch) });
    let response = api
        .produce(&args.topic, args.acks, &body)
        .await
        .with_context(|| {
            format!(
                "a batch of {count} message(s) failed after {} message(s) were produced",
                summary.messages
            )
        })?;
    if response.offsets.is_empty() {
        // A server that does not list offsets (e.g. acks=none) still took the batch.
        summary.requests += 1;
        summary.messages += count as u64;
    } else {
        summary.record(&response);
    }
    match unwritten_lines(&response, first_line) {
        None => Ok(()),
        Some(unwritten) => {
            eprint!("{}", summary.render(&args.topic));
            anyhow::bail!("{unwritten}")
        }
    }
}

/// Sends the records as one batch in the stored layout (`--binary`) and records it.
async fn flush_binary(
    api: &Api,
    args: &ProduceArgs,
    partition: u32,
    records: &mut Vec<Record>,
    summary: &mut ProduceSummary,
) -> anyhow::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let count = records.len() as u64;
    let batch = encode_batch(records, Compression::None, ProducerStamp::NONE)
        .context("encoding a batch")?;
    records.clear();
    let landing = api
        .produce_batch(&args.topic, partition, args.acks, batch)
        .await
        .with_context(|| {
            format!(
                "a batch of {count} message(s) failed after {} message(s) were produced",
                summary.messages
            )
        })?;
    summary.requests += 1;
    summary.messages += count;
    let entry = summary
        .partitions
        .entry(partition)
        .or_insert((0, None, None));
    entry.0 += count;
    if let Some(base) = landing.base_offset {
        entry.1 = Some(entry.1.map_or(base, |low: u64| low.min(base)));
        entry.2 = Some(
            entry
                .2
                .map_or(base + count - 1, |high: u64| high.max(base + count - 1)),
        );
    }
    Ok(())
}

/// Standard input a line at a time, the lines counted so errors can name them.
struct StdinLines {
    reader: BufReader<tokio::io::Stdin>,
    line: Vec<u8>,
    /// Lines read so far: the number (1-based) of the last one.
    count: u64,
    mode: ValueMode,
}

impl StdinLines {
    fn new(mode: ValueMode) -> StdinLines {
        StdinLines {
            reader: BufReader::new(tokio::io::stdin()),
            line: Vec::new(),
            count: 0,
            mode,
        }
    }

    /// The next line without its line ending, and its number; `None` at the end of input.
    async fn next(&mut self) -> anyhow::Result<Option<(&[u8], u64)>> {
        self.line.clear();
        let read = self
            .reader
            .read_until(b'\n', &mut self.line)
            .await
            .context("could not read stdin")?;
        if read == 0 {
            return Ok(None);
        }
        self.count += 1;
        Ok(Some((strip_newline(&self.line, self.mode), self.count)))
    }
}

/// Runs `herald produce --binary`: the lines in batches of the stored layout, to one partition.
async fn run_binary(api: Api, args: ProduceArgs, mode: ValueMode) -> anyhow::Result<()> {
    let partition = args
        .partition
        .context("--binary sends each batch to one partition: give it with --partition")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let mut lines = StdinLines::new(mode);
    let mut summary = ProduceSummary::default();
    let mut records = Vec::with_capacity(args.batch_size);
    while let Some((content, line_number)) = lines.next().await? {
        let delta = records.len() as u32;
        records.push(line_to_record(
            content,
            mode,
            args.key.as_deref(),
            delta,
            now,
            line_number,
        )?);
        if records.len() >= args.batch_size {
            flush_binary(&api, &args, partition, &mut records, &mut summary).await?;
        }
    }
    flush_binary(&api, &args, partition, &mut records, &mut summary).await?;
    eprint!("{}", summary.render(&args.topic));
    Ok(())
}

/// Runs `herald produce`.
pub async fn run(server: &str, args: ProduceArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.batch_size > 0, "--batch-size must be at least 1");
    let api = Api::new(server)?;
    let mode = if args.bytes {
        ValueMode::Bytes
    } else {
        ValueMode::JsonOrString
    };
    if args.binary {
        return run_binary(api, args, mode).await;
    }
    let encoder = match &args.schema {
        Some(subject) => Some(SchemaEncoder::fetch(&api, subject).await?),
        None => None,
    };
    let mut lines = StdinLines::new(mode);
    let mut summary = ProduceSummary::default();
    let mut batch = Vec::with_capacity(args.batch_size);
    while let Some((content, line_number)) = lines.next().await? {
        let message = match &encoder {
            Some(encoder) => encoder.line_to_message(
                content,
                args.key.as_deref(),
                args.partition,
                line_number,
            )?,
            None => line_to_message(
                content,
                mode,
                args.key.as_deref(),
                args.partition,
                line_number,
            )?,
        };
        batch.push(message);
        if batch.len() >= args.batch_size {
            let first_line = line_number + 1 - batch.len() as u64;
            flush(&api, &args, &mut batch, first_line, &mut summary).await?;
        }
    }
    let first_line = lines.count + 1 - batch.len() as u64;
    flush(&api, &args, &mut batch, first_line, &mut summary).await?;
    eprint!("{}", summary.render(&args.topic));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::client::ProducedOffset;
    use serde_json::json;

    #[test]
    fn binary_records_keep_json_lines_and_quote_the_rest() {
        let record =
            line_to_record(br#"{"a": 1}"#, ValueMode::JsonOrString, Some("k"), 3, 9, 1).unwrap();
        assert_eq!(
            record.value,
            RecordValue::Json(Bytes::from_static(br#"{"a": 1}"#))
        );
        assert_eq!(record.key, Some(RecordKey::Text("k".into())));
        assert_eq!((record.offset_delta, record.timestamp), (3, 9));
        let text = line_to_record(b"hello", ValueMode::JsonOrString, None, 0, 0, 1).unwrap();
        assert_eq!(
            text.value,
            RecordValue::Json(Bytes::from_static(b"\"hello\""))
        );
        let bytes = line_to_record(&[0, 255], ValueMode::Bytes, None, 0, 0, 1).unwrap();
        assert_eq!(
            bytes.value,
            RecordValue::Bytes(Bytes::from_static(&[0, 255]))
        );
        assert!(line_to_record(&[0xff], ValueMode::JsonOrString, None, 0, 0, 7).is_err());
    }

    #[test]
    fn json_lines_are_sent_as_json() {
        let message = line_to_message(br#"{"a":1}"#, ValueMode::JsonOrString, None, None, 1);
        assert_eq!(message.unwrap(), json!({"value": {"a": 1}}));
        let number = line_to_message(b"42", ValueMode::JsonOrString, None, None, 1).unwrap();
        assert_eq!(number, json!({"value": 42}));
    }

    #[test]
    fn other_lines_are_strings_with_key_and_partition() {
        let message = line_to_message(
            b"hello world",
            ValueMode::JsonOrString,
            Some("k"),
            Some(2),
            1,
        );
        assert_eq!(
            message.unwrap(),
            json!({"key": "k", "partition": 2, "value": "hello world"})
        );
        let empty = line_to_message(b"", ValueMode::JsonOrString, None, None, 1).unwrap();
        assert_eq!(empty, json!({"value": ""}));
    }

    #[test]
    fn bytes_mode_sends_base64() {
        let message = line_to_message(b"{\xff}", ValueMode::Bytes, None, None, 1).unwrap();
        assert_eq!(message, json!({"value_b64": "e/99"}));
    }

    #[test]
    fn invalid_utf8_in_text_mode_names_the_line() {
        let error = line_to_message(b"\xff", ValueMode::JsonOrString, None, None, 7).unwrap_err();
        assert!(error.to_string().contains("line 7"), "{error}");
    }

    #[test]
    fn newlines_are_stripped() {
        assert_eq!(strip_newline(b"a\r\n", ValueMode::JsonOrString), b"a");
        assert_eq!(strip_newline(b"a\r\n", ValueMode::Bytes), b"a\r");
        assert_eq!(strip_newline(b"a", ValueMode::Bytes), b"a");
    }

    fn written(partition: u32, offset: u64) -> ProducedOffset {
        ProducedOffset {
            partition,
            offset: Some(offset),
            error: None,
        }
    }

    fn failed(partition: u32) -> ProducedOffset {
        ProducedOffset {
            partition,
            offset: None,
            error: Some(
                json!({"type": "urn:herald:problem:overloaded", "title": "Overloaded",
                "status": 503, "detail": "partition full", "code": "overloaded"}),
            ),
        }
    }

    #[test]
    fn a_partly_written_batch_names_the_lines_to_retry() {
        let response = ProduceResponse {
            offsets: vec![written(0, 3), failed(1), written(0, 4), failed(1)],
        };
        let text = unwritten_lines(&response, 21).expect("partly written");
        assert!(
            text.starts_with("2 of 4 message(s) were not written"),
            "{text}"
        );
        assert!(
            text.contains("partition 1, line(s) 22, 24: overloaded: partition full"),
            "{text}"
        );
        let mut summary = ProduceSummary::default();
        summary.record(&response);
        assert_eq!(summary.messages, 2, "only the written messages count");
        assert!(!summary.partitions.contains_key(&1));
        let whole = ProduceResponse {
            offsets: vec![written(0, 3)],
        };
        assert_eq!(unwritten_lines(&whole, 1), None);
    }

    #[test]
    fn many_unwritten_lines_are_counted_not_listed() {
        let response = ProduceResponse {
            offsets: (0..25).map(|_| failed(2)).chain([written(0, 1)]).collect(),
        };
        let text = unwritten_lines(&response, 1).expect("partly written");
        assert!(
            text.contains("line(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more"),
            "{text}"
        );
    }

    #[test]
    fn summary_tracks_offset_ranges() {
        let mut summary = ProduceSummary::default();
        let offsets = vec![written(1, 5), written(0, 9), written(1, 6)];
        summary.record(&ProduceResponse { offsets });
        assert_eq!(summary.messages, 3);
        assert_eq!(summary.partitions[&1], (2, Some(5), Some(6)));
        let text = summary.render("t");
        assert!(
            text.contains("partition 1: 2 message(s), offsets 5..=6"),
            "{text}"
        );
    }
}
