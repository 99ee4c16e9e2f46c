//! What a cluster test sent and what was acknowledged, by message id, and the check of a
//! partition's log against it. Every message a test sends carries a unique id in its value
//! (`{"id": ...}`), so the log can be checked exactly: nothing lost, moved or duplicated.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};

use super::cluster::{produce_client, produce_retrying, Stored};

/// How long a produce may keep failing (e.g. across an election) before the test gives up.
pub const PRODUCE_DEADLINE: Duration = Duration::from_secs(60);

/// What a test sent and what was acknowledged, by message id, on one partition.
#[derive(Default, Debug)]
pub struct Book {
    /// Every id ever sent.
    pub sent: HashSet<String>,
    /// id -> acknowledged offset.
    pub acked: BTreeMap<String, u64>,
    /// Acknowledged ids that were sent more than once (a retry after an unknown outcome): they
    /// may be stored twice.
    pub maybe_duplicated: HashSet<String>,
    /// Ids sent once and never acknowledged: stored at most once.
    pub unacknowledged: HashSet<String>,
}

impl Book {
    /// Records a produce of `ids` (in request order) that ended in `offsets` on `partition`.
    pub fn acknowledge(
        &mut self,
        ids: &[String],
        offsets: &[(u32, u64)],
        partition: u32,
        retried: bool,
    ) {
        assert_eq!(ids.len(), offsets.len(), "one offset per message");
        for (id, &(p, offset)) in ids.iter().zip(offsets) {
            assert_eq!(p, partition, "{id} acknowledged on another partition");
            assert!(
                self.acked.insert(id.clone(), offset).is_none(),
                "{id} acknowledged twice"
            );
            if retried {
                self.maybe_duplicated.insert(id.clone());
            }
        }
    }

    /// Checks a partition's whole content against the book: offsets from 0 without holes,
    /// nothing that was not sent, every acknowledged id at its acknowledged offset, no id stored
    /// twice unless it was retried after an unknown outcome, unacknowledged ids at most once.
    pub fn check(&self, stored: &[Stored]) {
        let mut seen: HashMap<&str, Vec<u64>> = HashMap::new();
        for (i, message) in stored.iter().enumerate() {
            assert_eq!(
                message.offset, i as u64,
                "offsets have a hole or disorder at {i}"
            );
            let id = message.value["id"]
                .as_str()
                .unwrap_or_else(|| panic!("stored message without an id: {message:?}"));
            assert!(
                self.sent.contains(id),
                "stored {id} was never sent: {message:?}"
            );
            seen.entry(id).or_default().push(message.offset);
        }
        for (id, &offset) in &self.acked {
            let stored_at = stored.get(offset as usize).unwrap_or_else(|| {
                panic!(
                    "acknowledged {id}@{offset} is lost (log has {} messages)",
                    stored.len()
                )
            });
            assert_eq!(
                stored_at.value["id"],
                id.as_str(),
                "offset {offset} was acknowledged for {id} but holds {:?}",
                stored_at.value
            );
            let copies = &seen[id.as_str()];
            if !self.maybe_duplicated.contains(id) {
                assert_eq!(
                    copies.len(),
                    1,
                    "{id} was sent once and is stored at offsets {copies:?}"
                );
            }
        }
        for id in &self.unacknowledged {
            if let Some(copies) = seen.get(id.as_str()) {
                assert_eq!(
                    copies.len(),
                    1,
                    "{id} was sent once and is stored at {copies:?}"
                );
            }
        }
    }
}

/// A batch of messages with unique ids for partition `partition`.
pub fn batch(ids: &[String], partition: u32) -> Value {
    let messages: Vec<Value> = ids
        .iter()
        .map(|id| json!({"partition": partition, "key": id, "value": {"id": id}}))
        .collect();
    json!({ "messages": messages })
}

/// Produces messages with these ids to `partition` through `urls` (retrying), into `book`.
pub async fn produce_ids(
    client: &reqwest::Client,
    book: &mut Book,
    urls: &[String],
    partition: u32,
    ids: Vec<String>,
) {
    book.sent.extend(ids.iter().cloned());
    let produced = produce_retrying(client, urls, &batch(&ids, partition), PRODUCE_DEADLINE)
        .await
        .unwrap_or_else(|err| panic!("producing {ids:?}: {err}"));
    book.acknowledge(
        &ids,
        &produced.offsets,
        partition,
        !produced.failures.is_empty(),
    );
}

/// Produces batches of unique ids to partition 0 through `urls` (retrying), into `book`.
pub async fn produce_batches(
    book: &mut Book,
    urls: &[String],
    prefix: &str,
    requests: usize,
    size: usize,
) {
    let client = produce_client();
    for r in 0..requests {
        let ids: Vec<String> = (0..size).map(|m| format!("{prefix}-{r}-{m}")).collect();
        produce_ids(&client, book, urls, 0, ids).await;
    }
}
