use std::sync::Arc;

use parking_lot::Mutex;

use super::*;

/// A clock the test moves by hand.
#[derive(Clone)]
struct ManualClock(Arc<Mutex<Instant>>);

impl ManualClock {
    fn new() -> ManualClock {
        ManualClock(Arc::new(Mutex::new(Instant::now())))
    }

    fn advance(&self, by: Duration) {
        *self.0.lock() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock()
    }
}

fn limits(requests: u64, produce: u64, consume: u64) -> ClientLimits {
    ClientLimits {
        requests: BucketLimit::new(requests, None),
        produce_bytes: BucketLimit::new(produce, None),
        consume_bytes: BucketLimit::new(consume, None),
    }
}

fn quotas(policy: QuotaPolicy) -> (Quotas, ManualClock) {
    let clock = ManualClock::new();
    (Quotas::with_clock(policy, Box::new(clock.clone())), clock)
}

fn client(name: &str) -> QuotaKey {
    QuotaKey::Client(name.to_string())
}

#[test]
fn unlimited_by_default_and_nothing_is_tracked() {
    let quotas = Quotas::unlimited();
    assert!(!quotas.enabled());
    for _ in 0..1000 {
        quotas.admit_request(&client("a"), 1 << 20).unwrap();
        quotas.charge(&client("a"), QuotaKind::ConsumeBytes, 1 << 30);
    }
    assert_eq!(quotas.tracked_clients(), 0);
}

#[test]
fn requests_per_second_refuse_with_the_wait_and_spare_other_clients() {
    let (quotas, clock) = quotas(QuotaPolicy {
        defaults: limits(2, 0, 0),
        clients: HashMap::new(),
    });
    let (a, b) = (client("a"), QuotaKey::Address("127.0.0.2".parse().unwrap()));
    quotas.admit_request(&a, 0).unwrap();
    quotas.admit_request(&a, 0).unwrap();
    let refused = quotas.admit_request(&a, 0).unwrap_err();
    assert_eq!(refused.kind, QuotaKind::Requests);
    assert_eq!(refused.rate, 2);
    assert_eq!(refused.retry_after, Duration::from_millis(500));
    assert_eq!(refused.retry_after_seconds(), 1);
    quotas.admit_request(&b, 0).unwrap();
    quotas.admit_request(&b, 0).unwrap();
    clock.advance(Duration::from_millis(500));
    quotas.admit_request(&a, 0).unwrap();
}

#[test]
fn a_refused_request_takes_nothing() {
    let (quotas, _clock) = quotas(QuotaPolicy {
        defaults: limits(10, 100, 0),
        clients: HashMap::new(),
    });
    let a = client("a");
    quotas.admit_request(&a, 60).unwrap();
    // 40 bytes left: 60 more are refused, and the request it would have been is not counted.
    let refused = quotas.admit_request(&a, 60).unwrap_err();
    assert_eq!(refused.kind, QuotaKind::ProduceBytes);
    for _ in 0..9 {
        quotas.admit_request(&a, 0).unwrap();
    }
    assert_eq!(
        quotas.admit_request(&a, 0).unwrap_err().kind,
        QuotaKind::Requests
    );
}

#[test]
fn per_client_overrides_replace_the_defaults() {
    let (quotas, _clock) = quotas(QuotaPolicy {
        defaults: limits(1, 0, 0),
        clients: HashMap::from([("batch".to_string(), limits(0, 0, 0))]),
    });
    for _ in 0..100 {
        quotas.admit_request(&client("batch"), 0).unwrap();
    }
    quotas.admit_request(&client("other"), 0).unwrap();
    quotas.admit_request(&client("other"), 0).unwrap_err();
}

#[test]
fn consume_debt_holds_back_the_next_request_until_it_is_paid() {
    let (quotas, clock) = quotas(QuotaPolicy {
        defaults: limits(0, 0, 1000),
        clients: HashMap::new(),
    });
    let a = client("a");
    quotas.admit_request(&a, 0).unwrap();
    let debt = quotas.charge(&a, QuotaKind::ConsumeBytes, 3500);
    assert_eq!(debt, Duration::from_millis(2500));
    let refused = quotas.admit_request(&a, 0).unwrap_err();
    assert_eq!(refused.kind, QuotaKind::ConsumeBytes);
    assert_eq!(refused.retry_after_seconds(), 3);
    clock.advance(Duration::from_millis(2500));
    quotas.admit_request(&a, 0).unwrap();
}

#[test]
fn idle_full_buckets_are_forgotten_and_busy_ones_kept() {
    let (quotas, clock) = quotas(QuotaPolicy {
        defaults: limits(10, 0, 0),
        clients: HashMap::new(),
    });
    for index in 0..200u32 {
        quotas
            .admit_request(&QuotaKey::Address(IpAddr::from(index.to_be_bytes())), 0)
            .unwrap();
    }
    assert_eq!(quotas.tracked_clients(), 200);
    clock.advance(IDLE_AFTER + SWEEP_INTERVAL);
    // Each shard sweeps when it is next used: touch every shard through many new keys.
    for index in 0..(SHARDS as u32 * 20) {
        quotas
            .admit_request(&client(&format!("late-{index}")), 0)
            .unwrap();
    }
    assert_eq!(quotas.tracked_clients(), SHARDS * 20);
}

#[test]
fn undeclared_body_chunks_are_refused_while_the_bucket_is_in_debt() {
    let (quotas, clock) = quotas(QuotaPolicy {
        defaults: limits(0, 4096, 0),
        clients: HashMap::new(),
    });
    let a = client("a");
    // Twenty bodies admitted at once (none declared a size), each sending 3000 bytes: the
    // first chunk of the first two fit before the bucket is in debt, none after.
    let taken = (0..20)
        .filter(|_| quotas.take_chunk(&a, QuotaKind::ProduceBytes, 3000).is_ok())
        .count();
    assert_eq!(taken, 2);
    let refused = quotas
        .take_chunk(&a, QuotaKind::ProduceBytes, 1)
        .unwrap_err();
    assert_eq!(refused.kind, QuotaKind::ProduceBytes);
    // 1904 bytes of debt at 4096 a second: out of it in under half a second.
    assert!(
        refused.retry_after <= Duration::from_millis(470),
        "{refused:?}"
    );
    clock.advance(Duration::from_millis(500));
    quotas
        .take_chunk(&a, QuotaKind::ProduceBytes, 100_000)
        .unwrap();
}
