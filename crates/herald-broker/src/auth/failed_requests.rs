//! Rate limits on failed token requests, per client id and per client address: past a
//! client id's or an address's budget of failures per minute, the token endpoint answers 429
//! before checking any secret, so neither a guesser nor a flood of wrong secrets costs a hash.
//!
//! A budget is a token bucket of `per_minute` failures refilled evenly over a minute; only
//! failures take from it, and a request is refused while a bucket it is charged to is empty.
//! A client id's budget is shared by everyone who names it, so someone who knows a client id
//! can hold that client's token requests back for up to a minute at a time: services should
//! keep using their current token meanwhile (tokens last an hour by default).
//!
//! Each limiter remembers at most [`MAX_TRACKED`] keys: refilled buckets are forgotten first,
//! then the least recently charged, so many addresses or invented client ids cannot grow it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The most keys one limiter remembers.
pub const MAX_TRACKED: usize = 10_000;

/// Counter of token requests refused for too many failures, by `limit` (`client`, `address`).
pub const FAILED_TOKEN_REQUESTS_LIMITED_TOTAL: &str = "herald_auth_token_requests_limited_total";

/// Failed token requests allowed per minute (0: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureBudgets {
    pub per_client_per_min: u32,
    pub per_address_per_min: u32,
}

/// The limits of a node's token endpoint.
#[derive(Debug)]
pub struct FailedRequests {
    per_client: Limiter,
    per_address: Limiter,
}

impl FailedRequests {
    pub fn new(budgets: FailureBudgets) -> FailedRequests {
        FailedRequests {
            per_client: Limiter::new(budgets.per_client_per_min),
            per_address: Limiter::new(budgets.per_address_per_min),
        }
    }

    /// Whether a token request of `client_id` from `address` may be tried; the error is how
    /// long to wait.
    pub fn admit(&self, client_id: &str, address: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        if let Err(wait) = self.per_client.admit(client_id, now) {
            metrics::counter!(FAILED_TOKEN_REQUESTS_LIMITED_TOTAL, "limit" => "client")
                .increment(1);
            return Err(wait);
        }
        if let Some(address) = address {
            if let Err(wait) = self.per_address.admit(&address.to_string(), now) {
                metrics::counter!(FAILED_TOKEN_REQUESTS_LIMITED_TOTAL, "limit" => "address")
                    .increment(1);
                return Err(wait);
            }
        }
        Ok(())
    }

    /// Charges a failed request to its client id and address.
    pub fn failed(&self, client_id: &str, address: Option<IpAddr>) {
        let now = Instant::now();
        self.per_client.charge(client_id, now);
        if let Some(address) = address {
            self.per_address.charge(&address.to_string(), now);
        }
    }
}

#[derive(Debug)]
struct Limiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Failures still allowed (fractional: refilled continuously).
    left: f64,
    at: Instant,
}

impl Limiter {
    fn new(per_minute: u32) -> Limiter {
        Limiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn capacity(&self) -> f64 {
        f64::from(self.per_minute)
    }

    /// Failures refilled per second.
    fn rate(&self) -> f64 {
        self.capacity() / 60.0
    }

    fn refilled(&self, bucket: Bucket, now: Instant) -> Bucket {
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        Bucket {
            left: (bucket.left + elapsed * self.rate()).min(self.capacity()),
            at: now,
        }
    }

    fn admit(&self, key: &str, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let buckets = self.buckets.lock();
        let Some(bucket) = buckets.get(key) else {
            return Ok(());
        };
        let bucket = self.refilled(*bucket, now);
        if bucket.left >= 1.0 {
            return Ok(());
        }
        let wait = ((1.0 - bucket.left) / self.rate()).ceil().max(1.0);
        Err(Duration::from_secs(wait as u64))
    }

    fn charge(&self, key: &str, now: Instant) {
        if self.per_minute == 0 {
            return;
        }
        let mut buckets = self.buckets.lock();
        if !buckets.contains_key(key) && buckets.len() >= MAX_TRACKED {
            self.make_room(&mut buckets, now);
        }
        let full = Bucket {
            left: self.capacity(),
            at: now,
        };
        let bucket = buckets.entry(key.to_string()).or_insert(full);
        let mut refilled = self.refilled(*bucket, now);
        refilled.left = (refilled.left - 1.0).max(0.0);
        *bucket = refilled;
    }

    /// Forgets refilled buckets, or else the one charged longest ago.
    fn make_room(&self, buckets: &mut HashMap<String, Bucket>, now: Instant) {
        buckets.retain(|_, bucket| self.refilled(*bucket, now).left < self.capacity());
        if buckets.len() >= MAX_TRACKED {
            let oldest = buckets
                .iter()
                .min_by_key(|(_, bucket)| bucket.at)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                buckets.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_refused_once_its_budget_is_spent_and_refills_over_a_minute() {
        let limiter = Limiter::new(3);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.admit("a", start), Ok(()));
            limiter.charge("a", start);
        }
        // 3 per minute: one more in 20 s.
        assert_eq!(limiter.admit("a", start), Err(Duration::from_secs(20)));
        assert_eq!(limiter.admit("b", start), Ok(()));
        assert!(limiter.admit("a", start + Duration::from_secs(10)).is_err());
        assert_eq!(limiter.admit("a", start + Duration::from_secs(21)), Ok(()));
    }

    #[test]
    fn zero_is_unlimited_and_the_tracked_keys_are_bounded() {
        let unlimited = Limiter::new(0);
        let now = Instant::now();
        for _ in 0..100 {
            unlimited.charge("a", now);
        }
        assert_eq!(unlimited.admit("a", now), Ok(()));
        assert!(unlimited.buckets.lock().is_empty());

        let limiter = Limiter::new(1);
        for index in 0..MAX_TRACKED + 10 {
            limiter.charge(
                &format!("k{index}"),
                now + Duration::from_micros(index as u64),
            );
        }
        assert_eq!(limiter.buckets.lock().len(), MAX_TRACKED);
        // The newest are kept.
        assert!(limiter
            .admit(
                &format!("k{}", MAX_TRACKED + 9),
                now + Duration::from_secs(1)
            )
            .is_err());
    }

    #[test]
    fn a_request_is_charged_to_its_client_and_its_address() {
        let limits = FailedRequests::new(FailureBudgets {
            per_client_per_min: 2,
            per_address_per_min: 3,
        });
        let address: IpAddr = "10.0.0.1".parse().unwrap();
        limits.failed("billing", Some(address));
        limits.failed("billing", Some(address));
        assert!(limits.admit("billing", Some(address)).is_err());
        assert!(limits.admit("mailer", Some(address)).is_ok());
        limits.failed("mailer", Some(address));
        assert!(limits.admit("mailer", Some(address)).is_err());
        assert!(limits
            .admit("mailer", Some("10.0.0.2".parse().unwrap()))
            .is_ok());
    }
}
