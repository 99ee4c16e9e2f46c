//! `herald bench consume`: how fast a topic can be read back from the beginning.
//!
//! Partitions are spread over the workers (one each by default), and each worker reads its
//! partitions from `earliest`, following `next_offset`, until they reach their high watermark or
//! the run has read `--messages`. Answers are parsed with borrowed, mostly-skipped fields so the
//! reader's own cost stays small next to the server's.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::budget::Budget;
use super::produce::warm_up;
use super::stats::{Report, WorkerStats};
use crate::cli::client::{Api, OffsetSpec, ProblemError};

const BATCH_MEDIA_TYPE: &str = "application/vnd.herald.batch";

/// A partition is given up after this many failed reads in a row.
const MAX_CONSECUTIVE_ERRORS: u32 = 3;

/// Options of `herald bench consume`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchConsumeArgs {
    /// Topic to read.
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Concurrent workers (default: one per partition; never more than the partitions).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Messages per read request.
    #[arg(long, default_value_t = 1000)]
    pub max_messages: u32,
    /// Stop after reading this many messages (or at the end of the topic, if sooner).
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    /// Read stored batches (`Accept: application/vnd.herald.batch`, docs/binary-batches.md)
    /// instead of JSON; every batch's CRC is checked and its records walked.
    #[arg(long)]
    pub binary: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The parts of a read answer the benchmark needs; everything else is skipped.
#[derive(Debug, Deserialize)]
struct Fetched<'a> {
    #[serde(borrow)]
    messages: Vec<FetchedMessage<'a>>,
    next_offset: u64,
    #[serde(default)]
    high_watermark: u64,
}

#[derive(Debug, Deserialize)]
struct FetchedMessage<'a> {
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
    #[serde(borrow, default)]
    value_b64: Option<Cow<'a, str>>,
}

impl FetchedMessage<'_> {
    /// The value's size in bytes: the text of a JSON string (so it matches what `bench produce`
    /// counts for its string values), the JSON text of other values, the decoded size of base64.
    fn value_bytes(&self) -> u64 {
        if let Some(encoded) = &self.value_b64 {
            return base64_decoded_len(encoded);
        }
        match self.value.map(RawValue::get) {
            Some(text) if text.starts_with('"') && text.len() >= 2 => (text.len() - 2) as u64,
            Some(text) => text.len() as u64,
            None => 0,
        }
    }
}

/// The number of bytes a padded base64 string decodes to.
pub fn base64_decoded_len(encoded: &str) -> u64 {
    let trimmed = encoded.trim_end_matches('=');
    (trimmed.len() as u64 * 3) / 4
}

/// A read answer, counted: messages at or after the offset asked for, their value bytes, and
/// where the partition's next read starts and its high watermark.
struct Counted {
    count: u64,
    bytes: u64,
    next_offset: u64,
    high_watermark: u64,
}

fn count_json(body: &[u8]) -> Result<Counted, String> {
    let fetched: Fetched<'_> = serde_json::from_slice(body).map_err(|error| error.to_string())?;
    Ok(Counted {
        count: fetched.messages.len() as u64,
        bytes: fetched
            .messages
            .iter()
            .map(FetchedMessage::value_bytes)
            .sum(),
        next_offset: fetched.next_offset,
        high_watermark: fetched.high_watermark,
    })
}

/// Counts a binary read's frames (8-byte base offset, then a stored batch), checking each
/// batch as a consumer would; records before `from` (the first batch may start earlier) are
/// not counted. Reads are by whole batches, so a read may hold more than it asked for: every
/// record at or after `from` is counted, since the next read starts after them.
fn count_batches(
    body: &[u8],
    headers: &reqwest::header::HeaderMap,
    from: u64,
) -> Result<Counted, String> {
    use herald_domain::batch::{visit_records, BATCH_HEADER_LEN};
    let header = |name: &str| -> Result<u64, String> {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("no {name} header"))
    };
    let (mut count, mut bytes) = (0u64, 0u64);
    let mut rest = body;
    while !rest.is_empty() {
        let frame_header = rest
            .get(..8 + BATCH_HEADER_LEN)
            .ok_or("a frame cut short")?;
        let base_offset = u64::from_be_bytes(frame_header[..8].try_into().unwrap_or_default());
        let records_len =
            u32::from_be_bytes(frame_header[8 + 45..8 + 49].try_into().unwrap_or_default());
        let end = 8 + BATCH_HEADER_LEN + records_len as usize;
        let batch = rest.get(8..end).ok_or("a batch cut short")?;
        visit_records(batch, |record| {
            let offset = base_offset + u64::from(record.offset_delta);
            if offset >= from {
                count += 1;
                bytes += record.value.len() as u64;
            }
        })
        .map_err(|error| format!("batch at {base_offset}: {error}"))?;
        rest = &rest[end..];
    }
    Ok(Counted {
        count,
        bytes,
        next_offset: header("herald-next-offset")?,
        high_watermark: header("herald-high-watermark")?,
    })
}

/// One partition a worker reads.
struct PartitionCursor {
    partition: u32,
    offset: OffsetSpec,
    errors_in_a_row: u32,
    done: bool,
}

/// One worker: reads its partitions in turn until they are all at their end or the budget is
/// spent.
pub(super) async fn worker(
    api: Api,
    topic: Arc<str>,
    partitions: Vec<u32>,
    max_messages: u32,
    budget: Arc<Budget>,
    binary: bool,
) -> WorkerStats {
    let mut stats = WorkerStats::new();
    let mut cursors: Vec<PartitionCursor> = partitions
        .into_iter()
        .map(|partition| PartitionCursor {
            partition,
            offset: OffsetSpec::Earliest,
            errors_in_a_row: 0,
            done: false,
        })
        .collect();
    while cursors.iter().any(|c| !c.done) {
        for cursor in cursors.iter_mut().filter(|c| !c.done) {
            let want = budget.take(u64::from(max_messages));
            if want == 0 {
                return stats;
            }
            let url = api.fetch_url(&topic, cursor.partition, cursor.offset, want as u32, 0);
            let started = Instant::now();
            let mut request = api.http().get(url.clone());
            if binary {
                request = request.header(reqwest::header::ACCEPT, BATCH_MEDIA_TYPE);
            }
            let request = api.authorized(request).await;
            let outcome = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    match response.bytes().await {
                        Ok(body) if status.is_success() => Ok((body, headers, started.elapsed())),
                        Ok(body) => Err(ProblemError::from_parts(
                            Method::GET,
                            url.path().to_string(),
                            status,
                            &String::from_utf8_lossy(&body),
                        )
                        .to_string()),
                        Err(error) => {
                            Err(format!("GET {}: reading the answer: {error}", url.path()))
                        }
                    }
                }
                Err(error) => Err(format!("GET {}: {error}", url.path())),
            };
            let (body, headers, latency) = match outcome {
                Ok(answer) => answer,
                Err(message) => {
                    budget.give_back(want);
                    stats.record_error(message);
                    cursor.errors_in_a_row += 1;
                    cursor.done = cursor.errors_in_a_row >= MAX_CONSECUTIVE_ERRORS;
                    continue;
                }
            };
            let from = match cursor.offset {
                OffsetSpec::At(offset) => offset,
                _ => 0,
            };
            let counted = if binary {
                count_batches(&body, &headers, from)
            } else {
                count_json(&body)
            };
            let fetched = match counted {
                Ok(fetched) => fetched,
                Err(error) => {
                    budget.give_back(want);
                    stats.record_error(format!("GET {}: unexpected answer: {error}", url.path()));
                    cursor.errors_in_a_row += 1;
                    cursor.done = cursor.errors_in_a_row >= MAX_CONSECUTIVE_ERRORS;
                    continue;
                }
            };
            cursor.errors_in_a_row = 0;
            let (count, bytes) = (fetched.count, fetched.bytes);
            budget.give_back(want.saturating_sub(count));
            stats.record_success(count, bytes, latency);
            let moved = cursor.offset != OffsetSpec::At(fetched.next_offset);
            cursor.offset = OffsetSpec::At(fetched.next_offset);
            cursor.done = fetched.next_offset >= fetched.high_watermark || (count == 0 && !moved);
        }
    }
    stats
}

/// Deals partitions to `workers` workers round-robin.
pub fn assign(partitions: &[u32], workers: usize) -> Vec<Vec<u32>> {
    let workers = workers.clamp(1, partitions.len().max(1));
    let mut assignment = vec![Vec::new(); workers];
    for (i, partition) in partitions.iter().enumerate() {
        assignment[i % workers].push(*partition);
    }
    assignment
}

/// Runs `herald bench consume`.
pub async fn run(server: &str, args: BenchConsumeArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.max_messages > 0, "--max-messages must be at least 1");
    let admin = Api::new(server)?;
    let topic = admin.get_topic(&args.topic).await?;
    let partitions: Vec<u32> = topic.partitions.iter().map(|p| p.partition).collect();
    anyhow::ensure!(
        !partitions.is_empty(),
        "topic `{}` has no partitions",
        args.topic
    );
    let assignment = assign(&partitions, args.connections.unwrap_or(partitions.len()));
    let mut apis = Vec::with_capacity(assignment.len());
    for _ in 0..assignment.len() {
        apis.push(Api::new(server)?);
    }
    futures::future::join_all(apis.iter().map(warm_up)).await;
    let params = json!({
        "topic": args.topic,
        "partitions": partitions.len(),
        "connections": assignment.len(),
        "max_messages": args.max_messages,
        "mode": if args.binary { "binary" } else { "json" },
    });

    let budget = Arc::new(Budget::new(args.messages));
    let topic_name: Arc<str> = Arc::from(args.topic.as_str());
    let started = Instant::now();
    let handles: Vec<_> = apis
        .into_iter()
        .zip(assignment)
        .map(|(api, mine)| {
            tokio::spawn(worker(
                api,
                Arc::clone(&topic_name),
                mine,
                args.max_messages,
                Arc::clone(&budget),
                args.binary,
            ))
        })
        .collect();
    let mut total = WorkerStats::new();
    for handle in handles {
        let stats = handle
            .await
            .map_err(|error| anyhow::anyhow!("a bench worker failed: {error}"))?;
        total.merge(&stats)?;
    }
    Ok(Report::new("consume", params, &total, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_dealt_round_robin() {
        assert_eq!(assign(&[0, 1, 2, 3, 4], 2), vec![vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(assign(&[0, 1], 8), vec![vec![0], vec![1]]);
        assert_eq!(assign(&[0, 1], 0), vec![vec![0, 1]]);
    }

    #[test]
    fn value_sizes_are_counted() {
        let body = br#"{"messages":[{"offset":0,"value":"abcd","headers":{"h":"x"}},
            {"value":{"a":1}},{"value_b64":"aGVsbG8="},{"key":"tombstone"}],
            "next_offset":4,"high_watermark":9,"log_start_offset":0}"#;
        let fetched: Fetched<'_> = serde_json::from_slice(body).unwrap();
        let sizes: Vec<u64> = fetched
            .messages
            .iter()
            .map(FetchedMessage::value_bytes)
            .collect();
        assert_eq!(sizes, vec![4, 7, 5, 0]);
        assert_eq!((fetched.next_offset, fetched.high_watermark), (4, 9));
    }

    #[test]
    fn binary_reads_count_every_record_from_the_offset_on() {
        use herald_domain::batch::{encode_batch, ProducerStamp};
        use herald_domain::{Compression, Record, RecordValue};
        let batch = |count: u32| {
            let records: Vec<Record> = (0..count)
                .map(|delta| Record {
                    offset_delta: delta,
                    timestamp: 0,
                    key: None,
                    value: RecordValue::Bytes(bytes::Bytes::from_static(b"abc")),
                    headers: Vec::new(),
                })
                .collect();
            encode_batch(&records, Compression::None, ProducerStamp::NONE).unwrap()
        };
        let mut body = Vec::new();
        for (base, count) in [(10u64, 4u32), (14, 3)] {
            body.extend_from_slice(&base.to_be_bytes());
            body.extend_from_slice(&batch(count));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("herald-next-offset", 17.into());
        headers.insert("herald-high-watermark", 20.into());
        let counted = count_batches(&body, &headers, 12).unwrap();
        assert_eq!((counted.count, counted.bytes), (5, 15));
        assert_eq!((counted.next_offset, counted.high_watermark), (17, 20));
        assert!(count_batches(&body[..body.len() - 1], &headers, 0).is_err());
    }

    #[test]
    fn base64_lengths() {
        assert_eq!(base64_decoded_len(""), 0);
        assert_eq!(base64_decoded_len("aGk="), 2);
        assert_eq!(base64_decoded_len("aGVsbG8="), 5);
        assert_eq!(base64_decoded_len("aGVsbG8h"), 6);
    }
}
