//! Group commit. Writers put their data in the WAL without fsync and enqueue a callback here;
//! one thread fsyncs the WAL once for everything queued so far, then completes every callback.
//! One fsync thus serves as many writes as arrived while the previous one ran, which is what
//! lets a node take far more than the ~6,000 synced writes/s a disk allows one writer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::thread;

use rocksdb::DB;

use super::StorageError;

/// Completed with the outcome of the fsync covering the caller's earlier writes.
pub type SyncCallback = Box<dyn FnOnce(Result<(), std::io::Error>) + Send>;

/// The syncer thread holds the database only weakly and is joined when the last `Store`
/// goes, so the database is always closed by then: a RocksDB still closing on another thread
/// while the process exits can crash in its static destructors.
pub(super) struct Syncer {
    sender: Option<mpsc::Sender<SyncCallback>>,
    thread: Option<thread::JoinHandle<()>>,
    /// How many fsyncs ran: compared with the writes they served, the group-commit factor.
    fsyncs: Arc<AtomicU64>,
}

impl Syncer {
    pub(super) fn start(db: &Arc<DB>) -> Result<Syncer, StorageError> {
        let (sender, receiver) = mpsc::channel::<SyncCallback>();
        let db = Arc::downgrade(db);
        let fsyncs = Arc::new(AtomicU64::new(0));
        let counter = fsyncs.clone();
        let thread = thread::Builder::new()
            .name("herald-wal-sync".into())
            .spawn(move || run(db, receiver, counter))?;
        Ok(Syncer {
            sender: Some(sender),
            thread: Some(thread),
            fsyncs,
        })
    }

    pub(super) fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    pub(super) fn enqueue(&self, callback: SyncCallback) {
        let refused = match &self.sender {
            Some(sender) => sender
                .send(callback)
                .err()
                .map(|mpsc::SendError(callback)| callback),
            None => Some(callback),
        };
        if let Some(callback) = refused {
            callback(Err(std::io::Error::other(
                StorageError::SyncerStopped.to_string(),
            )));
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.sender.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the WAL sync thread panicked");
            }
        }
    }
}

fn run(db: Weak<DB>, receiver: mpsc::Receiver<SyncCallback>, fsyncs: Arc<AtomicU64>) {
    let mut pending = Vec::new();
    // Ends when every sender (every Store clone) is gone.
    while let Ok(first) = receiver.recv() {
        pending.push(first);
        pending.extend(receiver.try_iter());
        let started = std::time::Instant::now();
        let outcome = match db.upgrade() {
            Some(db) => {
                fsyncs.fetch_add(1, Ordering::Relaxed);
                db.flush_wal(true).map_err(|error| error.to_string())
            }
            None => Err(StorageError::SyncerStopped.to_string()),
        };
        metrics::histogram!("herald_storage_fsync_seconds").record(started.elapsed().as_secs_f64());
        metrics::histogram!("herald_storage_fsync_batch_writes").record(pending.len() as f64);
        match outcome {
            Ok(()) => pending.drain(..).for_each(|callback| callback(Ok(()))),
            Err(message) => {
                tracing::error!(error = %message, "WAL fsync failed");
                pending
                    .drain(..)
                    .for_each(|callback| callback(Err(std::io::Error::other(message.clone()))));
            }
        }
    }
}
