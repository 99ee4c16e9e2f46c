//! Group commit. Writers put their data in the WAL without fsync and enqueue a callback here;
//! one thread fsyncs the WAL once for everything queued so far, then completes every callback.
//! One fsync thus serves as many writes as arrived while the previous one ran, which is what
//! lets a node take far more than the ~6,000 synced writes/s a disk allows one writer.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use rocksdb::DB;

use super::StorageError;

/// Completed with the outcome of the fsync covering the caller's earlier writes.
pub type SyncCallback = Box<dyn FnOnce(Result<(), std::io::Error>) + Send>;

pub(super) struct Syncer {
    sender: mpsc::Sender<SyncCallback>,
}

impl Syncer {
    pub(super) fn start(db: Arc<DB>) -> Result<Syncer, StorageError> {
        let (sender, receiver) = mpsc::channel::<SyncCallback>();
        thread::Builder::new().name("herald-wal-sync".into()).spawn(move || run(db, receiver))?;
        Ok(Syncer { sender })
    }

    pub(super) fn enqueue(&self, callback: SyncCallback) {
        if let Err(mpsc::SendError(callback)) = self.sender.send(callback) {
            callback(Err(std::io::Error::other(StorageError::SyncerStopped.to_string())));
        }
    }
}

fn run(db: Arc<DB>, receiver: mpsc::Receiver<SyncCallback>) {
    let mut pending = Vec::new();
    // Ends when every sender (every Store clone) is gone.
    while let Ok(first) = receiver.recv() {
        pending.push(first);
        pending.extend(receiver.try_iter());
        let started = std::time::Instant::now();
        let outcome = db.flush_wal(true);
        metrics::histogram!("herald_storage_fsync_seconds").record(started.elapsed().as_secs_f64());
        metrics::histogram!("herald_storage_fsync_batch_writes").record(pending.len() as f64);
        match outcome {
            Ok(()) => pending.drain(..).for_each(|callback| callback(Ok(()))),
            Err(error) => {
                tracing::error!(%error, "WAL fsync failed");
                let message = error.to_string();
                pending.drain(..).for_each(|callback| callback(Err(std::io::Error::other(message.clone()))));
            }
        }
    }
}
