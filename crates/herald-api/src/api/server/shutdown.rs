//! The node's stop signal, as handlers of long-lived streams (server-sent events, WebSocket)
//! see it. Graceful shutdown waits for requests in flight: a stream that never ends would hold
//! the node until the grace period runs out and then be cut mid-frame. Streams watch this and
//! end cleanly (a final event, a close frame) so clients reconnect to another node at once.

use tokio::sync::watch;

/// Becomes `true` once when the node starts shutting down. Cheap to clone; extract it with
/// `State<Shutdown>`.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    pub fn new(receiver: watch::Receiver<bool>) -> Self {
        Shutdown(receiver)
    }

    pub fn is_stopping(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the node is stopping (at once if it already is).
    pub async fn stopping(&self) {
        let mut receiver = self.0.clone();
        if receiver.wait_for(|stopping| *stopping).await.is_err() {
            // The sender is gone: the node is going away too.
        }
    }
}
