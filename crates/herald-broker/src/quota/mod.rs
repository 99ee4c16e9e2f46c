//! Per-client quotas: token buckets for requests per second, produce bytes per second (request
//! bodies) and consume bytes per second (response bodies and pushed deliveries), enforced on the
//! node that serves the request.
//!
//! A client is its authenticated subject, or its IP address when it is anonymous. The buckets
//! live in a sharded map: a request locks one shard for the few arithmetic operations on its
//! client's buckets and never while it waits, so a client over its quota slows nobody else.
//! Buckets that have refilled and sat idle are forgotten (a new bucket starts full, so
//! forgetting a full one changes nothing).

pub mod bucket;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use bucket::{BucketLimit, TokenBucket};

/// Counter of refusals (REST 429s, WebSocket `quota_exceeded` frames) and delayed deliveries,
/// labelled `kind`.
pub const THROTTLED_TOTAL: &str = "herald_quota_throttled_total";
/// Counter of what clients spent, labelled `client` (a client named in `[quotas.clients]`, or
/// `other`: the label's values stay bounded by the configuration) and `kind`.
pub const USAGE_TOTAL: &str = "herald_quota_usage_total";

/// How many shards the bucket map has: enough that clients rarely share one.
const SHARDS: usize = 64;
/// How often a shard looks for idle buckets to forget.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// How long a client's buckets stay after their last use (at least; they go once full).
const IDLE_AFTER: Duration = Duration::from_secs(60);

/// What a bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    Requests,
    ProduceBytes,
    ConsumeBytes,
}

impl QuotaKind {
    /// The setting that limits it, as the configuration and error details name it.
    pub fn setting(self) -> &'static str {
        match self {
            QuotaKind::Requests => "requests_per_sec",
            QuotaKind::ProduceBytes => "produce_bytes_per_sec",
            QuotaKind::ConsumeBytes => "consume_bytes_per_sec",
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            QuotaKind::Requests => "requests",
            QuotaKind::ProduceBytes => "produce_bytes",
            QuotaKind::ConsumeBytes => "consume_bytes",
        }
    }
}

/// The three limits of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    pub requests: BucketLimit,
    pub produce_bytes: BucketLimit,
    pub consume_bytes: BucketLimit,
}

impl ClientLimits {
    pub const UNLIMITED: ClientLimits = ClientLimits {
        requests: BucketLimit { rate: 0, burst: 0 },
        produce_bytes: BucketLimit { rate: 0, burst: 0 },
        consume_bytes: BucketLimit { rate: 0, burst: 0 },
    };

    fn of(&self, kind: QuotaKind) -> BucketLimit {
        match kind {
            QuotaKind::Requests => self.requests,
            QuotaKind::ProduceBytes => self.produce_bytes,
            QuotaKind::ConsumeBytes => self.consume_bytes,
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.requests.is_unlimited()
            && self.produce_bytes.is_unlimited()
            && self.consume_bytes.is_unlimited()
    }
}

/// The limits every client gets, and those of clients named in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaPolicy {
    pub defaults: ClientLimits,
    /// By client id: a token's subject, or an anonymous client's IP address (`127.0.0.2`).
    pub clients: HashMap<String, ClientLimits>,
}

impl Default for QuotaPolicy {
    fn default() -> Self {
        QuotaPolicy {
            defaults: ClientLimits::UNLIMITED,
            clients: HashMap::new(),
        }
    }
}

/// Who is charged: an authenticated client, or an anonymous address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QuotaKey {
    Client(String),
    Address(IpAddr),
}

impl std::fmt::Display for QuotaKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaKey::Client(subject) => write!(formatter, "client '{subject}'"),
            QuotaKey::Address(address) => write!(formatter, "address {address}"),
        }
    }
}

/// A refusal: which quota, its rate, and how long until the request would pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttled {
    pub kind: QuotaKind,
    pub rate: u64,
    pub retry_after: Duration,
}

impl Throttled {
    /// Whole seconds for `Retry-After`: rounded up, at least 1.
    pub fn retry_after_seconds(&self) -> u32 {
        let seconds = self.retry_after.as_secs_f64().ceil();
        (seconds as u32).max(1)
    }
}

struct ClientBuckets {
    requests: Option<TokenBucket>,
    produce_bytes: Option<TokenBucket>,
    consume_bytes: Option<TokenBucket>,
    last_used: Instant,
}

impl ClientBuckets {
    fn new(limits: &ClientLimits, now: Instant) -> ClientBuckets {
        let bucket =
            |limit: BucketLimit| (!limit.is_unlimited()).then(|| TokenBucket::full(limit, now));
        ClientBuckets {
            requests: bucket(limits.requests),
            produce_bytes: bucket(limits.produce_bytes),
            consume_bytes: bucket(limits.consume_bytes),
            last_used: now,
        }
    }

    fn bucket(&mut self, kind: QuotaKind) -> Option<&mut TokenBucket> {
        match kind {
            QuotaKind::Requests => self.requests.as_mut(),
            QuotaKind::ProduceBytes => self.produce_bytes.as_mut(),
            QuotaKind::ConsumeBytes => self.consume_bytes.as_mut(),
        }
    }

    fn forgettable(&mut self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_used) >= IDLE_AFTER
            && [
                QuotaKind::Requests,
                QuotaKind::ProduceBytes,
                QuotaKind::ConsumeBytes,
            ]
            .into_iter()
            .all(|kind| self.bucket(kind).is_none_or(|bucket| bucket.is_full(now)))
    }
}

struct Shard {
    clients: HashMap<QuotaKey, ClientBuckets>,
    last_sweep: Instant,
}

/// The time quotas are measured by; tests bring their own.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// The quotas of a node: cheap to clone, shared by every transport.
#[derive(Clone)]
pub struct Quotas {
    inner: Arc<Inner>,
}

struct Inner {
    policy: QuotaPolicy,
    enabled: bool,
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
    clock: Box<dyn Clock>,
}

impl Quotas {
    pub fn new(policy: QuotaPolicy) -> Quotas {
        Quotas::with_clock(policy, Box::new(SystemClock))
    }

    pub fn with_clock(policy: QuotaPolicy, clock: Box<dyn Clock>) -> Quotas {
        let enabled = !policy.defaults.is_unlimited()
            || policy.clients.values().any(|limits| !limits.is_unlimited());
        let now = clock.now();
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    clients: HashMap::new(),
                    last_sweep: now,
                })
            })
            .collect();
        Quotas {
            inner: Arc::new(Inner {
                policy,
                enabled,
                shards,
                hasher: Default::default(),
                clock,
            }),
        }
    }

    /// No quotas at all: every check passes without a lookup.
    pub fn unlimited() -> Quotas {
        Quotas::new(QuotaPolicy::default())
    }

    /// Whether any quota is configured (otherwise transports skip the checks entirely).
    pub fn enabled(&self) -> bool {
        self.inner.enabled
    }

    /// A client's own limits, or the defaults. An anonymous client's id is its address.
    fn limits(&self, key: &QuotaKey) -> &ClientLimits {
        let clients = &self.inner.policy.clients;
        let own = match key {
            QuotaKey::Client(subject) => clients.get(subject),
            QuotaKey::Address(address) if !clients.is_empty() => clients.get(&address.to_string()),
            QuotaKey::Address(_) => None,
        };
        own.unwrap_or(&self.inner.policy.defaults)
    }

    /// The `client` label of the usage metric: configured clients by id, others together.
    fn usage_label(&self, key: &QuotaKey) -> String {
        let id = match key {
            QuotaKey::Client(subject) => subject.clone(),
            QuotaKey::Address(address) => address.to_string(),
        };
        if self.inner.policy.clients.contains_key(&id) {
            id
        } else {
            "other".to_string()
        }
    }

    /// Runs `action` on the client's buckets under its shard's lock (briefly; never across an
    /// await). `None` when the client has no limits.
    fn with_buckets<T>(
        &self,
        key: &QuotaKey,
        action: impl FnOnce(&mut ClientBuckets, Instant) -> T,
    ) -> Option<T> {
        if !self.inner.enabled {
            return None;
        }
        let limits = *self.limits(key);
        if limits.is_unlimited() {
            return None;
        }
        let index = (self.inner.hasher.hash_one(key) as usize) % self.inner.shards.len();
        let now = self.inner.clock.now();
        let mut shard = self.inner.shards[index].lock();
        if now.saturating_duration_since(shard.last_sweep) >= SWEEP_INTERVAL {
            shard.last_sweep = now;
            shard.clients.retain(|_, buckets| !buckets.forgettable(now));
        }
        let buckets = shard
            .clients
            .entry(key.clone())
            .or_insert_with(|| ClientBuckets::new(&limits, now));
        buckets.last_used = now;
        Some(action(buckets, now))
    }

    fn refused(&self, kind: QuotaKind, limits: &ClientLimits, wait: Duration) -> Throttled {
        metrics::counter!(THROTTLED_TOTAL, "kind" => kind.label()).increment(1);
        Throttled {
            kind,
            rate: limits.of(kind).rate,
            retry_after: wait,
        }
    }

    /// Admits a request: refuses it while the client's consume bytes are in debt, takes one
    /// request, and takes `produce_bytes` (the body's size, when it is known up front). Takes
    /// nothing when it refuses.
    pub fn admit_request(&self, key: &QuotaKey, produce_bytes: u64) -> Result<(), Throttled> {
        let limits = *self.limits(key);
        let outcome = self.with_buckets(key, |buckets, now| {
            if let Some(wait) = buckets
                .consume_bytes
                .as_mut()
                .and_then(|bucket| bucket.debt_wait(now))
            {
                return Err((QuotaKind::ConsumeBytes, wait));
            }
            if let Some(bucket) = buckets.produce_bytes.as_mut() {
                if let Some(wait) = bucket.debt_wait(now) {
                    return Err((QuotaKind::ProduceBytes, wait));
                }
            }
            // Checked before either is taken, so a refusal takes nothing.
            if let Some(bucket) = buckets.requests.as_mut() {
                bucket
                    .check(1, now)
                    .map_err(|wait| (QuotaKind::Requests, wait))?;
            }
            if produce_bytes > 0 {
                if let Some(bucket) = buckets.produce_bytes.as_mut() {
                    bucket
                        .check(produce_bytes, now)
                        .map_err(|wait| (QuotaKind::ProduceBytes, wait))?;
                    bucket.charge(produce_bytes, now);
                }
            }
            if let Some(bucket) = buckets.requests.as_mut() {
                bucket.charge(1, now);
            }
            Ok(())
        });
        match outcome {
            Some(Err((kind, wait))) => Err(self.refused(kind, &limits, wait)),
            _ => {
                if produce_bytes > 0 && self.inner.enabled {
                    self.count_usage(key, QuotaKind::ProduceBytes, produce_bytes);
                }
                Ok(())
            }
        }
    }

    /// Charges bytes whatever the level (a body counted as it streamed, a response sent): the
    /// bucket may go into debt, which the client's next request waits out. Answers how long
    /// the client is now in debt for (zero when it is not).
    pub fn charge(&self, key: &QuotaKey, kind: QuotaKind, bytes: u64) -> Duration {
        if bytes == 0 || !self.inner.enabled {
            return Duration::ZERO;
        }
        self.count_usage(key, kind, bytes);
        self.with_buckets(key, |buckets, now| {
            buckets.bucket(kind).and_then(|bucket| {
                bucket.charge(bytes, now);
                bucket.debt_wait(now)
            })
        })
        .flatten()
        .unwrap_or(Duration::ZERO)
    }

    /// Takes a chunk of a body whose size was not declared (it streams): refused, taking
    /// nothing, while the client's `kind` bucket is in debt; otherwise taken whole, which may
    /// put the bucket in debt (as a declared body over the burst passes a full bucket once).
    /// So bodies sent at once without a length cannot together pass more than the bucket
    /// holds, as they would if each were charged only after the others were admitted.
    pub fn take_chunk(&self, key: &QuotaKey, kind: QuotaKind, bytes: u64) -> Result<(), Throttled> {
        if bytes == 0 {
            return Ok(());
        }
        let limits = *self.limits(key);
        let outcome = self.with_buckets(key, |buckets, now| {
            let Some(bucket) = buckets.bucket(kind) else {
                return Ok(());
            };
            if let Some(wait) = bucket.debt_wait(now) {
                return Err(wait);
            }
            bucket.charge(bytes, now);
            Ok(())
        });
        match outcome {
            Some(Err(wait)) => Err(self.refused(kind, &limits, wait)),
            _ => {
                if self.inner.enabled {
                    self.count_usage(key, kind, bytes);
                }
                Ok(())
            }
        }
    }

    /// How long the client's `kind` bucket is in debt for (zero when it is not).
    pub fn debt(&self, key: &QuotaKey, kind: QuotaKind) -> Duration {
        self.with_buckets(key, |buckets, now| {
            buckets
                .bucket(kind)
                .and_then(|bucket| bucket.debt_wait(now))
        })
        .flatten()
        .unwrap_or(Duration::ZERO)
    }

    /// Takes `bytes` of `kind` if the client has them now (a WebSocket publish); refuses and
    /// takes nothing otherwise.
    pub fn try_take(&self, key: &QuotaKey, kind: QuotaKind, bytes: u64) -> Result<(), Throttled> {
        let limits = *self.limits(key);
        let outcome = self.with_buckets(key, |buckets, now| {
            buckets
                .bucket(kind)
                .map_or(Ok(()), |bucket| bucket.try_take(bytes, now))
        });
        match outcome {
            Some(Err(wait)) => Err(self.refused(kind, &limits, wait)),
            _ => {
                if self.inner.enabled {
                    self.count_usage(key, kind, bytes);
                }
                Ok(())
            }
        }
    }

    /// Counts a delivery held back because its client is over its consume quota.
    pub fn count_delay(&self) {
        metrics::counter!(THROTTLED_TOTAL, "kind" => QuotaKind::ConsumeBytes.label()).increment(1);
    }

    fn count_usage(&self, key: &QuotaKey, kind: QuotaKind, amount: u64) {
        if self.limits(key).of(kind).is_unlimited() {
            return;
        }
        metrics::counter!(
            USAGE_TOTAL,
            "client" => self.usage_label(key),
            "kind" => kind.label()
        )
        .increment(amount);
    }

    /// How many clients have buckets now (for tests of eviction).
    pub fn tracked_clients(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| shard.lock().clients.len())
            .sum()
    }
}

#[cfg(test)]
mod tests;
