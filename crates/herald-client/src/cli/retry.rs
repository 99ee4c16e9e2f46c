//! Retrying a request that is safe to send again (a read; an idempotent producer's batch) while
//! the cluster is briefly unable to take it: a leader election, a node restarting, a full
//! queue. Errors that say the request itself is wrong are not retried.

use std::future::Future;
use std::time::{Duration, Instant};

use super::client::ProblemError;

/// The first wait after a failed attempt; each next wait doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Whether `error` may pass by itself: the server could not be reached or answered in time, or
/// said to come back (`no_leader`, `overloaded`, `unavailable`: 503; `timeout`: 504; a full
/// disk: 507; 429; a proxy's 502).
pub fn is_transient(error: &anyhow::Error) -> bool {
    if let Some(problem) = error.downcast_ref::<ProblemError>() {
        return matches!(problem.status.as_u16(), 429 | 502 | 503 | 504 | 507);
    }
    error
        .chain()
        .any(|cause| cause.downcast_ref::<reqwest::Error>().is_some())
}

/// Runs `attempt` until it succeeds, fails with an error that is not transient, or `patience`
/// has passed since the first attempt (the last error is answered then).
pub async fn retrying<T, F, Fut>(patience: Duration, mut attempt: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let give_up_at = Instant::now() + patience;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if is_transient(&error) && Instant::now() + backoff < give_up_at => {
                tracing::debug!(error = %format!("{error:#}"), "retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::{Method, StatusCode};
    use std::sync::atomic::{AtomicU32, Ordering};

    fn problem(status: u16) -> anyhow::Error {
        ProblemError::from_parts(
            Method::POST,
            "/v1/topics/t/partitions/0/messages".into(),
            StatusCode::from_u16(status).expect("a status"),
            "{}",
        )
        .into()
    }

    #[test]
    fn only_errors_that_pass_by_themselves_are_transient() {
        for status in [429, 502, 503, 504, 507] {
            assert!(is_transient(&problem(status)), "{status}");
        }
        for status in [400, 401, 403, 404, 409, 413, 500] {
            assert!(!is_transient(&problem(status)), "{status}");
        }
        assert!(!is_transient(&anyhow::anyhow!("a bad file")));
        let wrapped = problem(503).context("partition 2");
        assert!(is_transient(&wrapped));
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_success_and_others_are_not() {
        let attempts = AtomicU32::new(0);
        let answer = retrying(Duration::from_secs(10), || async {
            match attempts.fetch_add(1, Ordering::Relaxed) {
                0 | 1 => Err(problem(503)),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(answer.expect("succeeds"), 7);
        assert_eq!(attempts.load(Ordering::Relaxed), 3);

        let attempts = AtomicU32::new(0);
        let refused: anyhow::Result<()> = retrying(Duration::from_secs(10), || async {
            attempts.fetch_add(1, Ordering::Relaxed);
            Err(problem(409))
        })
        .await;
        assert!(refused.is_err());
        assert_eq!(attempts.load(Ordering::Relaxed), 1);

        let gave_up: anyhow::Result<()> =
            retrying(Duration::from_millis(50), || async { Err(problem(503)) }).await;
        assert!(gave_up.is_err());
    }
}
