//! `herald restore`: rebuilds a node's data directory, or every node's of a cluster, from
//! backups taken by `herald backup`. Offline: the nodes restored into must be stopped.
//!
//! One node: its backup is copied into the data directory (the store's immutable files
//! hard-linked when on the same file system). A whole cluster: each node's backup into
//! `DIR/node-<id>`, then the copies are *levelled*: the backups were taken at slightly
//! different moments, so one node's copy of a raft group can hold entries (committed and applied
//! there) that another's lacks. Left as they are, two copies with the shorter log could elect a
//! leader that overwrites entries the third already applied. So, per group, the copy with the
//! most advanced log (the rank an election uses: last term, then last index) replaces the
//! others' copies of that group. After it every replica of a group is the same, and the cluster
//! starts as it was at the latest backup of each group.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::broker::backups::manifest::{sync_dir, BackupManifest};
use crate::raft::LogRank;
use crate::storage::{Store, StoreOptions};

/// `herald restore --data-dir DIR BACKUP` or `herald restore --into DIR BACKUP...`.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// Restore one node: the data directory to create (it must not exist or be empty).
    #[arg(long, conflicts_with = "into", required_unless_present = "into")]
    pub data_dir: Option<PathBuf>,
    /// Restore a whole cluster: one data directory per backup, `DIR/node-<id>`, with the copies
    /// of each raft group levelled to the most advanced one.
    #[arg(long)]
    pub into: Option<PathBuf>,
    /// Backup directories (the `name` directories under a node's `storage.backup_dir`): one
    /// with `--data-dir`, one per node with `--into`.
    #[arg(required = true)]
    pub backups: Vec<PathBuf>,
}

impl RestoreArgs {
    /// Runs the restore and prints what it did.
    pub fn run(self) -> anyhow::Result<()> {
        let report = match (&self.data_dir, &self.into) {
            (Some(data_dir), _) => {
                let [backup] = self.backups.as_slice() else {
                    anyhow::bail!("--data-dir restores one backup; for a cluster use --into DIR");
                };
                restore_node(backup, data_dir)?
            }
            (None, Some(into)) => restore_cluster(&self.backups, into)?,
            (None, None) => anyhow::bail!("give --data-dir DIR or --into DIR"),
        };
        for (node_id, dir) in &report.data_dirs {
            println!("node {node_id}: {}", dir.display());
        }
        println!(
            "restored {} bytes into {} data director{} in {} ms; {} raft group{} levelled",
            report.bytes,
            report.data_dirs.len(),
            if report.data_dirs.len() == 1 {
                "y"
            } else {
                "ies"
            },
            report.took_ms,
            report.levelled_groups,
            if report.levelled_groups == 1 { "" } else { "s" },
        );
        Ok(())
    }
}

/// What `restore` did, for the caller to print.
#[derive(Debug, Default)]
pub struct RestoreReport {
    /// The data directories written, with their node ids.
    pub data_dirs: Vec<(u64, PathBuf)>,
    /// Bytes copied or linked.
    pub bytes: u64,
    /// Raft groups whose copy on some node was replaced by a more advanced one.
    pub levelled_groups: usize,
    pub took_ms: u64,
}

/// Restores one node's backup into `data_dir`, which must not exist or be empty.
pub fn restore_node(backup: &Path, data_dir: &Path) -> anyhow::Result<RestoreReport> {
    let started = Instant::now();
    let manifest = read_checked(backup)?;
    let bytes = copy_backup(backup, &manifest, data_dir)?;
    Ok(RestoreReport {
        data_dirs: vec![(manifest.node_id, data_dir.to_path_buf())],
        bytes,
        levelled_groups: 0,
        took_ms: millis(started),
    })
}

/// Restores a cluster: each backup (one per node, all of one cluster) into
/// `into/node-<id>`, then levels the copies of each raft group.
pub fn restore_cluster(backups: &[PathBuf], into: &Path) -> anyhow::Result<RestoreReport> {
    let started = Instant::now();
    let mut manifests: BTreeMap<u64, (PathBuf, BackupManifest)> = BTreeMap::new();
    for backup in backups {
        let manifest = read_checked(backup)?;
        if let Some((other, _)) = manifests.get(&manifest.node_id) {
            bail!(
                "{} and {} are both backups of node {}: give one backup per node",
                other.display(),
                backup.display(),
                manifest.node_id
            );
        }
        manifests.insert(manifest.node_id, (backup.clone(), manifest));
    }
    let mut first: Option<&BackupManifest> = None;
    for (_, manifest) in manifests.values() {
        if let Some(first) = first {
            if manifest.cluster_id != first.cluster_id {
                bail!(
                    "backup '{}' is of cluster {}, backup '{}' of cluster {}: a cluster is \
                     restored from backups of its own nodes",
                    first.name,
                    first.cluster_id,
                    manifest.name,
                    manifest.cluster_id
                );
            }
            if manifest.format_version != first.format_version {
                bail!(
                    "backup '{}' is in on-disk format {}, backup '{}' in format {}: take the \
                     backups of a cluster with one release",
                    first.name,
                    first.format_version,
                    manifest.name,
                    manifest.format_version
                );
            }
        } else {
            first = Some(manifest);
        }
    }
    let mut report = RestoreReport::default();
    for (node_id, (backup, manifest)) in &manifests {
        let data_dir = into.join(format!("node-{node_id}"));
        report.bytes += copy_backup(backup, manifest, &data_dir)?;
        report.data_dirs.push((*node_id, data_dir));
    }
    report.levelled_groups = level(&report.data_dirs)?;
    report.took_ms = millis(started);
    Ok(report)
}

/// Gives every copy of each raft group the most advanced copy's state; returns how many groups
/// had a copy replaced.
fn level(data_dirs: &[(u64, PathBuf)]) -> anyhow::Result<usize> {
    let mut stores = Vec::new();
    for (node_id, dir) in data_dirs {
        let store = Store::open(&StoreOptions::new(dir))
            .with_context(|| format!("opening the restored store in {}", dir.display()))?;
        let groups = store
            .group_ids()
            .with_context(|| format!("listing the groups in {}", dir.display()))?;
        stores.push((*node_id, store, groups));
    }
    let mut every_group: Vec<u64> = stores
        .iter()
        .flat_map(|(_, _, groups)| groups.iter().copied())
        .collect();
    every_group.sort_unstable();
    every_group.dedup();
    let mut levelled = 0;
    for group in every_group {
        let mut ranks = Vec::new();
        for (index, (_, store, groups)) in stores.iter().enumerate() {
            if groups.binary_search(&group).is_ok() {
                let rank = LogRank::read(store, group)
                    .with_context(|| format!("reading the log of group {group}"))?;
                ranks.push((rank, index));
            }
        }
        let Some((best_rank, best)) = ranks.iter().max().cloned() else {
            continue;
        };
        let mut replaced = false;
        for (rank, index) in &ranks {
            if *rank < best_rank {
                let (node_id, store, _) = &stores[*index];
                let (from_node, source, _) = &stores[best];
                let bytes = store
                    .replace_group_from(source, group)
                    .with_context(|| format!("levelling group {group} on node {node_id}"))?;
                tracing::info!(
                    group,
                    node_id,
                    from_node,
                    behind = %rank,
                    ahead = %best_rank,
                    bytes,
                    "levelled a group's copy to the most advanced one"
                );
                replaced = true;
            }
        }
        levelled += usize::from(replaced);
    }
    Ok(levelled)
}

/// Reads a backup's manifest and checks its files are all there, at their sizes.
fn read_checked(backup: &Path) -> anyhow::Result<BackupManifest> {
    let manifest = BackupManifest::read(backup).with_context(|| {
        format!(
            "{} is not a complete backup (no readable herald-backup.json)",
            backup.display()
        )
    })?;
    for file in &manifest.files {
        let path = backup.join(&file.name);
        let length = std::fs::metadata(&path)
            .with_context(|| format!("backup file {} is missing", path.display()))?
            .len();
        if length != file.bytes {
            bail!(
                "backup file {} has {length} bytes, its manifest says {}: the backup is damaged",
                path.display(),
                file.bytes
            );
        }
    }
    if manifest.format_version > crate::format::FORMAT_VERSION {
        bail!(
            "backup '{}' is in on-disk format {}, newer than format {} which this build reads: \
             restore it with the release that took it ({}) or a later one",
            manifest.name,
            manifest.format_version,
            crate::format::FORMAT_VERSION,
            manifest.herald_version
        );
    }
    Ok(manifest)
}

/// Copies the backup's files into `data_dir` (created; it must be empty if it exists): the
/// immutable SST and blob files as hard links where the file system allows, the rest copied.
fn copy_backup(backup: &Path, manifest: &BackupManifest, data_dir: &Path) -> anyhow::Result<u64> {
    if data_dir.exists() {
        let mut entries = std::fs::read_dir(data_dir)
            .with_context(|| format!("reading {}", data_dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is not empty: restore into a new or empty data directory (move the old \
                 one aside first)",
                data_dir.display()
            );
        }
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let mut bytes = 0;
    for file in &manifest.files {
        let source = backup.join(&file.name);
        let target = data_dir.join(&file.name);
        let immutable = file.name.ends_with(".sst") || file.name.ends_with(".blob");
        if !(immutable && std::fs::hard_link(&source, &target).is_ok()) {
            std::fs::copy(&source, &target)
                .with_context(|| format!("copying {} to {}", source.display(), target.display()))?;
            std::fs::File::open(&target)
                .and_then(|copied| copied.sync_all())
                .with_context(|| format!("syncing {}", target.display()))?;
        }
        bytes += file.bytes;
    }
    sync_dir(data_dir).with_context(|| format!("syncing {}", data_dir.display()))?;
    Ok(bytes)
}

fn millis(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}
