//! The writing half of a socket: queued frames go out at the peer's pace, and a close frame
//! jumps the queue.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::SinkExt;
use tokio::sync::oneshot;

use super::connection::CLOSE_WRITE_DEADLINE;
use super::outbox::OutboxReceiver;

/// Sends a close frame, giving up after [`CLOSE_WRITE_DEADLINE`] (the peer may not read).
async fn send_close(sink: &mut futures::stream::SplitSink<WebSocket, Message>, frame: CloseFrame) {
    let _ =
        tokio::time::timeout(CLOSE_WRITE_DEADLINE, sink.send(Message::Close(Some(frame)))).await;
}

/// Ends the writing: with the server's close frame when it sent one (none when the
/// connection dropped its sender: the peer closed first).
async fn close_with(
    sink: &mut futures::stream::SplitSink<WebSocket, Message>,
    frame: Option<CloseFrame>,
) {
    if let Some(frame) = frame {
        send_close(sink, frame).await;
    }
}

/// Writes queued frames at the peer's pace; a close frame jumps the queue (what is queued
/// behind it is dropped: the socket is ending).
pub async fn write_frames(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut receiver: OutboxReceiver,
    mut close: oneshot::Receiver<CloseFrame>,
) {
    loop {
        tokio::select! {
            biased;
            frame = &mut close => return close_with(&mut sink, frame.ok()).await,
            message = receiver.next() => {
                let Some(message) = message else {
                    // Every sender is gone without a close frame: the peer closed first.
                    let _ = sink.close().await;
                    return;
                };
                tokio::select! {
                    biased;
                    frame = &mut close => return close_with(&mut sink, frame.ok()).await,
                    sent = sink.send(message.clone()) => {
                        receiver.written(&message);
                        if sent.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}
