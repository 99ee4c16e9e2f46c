//! Metric handles kept by their label values, for metrics recorded on every request.
//!
//! `metrics::counter!(name, &labels)` builds a key (allocating every label), hashes it and looks
//! it up in the recorder's registry each time. On single-message produces the request and
//! produce counters did that five times per request, about 4% of a node's CPU in a profile. A
//! handle found once is kept here and reused: a read lock and a short scan instead.
//!
//! Handles are only kept once the Prometheus recorder is installed ([`super::init_metrics`]):
//! a handle taken before that belongs to no recorder and would count nothing forever. The
//! recorder never forgets a metric (no idle timeout), so a kept handle stays the one it exports.
//! The set of keys is bounded by what labels them: route patterns, methods and statuses, or a
//! node's topics and partitions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use parking_lot::RwLock;

/// Set once the global recorder is installed.
static RECORDER_INSTALLED: AtomicBool = AtomicBool::new(false);

pub(super) fn recorder_installed() {
    RECORDER_INSTALLED.store(true, Ordering::Release);
}

/// Handles (or tuples of them) by a name label (a route, a topic) and a numeric one (a method
/// and status, a partition).
pub struct HandleCache<H> {
    by_name: RwLock<HashMap<Box<str>, Numbered<H>>>,
}

/// The handles kept under one name, by number (a few at most: a short scan beats a hash).
type Numbered<H> = Vec<(u64, H)>;

impl<H: Clone> HandleCache<H> {
    pub fn new() -> Self {
        HandleCache {
            by_name: RwLock::new(HashMap::new()),
        }
    }

    /// The handle for `(name, number)`, registered by `register` the first time.
    pub fn get(&self, name: &str, number: u64, register: impl FnOnce() -> H) -> H {
        if !RECORDER_INSTALLED.load(Ordering::Acquire) {
            return register();
        }
        if let Some(found) = self.find(name, number) {
            return found;
        }
        let handle = register();
        let mut by_name = self.by_name.write();
        let kept = by_name.entry(name.into()).or_default();
        if !kept.iter().any(|(kept_number, _)| *kept_number == number) {
            kept.push((number, handle.clone()));
        }
        handle
    }

    fn find(&self, name: &str, number: u64) -> Option<H> {
        let by_name = self.by_name.read();
        by_name
            .get(name)?
            .iter()
            .find(|(kept_number, _)| *kept_number == number)
            .map(|(_, handle)| handle.clone())
    }
}

/// The handle of a metric without labels, or with fixed ones, kept once registered.
pub struct OnceHandle<H> {
    kept: OnceLock<H>,
}

impl<H: Clone> OnceHandle<H> {
    pub const fn new() -> Self {
        OnceHandle {
            kept: OnceLock::new(),
        }
    }

    /// The handle, registered by `register` the first time.
    pub fn get(&self, register: impl FnOnce() -> H) -> H {
        if !RECORDER_INSTALLED.load(Ordering::Acquire) {
            return register();
        }
        self.kept.get_or_init(register).clone()
    }
}

impl<H: Clone> Default for OnceHandle<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Clone> Default for HandleCache<H> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_handle_is_registered_once_per_label_pair_once_the_recorder_is_installed() {
        super::super::init_metrics().expect("metrics");
        let cache: HandleCache<usize> = HandleCache::new();
        let registered = AtomicUsize::new(0);
        let register = |value: usize| {
            registered.fetch_add(1, Ordering::Relaxed);
            value
        };
        assert_eq!(cache.get("/v1/a", 1, || register(10)), 10);
        assert_eq!(cache.get("/v1/a", 1, || register(99)), 10, "kept");
        assert_eq!(cache.get("/v1/a", 2, || register(20)), 20);
        assert_eq!(cache.get("/v1/b", 1, || register(30)), 30);
        assert_eq!(cache.get("/v1/b", 1, || register(99)), 30, "kept");
        assert_eq!(registered.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_once_handle_is_registered_once() {
        super::super::init_metrics().expect("metrics");
        let kept: OnceHandle<u32> = OnceHandle::new();
        assert_eq!(kept.get(|| 1), 1);
        assert_eq!(kept.get(|| 2), 1);
    }

    #[test]
    fn cached_counters_are_the_ones_exported() {
        let handle = super::super::init_metrics().expect("metrics");
        let cache: HandleCache<metrics::Counter> = HandleCache::new();
        for _ in 0..3 {
            cache
                .get("handles-test", 7, || {
                    metrics::counter!("herald_handle_cache_test_total", "name" => "handles-test", "number" => "7")
                })
                .increment(2);
        }
        let text = handle.render();
        assert!(
            text.contains("herald_handle_cache_test_total{name=\"handles-test\",number=\"7\"} 6"),
            "{text}"
        );
    }
}
