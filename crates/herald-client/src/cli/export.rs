//! `herald topics export TOPIC`: writes a topic's stored batches, untouched, to an export file
//! (docs/export-import.md) or to stdout.
//!
//! Each partition is read from its log start to the high watermark it had when the export
//! started, so the export is a consistent cut per partition whatever is produced meanwhile.
//! Partitions are read a few at a time over HTTP; one blocking writer thread takes their
//! batches in turn and writes them as frames (order is kept per partition, frames of different
//! partitions interleave). A file is written under a temporary name and renamed once its end
//! marker is on disk, so `--output FILE` either holds a whole export or is not there; on
//! stdout, a cut stream lacks its end marker and an import refuses it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::mpsc;

use super::archive::{ArchiveWriter, ExportHeader, ExportTrailer, PartitionRange};
use super::batch_reads::ServedBatch;
use super::client::{Api, ProblemError, TopicInfo};
use super::export_output::Output;
use super::progress::Progress;
use super::retry::retrying;

/// How long a read is retried while the partition has no leader or its node restarts.
const READ_PATIENCE: Duration = Duration::from_secs(120);
/// How long a partition's reads may stay below the export's end before the export gives up
/// (a new leader's high watermark can lag the one the export started with for a moment).
const STALL_LIMIT: Duration = Duration::from_secs(60);
/// The long poll of a read that found nothing yet.
const STALL_WAIT_MS: u64 = 1_000;

/// `herald topics export TOPIC`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Topic to export.
    pub topic: String,
    /// File to write (default, or `-`: standard output). Written under a temporary name
    /// (FILE.partial) and renamed once complete.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Replace --output if it exists.
    #[arg(long)]
    pub force: bool,
    /// Partitions read at once.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// No progress bar and no summary on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Some of a partition's batches, in order, for the writer.
struct Chunk {
    partition: u32,
    batches: Vec<ServedBatch>,
}

/// Runs `herald topics export`.
pub async fn run(server: &str, args: ExportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let api = Api::new(server)?;
    let topic = api
        .get_topic(&args.topic)
        .await
        .with_context(|| format!("cannot export topic `{}`", args.topic))?;
    let header = export_header(&topic, super::archive_ids::new_export_id())?;
    let output = Output::create(args.output.as_deref(), args.force)?;
    let destination = output.describe();
    let progress = Progress::start("export", "offsets", header.offsets(), args.quiet);

    let parallel = args.parallel.max(1);
    let (chunks, mut arriving) = mpsc::channel::<Chunk>(parallel * 2);
    let writer_header = header.clone();
    let writer = tokio::task::spawn_blocking(move || {
        let mut writer = ArchiveWriter::new(output, &writer_header)?;
        while let Some(chunk) = arriving.blocking_recv() {
            for served in &chunk.batches {
                writer.write_frame(chunk.partition, served.base_offset, &served.batch)?;
            }
        }
        anyhow::Ok(writer)
    });

    let reads = futures::stream::iter(header.partitions.clone())
        .map(|range| read_partition(&api, &header.topic, range, chunks.clone(), &progress))
        .buffer_unordered(parallel)
        .try_collect::<Vec<()>>()
        .await;
    drop(chunks);
    let written = writer
        .await
        .map_err(|error| anyhow::anyhow!("the export file's writer failed: {error}"))?;
    progress.finish();
    // The writer's error first: a read that stopped because the writer did says less.
    let writer = written.with_context(|| format!("export of `{}` failed", header.topic))?;
    reads.with_context(|| format!("export of `{}` failed", header.topic))?;
    let (trailer, bytes) = tokio::task::spawn_blocking(move || {
        let (output, trailer) = writer.finish()?;
        let bytes = output.commit()?;
        anyhow::Ok((trailer, bytes))
    })
    .await
    .map_err(|error| anyhow::anyhow!("the export file's writer failed: {error}"))??;
    if !args.quiet {
        eprintln!(
            "{}",
            summary(&header, &trailer, &destination, bytes, started.elapsed())
        );
    }
    Ok(())
}

/// What the file says of the topic: its description now, and a new export id.
fn export_header(topic: &TopicInfo, export_id: String) -> anyhow::Result<ExportHeader> {
    let mut partitions: Vec<PartitionRange> = topic
        .partitions
        .iter()
        .map(|partition| PartitionRange {
            partition: partition.partition,
            log_start_offset: partition.log_start_offset,
            high_watermark: partition.high_watermark,
        })
        .collect();
    partitions.sort_by_key(|range| range.partition);
    let numbered = partitions
        .iter()
        .enumerate()
        .all(|(index, range)| range.partition as usize == index);
    anyhow::ensure!(
        numbered,
        "the server described topic `{}` with partitions that are not numbered 0, 1, 2, ...",
        topic.name
    );
    Ok(ExportHeader {
        topic: topic.name.clone(),
        partition_count: partitions.len() as u32,
        replication_factor: topic.replication_factor,
        config: topic.config.as_object().cloned().unwrap_or_default(),
        exported_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as i64),
        export_id,
        partitions,
    })
}

/// Reads one partition's batches from its log start up to `range.high_watermark`, handing them
/// to the writer in order.
async fn read_partition(
    api: &Api,
    topic: &str,
    range: PartitionRange,
    chunks: mpsc::Sender<Chunk>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let partition = range.partition;
    let end = range.high_watermark;
    let mut next = range.log_start_offset;
    let mut stalled_since: Option<Instant> = None;
    while next < end {
        let wait_ms = if stalled_since.is_some() {
            STALL_WAIT_MS
        } else {
            0
        };
        let read = retrying(READ_PATIENCE, || {
            api.read_batches(topic, partition, next, wait_ms)
        })
        .await;
        let read = match read {
            Ok(read) => read,
            Err(error) => match trimmed_to(&error) {
                // Retention removed the start of the range while the export ran: what is
                // gone cannot be exported; go on from the partition's start now.
                Some(start) if start > next => {
                    eprintln!(
                        "herald: partition {partition}: offsets {next} to {} were removed by retention during the export; exporting from {start}",
                        start.min(end) - 1
                    );
                    progress.add(start.min(end) - next);
                    next = start;
                    continue;
                }
                _ => {
                    return Err(error)
                        .with_context(|| format!("partition {partition} at offset {next}"))
                }
            },
        };
        let batches: Vec<ServedBatch> = read
            .batches
            .into_iter()
            .filter(|served| served.base_offset < end)
            .collect();
        if batches.is_empty() && read.next_offset <= next {
            let since = *stalled_since.get_or_insert_with(Instant::now);
            anyhow::ensure!(
                since.elapsed() < STALL_LIMIT,
                "partition {partition}: reads stay at offset {next}, below the high watermark {end} the export started with"
            );
            continue;
        }
        stalled_since = None;
        let reached = read.next_offset.clamp(next, end);
        progress.add(reached - next);
        next = read.next_offset;
        if !batches.is_empty() {
            chunks
                .send(Chunk { partition, batches })
                .await
                .map_err(|_| anyhow::anyhow!("the export file's writer stopped"))?;
        }
    }
    Ok(())
}

/// The partition's log start, when `error` is a read below it (`offset_out_of_range`).
fn trimmed_to(error: &anyhow::Error) -> Option<u64> {
    let problem = error.downcast_ref::<ProblemError>()?;
    if problem.code() != "offset_out_of_range" {
        return None;
    }
    problem.body.get("log_start_offset")?.as_u64()
}

/// The line printed once the export is complete.
fn summary(
    header: &ExportHeader,
    trailer: &ExportTrailer,
    destination: &str,
    bytes: u64,
    elapsed: Duration,
) -> String {
    let seconds = elapsed.as_secs_f64().max(1e-3);
    format!(
        "exported {} message(s) in {} batch(es) from {} partition(s) of `{}` to {destination} ({:.1} MB) in {seconds:.1} s: {:.0} messages/s",
        trailer.records(),
        trailer.batches(),
        header.partition_count,
        header.topic,
        bytes as f64 / 1e6,
        trailer.records() as f64 / seconds
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::client::PartitionInfo;
    use serde_json::json;

    #[test]
    fn the_header_describes_the_topic_in_partition_order() {
        let topic = TopicInfo {
            name: "orders".into(),
            partitions: vec![
                PartitionInfo {
                    partition: 1,
                    log_start_offset: 4,
                    high_watermark: 9,
                    ..Default::default()
                },
                PartitionInfo {
                    partition: 0,
                    high_watermark: 3,
                    ..Default::default()
                },
            ],
            replication_factor: 3,
            config: json!({"cleanup_policy": "compact"}),
        };
        let header = export_header(&topic, "00ff".into()).expect("a header");
        assert_eq!(header.partition_count, 2);
        assert_eq!(header.partitions[0].high_watermark, 3);
        assert_eq!(
            (header.partitions[1].log_start_offset, header.offsets()),
            (4, 8)
        );
        assert_eq!(header.config["cleanup_policy"], "compact");
        assert!(header.exported_at_ms > 0);

        let mut gap = topic.clone();
        gap.partitions[0].partition = 2;
        assert!(export_header(&gap, "00ff".into()).is_err());
    }

    #[test]
    fn a_read_below_the_log_start_says_where_it_starts_now() {
        let problem = ProblemError::from_parts(
            reqwest::Method::GET,
            "/v1/topics/t/partitions/0/messages".into(),
            reqwest::StatusCode::RANGE_NOT_SATISFIABLE,
            r#"{"code":"offset_out_of_range","log_start_offset":40,"high_watermark":90}"#,
        );
        assert_eq!(trimmed_to(&anyhow::Error::from(problem)), Some(40));
        assert_eq!(trimmed_to(&anyhow::anyhow!("other")), None);
    }
}
