//! The writing half of a connection, the same for clients and servers: one task drains a queue
//! of frames into a buffered socket and flushes only when the queue is empty.
//!
//! Flushing when the queue runs dry, rather than after every frame, is what makes multiplexing
//! cheap: when hundreds of raft groups send heartbeats at once, they leave in a few large
//! writes instead of one syscall (and, with TCP_NODELAY, one packet) each, while a lone frame
//! still leaves at once because the queue is then empty.

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use super::frame::{write_frame, Frame};

/// Bodies at least this large bypass the buffer (see [`write_frame`]).
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// Frames queued for a connection's writer before senders wait. Clients bound their bytes in
/// flight and servers their concurrent requests, so this only smooths bursts.
pub(crate) const QUEUE_FRAMES: usize = 1024;

/// Writes queued frames until every sender is gone (then shuts the socket's write side down)
/// or a write fails.
pub(crate) async fn run<W: AsyncWrite + Unpin>(
    sink: W,
    mut queue: mpsc::Receiver<Frame>,
) -> std::io::Result<()> {
    let sent = metrics::counter!(super::SENT_BYTES_TOTAL);
    let mut sink = BufWriter::with_capacity(WRITE_BUFFER_BYTES, sink);
    while let Some(frame) = queue.recv().await {
        write_frame(&mut sink, &frame).await?;
        sent.increment(frame.encoded_len() as u64);
        while let Ok(frame) = queue.try_recv() {
            write_frame(&mut sink, &frame).await?;
            sent.increment(frame.encoded_len() as u64);
        }
        sink.flush().await?;
    }
    sink.shutdown().await
}
