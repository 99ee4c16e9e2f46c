//! One stream's follower of one partition: it reads on its own while behind, then takes the
//! partition's shared reads from the [`TailHub`](super::hub::TailHub); when it lags behind
//! what the hub keeps it detaches and reads on its own again. Offsets it hands over stay
//! contiguous through every switch: it always knows the next offset it owes the stream and
//! drops what it already handed over.

use std::time::Duration;

use tokio::sync::{broadcast, mpsc};

use super::hub::{Broadcast, ReadKind, TailSource, TAIL_POLL_WAIT};
use super::retry::{is_transient, Retry};
use crate::{BrokerError, BrokerResult, ConsumedMessage, FetchResult};

/// Where a follower hands batches: the stream's channel (bounded, so a stream that does not
/// read stops its follower, which then lags and detaches).
pub type BatchSender = mpsc::Sender<BrokerResult<(u32, Vec<ConsumedMessage>)>>;

/// Whether the follower goes on.
enum Flow {
    Reached,
    Stop,
}

/// Follows `partition` from `offset` for one stream until the stream goes away or the
/// partition fails for good (the error is handed to the stream).
pub async fn follow_partition<S: TailSource>(
    source: S,
    topic: String,
    partition: u32,
    mut offset: u64,
    batches: BatchSender,
) {
    loop {
        if let Flow::Stop = read_own(&source, &topic, partition, &mut offset, None, &batches).await
        {
            return;
        }
        let mut attachment = source.hub().attach(&source, &topic, partition, offset);
        if offset < attachment.position {
            // The shared reader is ahead: read the offsets between on our own while its reads
            // wait in the broadcast.
            let until = Some(attachment.position);
            if let Flow::Stop =
                read_own(&source, &topic, partition, &mut offset, until, &batches).await
            {
                return;
            }
        }
        loop {
            match attachment.receiver.recv().await {
                Ok(Broadcast::Read(read)) => {
                    if read.to <= offset {
                        continue;
                    }
                    if read.from > offset {
                        // Not contiguous with what the stream has; cannot happen while attached,
                        // but reading on our own is always right.
                        break;
                    }
                    let messages: Vec<ConsumedMessage> = read
                        .messages
                        .iter()
                        .filter(|message| message.offset >= offset)
                        .cloned()
                        .collect();
                    offset = read.to;
                    if !messages.is_empty()
                        && batches.send(Ok((partition, messages))).await.is_err()
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    metrics::counter!("herald_tail_lagged_total").increment(1);
                    break;
                }
                Ok(Broadcast::Stopped) | Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }
}

/// Reads the partition on our own from `offset`: up to `until` when given (waiting for the
/// log to get there), else until the end of the log. Hands every message over.
async fn read_own<S: TailSource>(
    source: &S,
    topic: &str,
    partition: u32,
    offset: &mut u64,
    until: Option<u64>,
    batches: &BatchSender,
) -> Flow {
    let mut retry = Retry::new("topic");
    loop {
        if until.is_some_and(|until| *offset >= until) {
            return Flow::Reached;
        }
        if batches.is_closed() {
            return Flow::Stop;
        }
        let max_wait = if until.is_some() {
            TAIL_POLL_WAIT
        } else {
            Duration::ZERO
        };
        match source
            .read(topic, partition, *offset, max_wait, ReadKind::Own)
            .await
        {
            Ok(FetchResult {
                messages,
                next_offset,
                high_watermark,
                ..
            }) => {
                retry.succeeded();
                *offset = (*offset).max(next_offset);
                if !messages.is_empty() && batches.send(Ok((partition, messages))).await.is_err() {
                    return Flow::Stop;
                }
                if until.is_none() && *offset >= high_watermark {
                    return Flow::Reached;
                }
            }
            Err(BrokerError::OffsetOutOfRange {
                log_start_offset, ..
            }) if *offset < log_start_offset => {
                // Retention removed messages the stream had not reached: they are gone, go on
                // with the oldest there is.
                *offset = log_start_offset;
            }
            Err(error)
                if is_transient(&error)
                    || matches!(error, BrokerError::OffsetOutOfRange { .. }) =>
            {
                // A leadership change, or past the end (a new leader still applying, a client
                // ahead of the log): ask again, from the same offset.
                retry.pause(&error).await;
            }
            Err(error) => {
                let _ = batches.send(Err(error)).await;
                return Flow::Stop;
            }
        }
    }
}
