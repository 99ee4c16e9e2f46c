//! Client secrets are checked and hashed (argon2id: tens of milliseconds of CPU and 19 MiB of
//! memory each) on a few threads of their own, a bounded number at a time.
//!
//! `POST /oauth/token` answers anyone: without a bound, every wrong secret took a thread of the
//! blocking pool and 19 MiB, and 200 at once took a node from 753 MiB to 4.5 GiB, which the
//! allocator then kept. Here `workers` threads each keep one argon2 memory and reuse it, so the
//! checks take `workers` × 19 MiB at most, for good; a check waits in a queue of `queue` places
//! for a thread, and past that a token request is refused at once ([`CheckError::Busy`]: 503
//! with `Retry-After`), having cost nothing. Hashing a new secret (client creation, rotation:
//! administrators only) waits for its place instead.

use std::sync::mpsc;
use std::sync::Arc;

use argon2::Block;
use parking_lot::Mutex;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::secrets::{hash_secret, verify_secret_in, SecretError};

/// Counter of token requests refused because every secret check was taken
/// (`herald_auth_secret_checks_busy_total`).
pub const SECRET_CHECKS_BUSY_TOTAL: &str = "herald_auth_secret_checks_busy_total";

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Every thread is busy and the queue is full: retry in a moment.
    #[error("every secret check is taken; retry in a moment")]
    Busy,
    #[error("the secret check threads have stopped")]
    Stopped,
    #[error(transparent)]
    Hash(#[from] SecretError),
}

enum Work {
    Verify { secret: String, hash: String },
    Hash { secret: String },
}

enum Done {
    Verified(bool),
    Hashed(Result<String, SecretError>),
}

struct Job {
    work: Work,
    answer: oneshot::Sender<Done>,
    /// The job's place (running or queued), given back when it is done.
    place: OwnedSemaphorePermit,
}

/// The secret check threads. Cheap to clone; the threads end when the last clone is dropped.
#[derive(Clone)]
pub struct SecretChecks {
    inner: Arc<Inner>,
}

struct Inner {
    /// One permit per thread and per queue place.
    places: Arc<Semaphore>,
    jobs: Mutex<mpsc::Sender<Job>>,
    workers: usize,
}

impl std::fmt::Debug for SecretChecks {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SecretChecks")
            .field("workers", &self.inner.workers)
            .finish_non_exhaustive()
    }
}

impl SecretChecks {
    /// Starts `workers` threads (at least 1) with `queue` places to wait in.
    pub fn start(workers: usize, queue: usize) -> std::io::Result<SecretChecks> {
        let workers = workers.max(1);
        let (jobs, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for index in 0..workers {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("secret-check-{index}"))
                .spawn(move || run(&receiver))?;
        }
        let places = (workers + queue).min(Semaphore::MAX_PERMITS);
        Ok(SecretChecks {
            inner: Arc::new(Inner {
                places: Arc::new(Semaphore::new(places)),
                jobs: Mutex::new(jobs),
                workers,
            }),
        })
    }

    /// Whether `secret` matches `hash`, or [`CheckError::Busy`] at once when every place is
    /// taken.
    pub async fn verify(&self, secret: &str, hash: &str) -> Result<bool, CheckError> {
        let Ok(place) = self.inner.places.clone().try_acquire_owned() else {
            metrics::counter!(SECRET_CHECKS_BUSY_TOTAL).increment(1);
            return Err(CheckError::Busy);
        };
        let work = Work::Verify {
            secret: secret.to_string(),
            hash: hash.to_string(),
        };
        match self.run(work, place).await? {
            Done::Verified(matches) => Ok(matches),
            Done::Hashed(_) => Err(CheckError::Stopped),
        }
    }

    /// The argon2id hash of a new secret, once a place is free.
    pub async fn hash(&self, secret: &str) -> Result<String, CheckError> {
        let place = self
            .inner
            .places
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| CheckError::Stopped)?;
        let work = Work::Hash {
            secret: secret.to_string(),
        };
        match self.run(work, place).await? {
            Done::Hashed(hashed) => Ok(hashed?),
            Done::Verified(_) => Err(CheckError::Stopped),
        }
    }

    async fn run(&self, work: Work, place: OwnedSemaphorePermit) -> Result<Done, CheckError> {
        let (answer, done) = oneshot::channel();
        let job = Job {
            work,
            answer,
            place,
        };
        self.inner
            .jobs
            .lock()
            .send(job)
            .map_err(|_| CheckError::Stopped)?;
        done.await.map_err(|_| CheckError::Stopped)
    }
}

/// A thread's loop: one argon2 memory, reused for every check it runs.
fn run(receiver: &Mutex<mpsc::Receiver<Job>>) {
    let mut memory: Vec<Block> = Vec::new();
    loop {
        let job = match receiver.lock().recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let Job {
            work,
            answer,
            place,
        } = job;
        let done = match &work {
            Work::Verify { secret, hash } => {
                Done::Verified(verify_secret_in(secret, hash, &mut memory))
            }
            Work::Hash { secret } => Done::Hashed(hash_secret(secret)),
        };
        // The place is free before the caller hears back, so its next check finds it.
        drop(place);
        // The caller may have gone away (its request was cancelled): nothing to tell.
        let _ = answer.send(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn secrets_are_hashed_and_checked_and_a_full_queue_refuses_at_once() {
        let checks = SecretChecks::start(1, 1).unwrap();
        let hash = checks.hash("right").await.unwrap();
        assert!(checks.verify("right", &hash).await.unwrap());
        assert!(!checks.verify("wrong", &hash).await.unwrap());

        // One running, one queued: the third is refused without waiting.
        let (first, second, third) = tokio::join!(
            checks.verify("a", &hash),
            checks.verify("b", &hash),
            async {
                tokio::task::yield_now().await;
                checks.verify("c", &hash).await
            }
        );
        assert!(matches!(first, Ok(false)));
        assert!(matches!(second, Ok(false)));
        assert!(matches!(third, Err(CheckError::Busy)), "{third:?}");
        // Places are given back.
        assert!(checks.verify("right", &hash).await.unwrap());
    }
}
