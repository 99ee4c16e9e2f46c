//! The on-disk format of a node's data directory: which format a directory holds, and bringing
//! an older one up to this build's.
//!
//! Every directory records the format it was written in (`format_version` in the node column
//! family). On start a node:
//! - records this build's format in a new directory;
//! - opens one of this build's format as it is;
//! - upgrades one of an older supported format: it first takes a RocksDB checkpoint beside the
//!   directory (`<data_dir>.format-<N>-<unix time>`, hard links: seconds and no space), then runs
//!   each migration step in order (`steps`), recording the new format after each, and logs what
//!   every step did. Starting the previous release on the checkpoint rolls the upgrade back;
//! - refuses a newer format (written by a later release: rolling back a node means starting it on
//!   the checkpoint its upgrade took) and the pre-release formats before
//!   [`FIRST_SUPPORTED_FORMAT`], with a message saying what to do.
//!
//! A change to anything the node stores (a raft entry, a state machine's rows, a snapshot, a key
//! layout) bumps [`FORMAT_VERSION`] and adds its step and its fixture (`migrations/<N>/`); the
//! tests below and `tests/it/ops/format_fixtures.rs` fail until both are there.

mod steps;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::storage::{Cf, Store, WriteSet};
pub use steps::{Migration, MIGRATIONS};

const NODE_ID_KEY: &[u8] = b"node_id";
const FORMAT_VERSION_KEY: &[u8] = b"format_version";

/// The first format a node upgrades from: the one of the first release that promised to keep
/// its users' data. Formats 1 to 10 were pre-release development formats, changed without
/// migrations: a directory of one is refused.
pub const FIRST_SUPPORTED_FORMAT: u64 = 11;

/// The format this build writes: the first supported one plus one per migration step.
///
/// The pre-release history, for the record. 1: the single-node log core (no version key was
/// written). 2: clustering. 3: log compaction settings. 4: consumer groups and idempotent
/// producing. 5: remembered deleted topic names. 6: consumer groups' client-held cursors. 7:
/// subscriptions. 8: subscription ordering, per-message delivery details, redrive jobs. 9: OAuth2
/// clients, signing keys and the authorization policy. 10: a group member's owner. 11: signing
/// keys sealed under the cluster secret: the first supported format.
///
/// Since then (one migration step each, `steps`): 12: the metadata's topics in rows of their
/// own.
pub const FORMAT_VERSION: u64 = FIRST_SUPPORTED_FORMAT + MIGRATIONS.len() as u64;

/// What a node found in its data directory and did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A new directory, now recorded as this node's, in this build's format.
    Created,
    /// A directory already in this build's format.
    Current,
    /// A directory upgraded from `from`; the copy taken before is at `checkpoint`.
    Upgraded { from: u64, checkpoint: PathBuf },
}

/// Checks (or, in a new directory, records) which node and which on-disk format the data
/// directory belongs to, and upgrades an older supported format in place.
pub fn open_data_dir(store: &Store, node_id: u64, data_dir: &Path) -> anyhow::Result<Opened> {
    upgrade_with(store, node_id, data_dir, MIGRATIONS)
}

/// [`open_data_dir`] with the migration steps given: the tests run it with steps of their own.
fn upgrade_with(
    store: &Store,
    node_id: u64,
    data_dir: &Path,
    migrations: &[Migration],
) -> anyhow::Result<Opened> {
    let current = FIRST_SUPPORTED_FORMAT + migrations.len() as u64;
    let stored_node = read_u64(store, NODE_ID_KEY, "node id")?;
    let stored_format = read_u64(store, FORMAT_VERSION_KEY, "format version")?;
    let Some(stored_node) = stored_node else {
        let mut writes = WriteSet::new();
        writes.put(
            Cf::Node,
            NODE_ID_KEY.to_vec(),
            node_id.to_be_bytes().to_vec(),
        );
        writes.put(
            Cf::Node,
            FORMAT_VERSION_KEY.to_vec(),
            current.to_be_bytes().to_vec(),
        );
        store.write(writes, true)?;
        return Ok(Opened::Created);
    };
    if stored_node != node_id {
        anyhow::bail!(
            "data directory {} belongs to node {stored_node}, not node {node_id}",
            data_dir.display()
        );
    }
    // The first release wrote no version key.
    let stored_format = stored_format.unwrap_or(1);
    if stored_format == current {
        return Ok(Opened::Current);
    }
    if stored_format > current {
        anyhow::bail!(
            "data directory {} has on-disk format {stored_format}, newer than format {current} \
             which this build reads: it was written by a later release of Herald. Run that \
             release (or a later one); to roll an upgraded node back, start this release on the \
             checkpoint the upgrade took ({}.format-{current}-<time>)",
            data_dir.display(),
            data_dir.display()
        );
    }
    if stored_format < FIRST_SUPPORTED_FORMAT {
        anyhow::bail!(
            "data directory {} has on-disk format {stored_format}, a pre-release format: this \
             build reads format {current} and upgrades formats {FIRST_SUPPORTED_FORMAT} and \
             later. Pre-release formats are not migrated: start this node on an empty data \
             directory (and copy topics over with `herald topics export` and `import`)",
            data_dir.display()
        );
    }
    let checkpoint = checkpoint_path(data_dir, stored_format)?;
    let started = Instant::now();
    store
        .checkpoint(&checkpoint)
        .with_context(|| format!("taking a checkpoint at {}", checkpoint.display()))?;
    copy_node_files(data_dir, &checkpoint)?;
    tracing::info!(
        data_dir = %data_dir.display(),
        from = stored_format,
        to = current,
        checkpoint = %checkpoint.display(),
        took_ms = millis(started.elapsed()),
        "upgrading the on-disk format; the copy taken first rolls it back (start the previous \
         release on it)"
    );
    let first_step = (stored_format - FIRST_SUPPORTED_FORMAT) as usize;
    for (index, migration) in migrations.iter().enumerate().skip(first_step) {
        let from = FIRST_SUPPORTED_FORMAT + index as u64;
        let step_started = Instant::now();
        let summary = (migration.run)(store).with_context(|| {
            format!(
                "migrating {} from format {from} to {}: {} (the directory is still in format \
                 {from}; the copy from before the upgrade is at {})",
                data_dir.display(),
                from + 1,
                migration.what,
                checkpoint.display()
            )
        })?;
        let mut writes = WriteSet::new();
        writes.put(
            Cf::Node,
            FORMAT_VERSION_KEY.to_vec(),
            (from + 1).to_be_bytes().to_vec(),
        );
        store.write(writes, true)?;
        tracing::info!(
            from,
            to = from + 1,
            step = migration.what,
            summary = %summary,
            took_ms = millis(step_started.elapsed()),
            "migrated the on-disk format"
        );
    }
    tracing::info!(
        data_dir = %data_dir.display(),
        from = stored_format,
        to = current,
        took_ms = millis(started.elapsed()),
        "on-disk format upgraded"
    );
    Ok(Opened::Upgraded {
        from: stored_format,
        checkpoint,
    })
}

fn read_u64(store: &Store, key: &[u8], what: &str) -> anyhow::Result<Option<u64>> {
    match store.get(Cf::Node, key)? {
        Some(bytes) => {
            let array: [u8; 8] = bytes
                .as_slice()
                .try_into()
                .with_context(|| format!("corrupt {what}"))?;
            Ok(Some(u64::from_be_bytes(array)))
        }
        None => Ok(None),
    }
}

/// Beside the data directory, so the checkpoint's hard links stay on its filesystem:
/// `<data_dir>.format-<from>-<unix seconds>`.
fn checkpoint_path(data_dir: &Path, from: u64) -> anyhow::Result<PathBuf> {
    let absolute = std::fs::canonicalize(data_dir)
        .with_context(|| format!("resolving {}", data_dir.display()))?;
    let (Some(parent), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        anyhow::bail!(
            "data directory {} has no parent directory to put the pre-upgrade checkpoint in",
            absolute.display()
        );
    };
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut checkpoint = parent.join(format!(
        "{}.format-{from}-{seconds}",
        name.to_string_lossy()
    ));
    let mut attempt = 1;
    while checkpoint.exists() {
        attempt += 1;
        checkpoint = parent.join(format!(
            "{}.format-{from}-{seconds}-{attempt}",
            name.to_string_lossy()
        ));
    }
    Ok(checkpoint)
}

/// The files a node keeps in its data directory beside RocksDB's: without them the previous
/// release could not start on the checkpoint (the cluster secret seals the signing keys).
fn copy_node_files(data_dir: &Path, checkpoint: &Path) -> anyhow::Result<()> {
    let name = crate::cluster_secret::DEFAULT_FILE_NAME;
    let source = data_dir.join(name);
    if source.exists() {
        std::fs::copy(&source, checkpoint.join(name)).with_context(|| {
            format!("copying {} into {}", source.display(), checkpoint.display())
        })?;
    }
    Ok(())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
