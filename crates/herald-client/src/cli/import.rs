//! `herald topics import --input FILE [--topic NAME]`: writes an export file's batches into a
//! topic of any cluster, each source partition into the partition of the same number, in order,
//! idempotently (docs/export-import.md).
//!
//! A file is read twice: once to check it whole (every frame, every batch's CRC, the trailer's
//! counts and the file's CRC) before anything is written, so a truncated or damaged file writes
//! nothing; then to write it. Standard input (`--input -`) can be read only once: it is checked
//! as it is written, and a stream that turns out cut short stops the import with an error after
//! the batches before the cut (the same import run again with the whole file writes the rest).
//!
//! The reading runs on a blocking thread that hands each frame to its partition's writer
//! (`import_partition`) through a small channel; partitions write concurrently, a bounded
//! number of requests at a time, each partition one batch after the other.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{mpsc, Semaphore};

use super::archive::{ArchiveReader, ExportHeader, ExportTrailer, Frame};
use super::archive_ids::import_producer_name;
use super::client::Api;
use super::import_partition::{PartitionWriter, Written};
use super::import_target::{ensure_topic, TopicState};
use super::progress::Progress;

/// The reader's buffer: frames are read a batch at a time.
const READ_BUFFER: usize = 1 << 20;
/// Frames waiting for each partition's writer.
const QUEUED_FRAMES: usize = 8;

/// `herald topics import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The export file to read (`-`: standard input, checked as it is read rather than before).
    #[arg(long, short = 'i')]
    pub input: PathBuf,
    /// Topic to write into (default: the exported topic's name). Created like the exported one
    /// when missing; an existing one needs at least the export's partitions.
    #[arg(long)]
    pub topic: Option<String>,
    /// Replication factor of a topic the import creates (default: the cluster's).
    #[arg(long)]
    pub replication_factor: Option<u16>,
    /// Produce requests in flight at once (one per partition at most).
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// How long a batch is retried while the cluster cannot take it (no leader, overloaded, a
    /// node restarting) before the import stops.
    #[arg(long, default_value_t = 120)]
    pub retry_seconds: u64,
    /// No progress bar and no summary on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs `herald topics import`.
pub async fn run(server: &str, args: ImportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let api = Api::new(server)?;
    let from_stdin = args.input.as_os_str() == "-";
    let shown = if from_stdin {
        "standard input".to_string()
    } else {
        args.input.display().to_string()
    };
    // A file is checked whole before anything is written.
    let checked = if from_stdin {
        None
    } else {
        let path = args.input.clone();
        let trailer = tokio::task::spawn_blocking(move || check_file(&path))
            .await
            .map_err(|error| anyhow::anyhow!("reading the file failed: {error}"))?
            .with_context(|| format!("{shown}: nothing was imported"))?;
        Some(trailer)
    };
    let input = args.input.clone();
    let reader = tokio::task::spawn_blocking(move || open(&input))
        .await
        .map_err(|error| anyhow::anyhow!("reading the file failed: {error}"))?
        .with_context(|| format!("{shown}: nothing was imported"))?;
    let header = reader.header().clone();
    let topic_name = args.topic.clone().unwrap_or_else(|| header.topic.clone());

    let (_, state) = ensure_topic(&api, &topic_name, &header, args.replication_factor).await?;
    if state == TopicState::Created && !args.quiet {
        eprintln!(
            "created topic `{topic_name}` with {} partition(s) and the exported topic's configuration",
            header.partition_count
        );
    }
    let producer_name = import_producer_name(&header.export_id, &topic_name);
    let producer = api
        .register_producer(&producer_name)
        .await
        .with_context(|| format!("cannot register the import's producer `{producer_name}`"))?;

    let total = checked
        .as_ref()
        .map_or_else(|| header.offsets(), ExportTrailer::records);
    let progress = Progress::start("import", "messages", total, args.quiet);
    let permits = Arc::new(Semaphore::new(args.parallel.max(1)));
    let topic: Arc<str> = Arc::from(topic_name.as_str());
    let mut queues = Vec::with_capacity(header.partition_count as usize);
    let mut writers = Vec::with_capacity(header.partition_count as usize);
    for partition in 0..header.partition_count {
        let (queue, frames) = mpsc::channel::<Frame>(QUEUED_FRAMES);
        let writer = PartitionWriter {
            api: api.clone(),
            topic: Arc::clone(&topic),
            partition,
            producer,
            permits: Arc::clone(&permits),
            patience: Duration::from_secs(args.retry_seconds),
            progress: progress.clone(),
        };
        queues.push(queue);
        writers.push(tokio::spawn(writer.run(frames)));
    }
    let pump = tokio::task::spawn_blocking(move || pump(reader, queues));

    let mut total_written = Written::default();
    let mut failure: Option<anyhow::Error> = None;
    for writer in writers {
        match writer.await {
            Ok(Ok(written)) => add(&mut total_written, written),
            Ok(Err(error)) => {
                failure.get_or_insert(error);
            }
            Err(error) => {
                failure.get_or_insert(anyhow::anyhow!("a partition's writer failed: {error}"));
            }
        }
    }
    let pumped = pump
        .await
        .map_err(|error| anyhow::anyhow!("reading the file failed: {error}"));
    progress.finish();
    let failure = match pumped {
        Err(error) | Ok(Err(error)) if failure.is_none() => Some(error),
        _ => failure,
    };
    if let Some(error) = failure {
        return Err(error.context(format!(
            "the import of {shown} into `{topic_name}` stopped after writing {} message(s) in {} batch(es); importing the same export file into `{topic_name}` again writes only what is missing",
            total_written.records, total_written.batches
        )));
    }
    if !args.quiet {
        eprintln!(
            "{}",
            summary(&header, &topic_name, &total_written, started.elapsed())
        );
    }
    Ok(())
}

/// Reads `path` whole, as the import will, without writing: answers its trailer.
fn check_file(path: &Path) -> anyhow::Result<ExportTrailer> {
    let mut reader = open(path)?;
    while reader.next_frame()?.is_some() {}
    reader
        .trailer()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("the file has no trailer"))
}

/// The reader of `path` (`-`: stdin), its header read.
fn open(path: &Path) -> anyhow::Result<ArchiveReader<BufReader<Box<dyn Read + Send>>>> {
    let input: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(File::open(path).context("cannot open the file")?)
    };
    Ok(ArchiveReader::open(BufReader::with_capacity(
        READ_BUFFER,
        input,
    ))?)
}

/// Hands every frame to its partition's writer, in file order; stops early when a writer
/// stopped (its error says why). The end of the file checks the trailer.
fn pump<R: Read>(
    mut reader: ArchiveReader<R>,
    queues: Vec<mpsc::Sender<Frame>>,
) -> anyhow::Result<()> {
    while let Some(frame) = reader.next_frame()? {
        let Some(queue) = queues.get(frame.partition as usize) else {
            anyhow::bail!(
                "a frame of partition {} beyond the header's",
                frame.partition
            );
        };
        if queue.blocking_send(frame).is_err() {
            // That partition's writer stopped: its error is the import's.
            return Ok(());
        }
    }
    Ok(())
}

fn add(total: &mut Written, written: Written) {
    total.batches += written.batches;
    total.records += written.records;
    total.duplicate_batches += written.duplicate_batches;
    total.duplicate_records += written.duplicate_records;
}

/// The line printed once the import is complete.
fn summary(header: &ExportHeader, topic: &str, written: &Written, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64().max(1e-3);
    let mut line = format!(
        "imported {} message(s) in {} batch(es) from {} partition(s) into `{topic}` in {seconds:.1} s: {:.0} messages/s",
        written.records,
        written.batches,
        header.partition_count,
        written.records as f64 / seconds
    );
    if written.duplicate_batches > 0 {
        line.push_str(&format!(
            "; {} message(s) in {} batch(es) were there from an earlier run and not written again",
            written.duplicate_records, written.duplicate_batches
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_tells_written_from_already_there() {
        let header = ExportHeader {
            topic: "orders".into(),
            partition_count: 2,
            replication_factor: 1,
            config: Default::default(),
            exported_at_ms: 0,
            export_id: "ab".into(),
            partitions: Vec::new(),
        };
        let fresh = Written {
            batches: 4,
            records: 400,
            ..Written::default()
        };
        let line = summary(&header, "copy", &fresh, Duration::from_secs(2));
        assert_eq!(
            line,
            "imported 400 message(s) in 4 batch(es) from 2 partition(s) into `copy` in 2.0 s: 200 messages/s"
        );
        let again = Written {
            duplicate_batches: 4,
            duplicate_records: 400,
            ..Written::default()
        };
        let line = summary(&header, "copy", &again, Duration::from_secs(1));
        assert!(
            line.starts_with("imported 0 message(s) in 0 batch(es)"),
            "{line}"
        );
        assert!(line.ends_with("400 message(s) in 4 batch(es) were there from an earlier run and not written again"), "{line}");
    }
}
