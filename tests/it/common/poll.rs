//! Waiting on a condition with a deadline instead of sleeping a fixed time: a test asks again
//! every `every` until the answer is there, and fails with what it last saw.

use std::future::Future;
use std::time::{Duration, Instant};

/// Calls `probe` every `every` until it answers `Ok`, for at most `within`. On time out,
/// answers the last `Err`: a description of what was seen, for the caller's failure message
/// (which can add the nodes' logs).
pub async fn poll<T, Fut>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Fut,
) -> Result<T, String>
where
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        let seen = match probe().await {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            return Err(seen);
        }
        tokio::time::sleep(every).await;
    }
}
