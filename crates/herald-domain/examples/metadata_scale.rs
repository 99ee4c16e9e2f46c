//! What one metadata command costs as the cluster grows: the metadata group applies a command,
//! then persists the state and publishes a copy of it (a consumer group command does neither:
//! the encoding is kept until the state changes, and nothing is published). Since on-disk
//! format 12 the persisted state leaves the topics out and each topic is a row, written when it
//! changed; the snapshot still encodes the whole state. Builds the state of TOPICS topics of
//! PARTITIONS partitions with 3 replicas (default 1,000 x 100: 100,000 partitions) by applying
//! `CreateTopic` commands, then times, as medians over 20 repetitions: applying one more
//! command, cloning the state (the publish), persisting a change (the state without topics, the
//! changed topic's row, and the walk over the topics that finds it), encoding the whole state
//! (a snapshot, and what format 11 persisted per change) and decoding it (an installed
//! snapshot).
//!
//!   cargo run --release --example metadata_scale                 # in crates/herald-domain
//!   TOPICS=100 cargo run --release --example metadata_scale

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_domain::metadata::{MetadataCommand, MetadataState};
use herald_domain::topic::TopicConfig;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn timed(repeat: usize, mut step: impl FnMut()) -> Duration {
    median(
        (0..repeat)
            .map(|_| {
                let started = Instant::now();
                step();
                started.elapsed()
            })
            .collect(),
    )
}

fn create(name: String, partitions: usize, rotation: usize) -> MetadataCommand {
    MetadataCommand::CreateTopic {
        name,
        replication_factor: 3,
        config: TopicConfig::default(),
        replicas: (0..partitions)
            .map(|index| {
                let first = ((rotation + index) % 3) as u64 + 1;
                vec![first, first % 3 + 1, (first + 1) % 3 + 1]
            })
            .collect(),
        created_at_ms: 0,
    }
}

fn main() {
    let topics = env("TOPICS", 1_000);
    let partitions = env("PARTITIONS", 100);
    let mut state = MetadataState::default();
    for node in 1..=3u64 {
        state.apply(&MetadataCommand::AddNode {
            node_id: node,
            http_addr: format!("10.0.0.{node}:8080"),
            raft_addr: format!("10.0.0.{node}:7000"),
        });
    }
    let started = Instant::now();
    for topic in 0..topics {
        state.apply(&create(
            format!("topic-{topic:05}"),
            partitions,
            topic * partitions,
        ));
    }
    let built = started.elapsed();
    let total = topics * partitions;
    println!("{topics} topics x {partitions} partitions = {total} partitions, 3 replicas each");
    println!("  applying the {topics} CreateTopic commands: {built:?} in all");

    let mut extra = 0usize;
    let apply = timed(20, || {
        extra += 1;
        let name = format!("extra-{extra}");
        state.apply(&create(name.clone(), partitions, 0));
        state.apply(&MetadataCommand::DeleteTopic {
            name,
            deleted_at_ms: 0,
        });
    });
    let clone = timed(20, || {
        std::hint::black_box(state.clone());
    });
    let mut bytes = Vec::new();
    let encode = timed(20, || {
        bytes = postcard::to_allocvec(&state).expect("encode");
    });
    let decode = timed(20, || {
        let decoded: MetadataState = postcard::from_bytes(&bytes).expect("decode");
        std::hint::black_box(decoded);
    });
    // What the topic rows hold: the topics as last written, sharing their values.
    let stored: BTreeMap<String, Arc<_>> = state.topics.clone();
    state.apply(&create("changed".into(), partitions, 0));
    let mut persisted = 0;
    let persist = timed(20, || {
        let changed: Vec<_> = state
            .topics
            .iter()
            .filter(|(name, topic)| !stored.get(*name).is_some_and(|was| Arc::ptr_eq(was, topic)))
            .map(|(_, topic)| postcard::to_allocvec(&**topic).expect("encode a topic"))
            .collect();
        let rest = postcard::to_allocvec(&state.without_topics()).expect("encode");
        persisted = rest.len() + changed.iter().map(Vec::len).sum::<usize>();
    });
    println!("  apply a CreateTopic and its DeleteTopic: {apply:?} (median of 20)");
    println!("  clone the state (what each applied batch publishes): {clone:?}");
    println!(
        "  persist a change of one topic (the state without topics, one row): {persist:?}, {persisted} bytes"
    );
    println!(
        "  encode the whole state (a snapshot; format 11 persisted this per change): {encode:?}, {} KiB",
        bytes.len() / 1024
    );
    println!("  decode it (an installed snapshot): {decode:?}");
    println!(
        "  so one metadata command costs about {:?} on each node: at most ~{:.0} metadata commands/s",
        apply + clone + persist,
        1.0 / (apply + clone + persist).as_secs_f64()
    );
}
