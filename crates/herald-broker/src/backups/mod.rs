//! Online backups of this node: a RocksDB checkpoint of its store (hard links to the immutable
//! files, so gigabytes take seconds and next to no space until compactions move on), the
//! node's own files beside the store (its cluster secret), and a manifest written last.
//!
//! A backup is a data directory as it was at one instant: `herald restore` puts it back in
//! place (one node), or levels several nodes' backups into a cluster (`docs/operations.md`).

pub mod manifest;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Mutex;

use crate::broker_core::Core;
use crate::{BrokerError, BrokerResult, ErrorCode};
use manifest::{
    sync_dir, BackupFile, BackupManifest, MANIFEST_FILE, MANIFEST_KIND, MANIFEST_VERSION,
};

/// The longest backup name.
pub const MAX_BACKUP_NAME_LEN: usize = 100;

/// Where backups go and what they copy besides the store.
#[derive(Debug, Clone, Default)]
pub struct BackupOptions {
    /// The directory backups are written under, one directory per backup. On the data
    /// directory's file system the store's files are hard links; elsewhere they are copied.
    /// `None`: this node takes no backups (`backups_disabled`).
    pub backup_dir: Option<PathBuf>,
    /// Files of the node kept beside its store (the cluster secret), copied into each backup
    /// when they exist.
    pub node_files: Vec<PathBuf>,
    /// The on-disk format the store is in, recorded in the manifest.
    pub format_version: u64,
}

/// Takes and lists this node's backups (`/v1/cluster/nodes/{id}/backups`).
#[derive(Clone)]
pub struct BackupService {
    core: Arc<Core>,
    /// One backup at a time: two at once would only compete for the disk.
    running: Arc<Mutex<()>>,
}

impl BackupService {
    pub(crate) fn new(core: Arc<Core>) -> BackupService {
        BackupService {
            core,
            running: Arc::new(Mutex::new(())),
        }
    }

    /// Takes a backup of this node named `name` (or `node-<id>-<ms since the epoch>`).
    /// `node_id` must be this node's: a backup is of the node that answers.
    pub async fn take(&self, node_id: u64, name: Option<String>) -> BrokerResult<BackupManifest> {
        let backup_dir = self.backup_dir(node_id)?;
        let taken_at_ms = u64::try_from(crate::topics::now_ms()).unwrap_or(0);
        let name = match name {
            Some(name) => {
                validate_backup_name(&name)?;
                name
            }
            None => format!("node-{node_id}-{taken_at_ms}"),
        };
        let _one_at_a_time = self.running.lock().await;
        let target = backup_dir.join(&name);
        if target.exists() {
            return Err(BrokerError::Conflict {
                code: ErrorCode::BackupExists,
                message: format!("a backup named '{name}' exists on node {node_id}"),
            });
        }
        let cluster = self.core.cluster();
        let me = cluster
            .membership()
            .nodes_view()
            .into_iter()
            .find(|node| node.id == node_id);
        let mut manifest = BackupManifest {
            kind: MANIFEST_KIND.into(),
            version: MANIFEST_VERSION,
            name: name.clone(),
            node_id,
            cluster_id: cluster
                .metadata()
                .current()
                .cluster_id
                .clone()
                .unwrap_or_default(),
            http_addr: me
                .as_ref()
                .map(|node| node.http_addr.clone())
                .unwrap_or_default(),
            raft_addr: me
                .as_ref()
                .map(|node| node.raft_addr.clone())
                .unwrap_or_default(),
            herald_version: env!("CARGO_PKG_VERSION").into(),
            format_version: self.core.options.backups.format_version,
            taken_at_ms,
            took_ms: 0,
            files: Vec::new(),
            total_bytes: 0,
            groups: 0,
        };
        let store = cluster.store().clone();
        let node_files = self.core.options.backups.node_files.clone();
        let started = Instant::now();
        let manifest = tokio::task::spawn_blocking(move || -> BrokerResult<BackupManifest> {
            std::fs::create_dir_all(&backup_dir).map_err(|error| backup_io(&backup_dir, error))?;
            // Written under a hidden name and renamed once complete: a backup cut short by a
            // crash is never listed or restored.
            let partial = backup_dir.join(format!(".{name}.partial"));
            if partial.exists() {
                std::fs::remove_dir_all(&partial).map_err(|error| backup_io(&partial, error))?;
            }
            store
                .checkpoint(&partial)
                .map_err(|error| BrokerError::Internal(format!("checkpoint: {error}")))?;
            for file in &node_files {
                if let (true, Some(file_name)) = (file.exists(), file.file_name()) {
                    std::fs::copy(file, partial.join(file_name))
                        .map_err(|error| backup_io(file, error))?;
                }
            }
            manifest.groups = store
                .group_ids()
                .map_err(|error| BrokerError::Internal(format!("listing groups: {error}")))?
                .len();
            manifest.files = list_files(&partial).map_err(|error| backup_io(&partial, error))?;
            manifest.total_bytes = manifest.files.iter().map(|file| file.bytes).sum();
            manifest.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            manifest
                .write(&partial)
                .map_err(|error| backup_io(&partial, error))?;
            std::fs::rename(&partial, &target).map_err(|error| backup_io(&target, error))?;
            sync_dir(&backup_dir).map_err(|error| backup_io(&backup_dir, error))?;
            Ok(manifest)
        })
        .await
        .map_err(|error| BrokerError::Internal(format!("backup task: {error}")))??;
        tracing::info!(
            name = %manifest.name,
            bytes = manifest.total_bytes,
            took_ms = manifest.took_ms,
            "took a backup"
        );
        Ok(manifest)
    }

    /// This node's backups, oldest first.
    pub async fn list(&self, node_id: u64) -> BrokerResult<Vec<BackupManifest>> {
        let backup_dir = self.backup_dir(node_id)?;
        tokio::task::spawn_blocking(move || {
            let mut backups = Vec::new();
            let entries = match std::fs::read_dir(&backup_dir) {
                Ok(entries) => entries,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(backups),
                Err(error) => return Err(backup_io(&backup_dir, error)),
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                if hidden || !path.join(MANIFEST_FILE).exists() {
                    continue;
                }
                match BackupManifest::read(&path) {
                    Ok(manifest) => backups.push(manifest),
                    Err(error) => tracing::warn!(%error, "skipping an unreadable backup"),
                }
            }
            backups.sort_by(|left, right| {
                (left.taken_at_ms, &left.name).cmp(&(right.taken_at_ms, &right.name))
            });
            Ok(backups)
        })
        .await
        .map_err(|error| BrokerError::Internal(format!("backup task: {error}")))?
    }

    /// The backup directory, once `node_id` is checked to be this node.
    fn backup_dir(&self, node_id: u64) -> BrokerResult<PathBuf> {
        let cluster = self.core.cluster();
        if node_id != cluster.node_id() {
            let known = cluster
                .membership()
                .nodes_view()
                .into_iter()
                .find(|node| node.id == node_id);
            return Err(match known {
                Some(node) => BrokerError::Conflict {
                    code: ErrorCode::NotThisNode,
                    message: format!(
                        "this is node {}: ask node {node_id} at {} for its backups",
                        cluster.node_id(),
                        node.http_addr
                    ),
                },
                None => BrokerError::NodeNotFound(node_id),
            });
        }
        self.core
            .options
            .backups
            .backup_dir
            .clone()
            .ok_or_else(|| BrokerError::Conflict {
                code: ErrorCode::BackupsDisabled,
                message: "this node has no backup directory".into(),
            })
    }
}

/// A name is one path component a shell need not quote: letters, digits, `.`, `_`, `-`, not
/// starting with `.`.
pub fn validate_backup_name(name: &str) -> BrokerResult<()> {
    let valid = !name.is_empty()
        && name.len() <= MAX_BACKUP_NAME_LEN
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(BrokerError::InvalidRequest(format!(
            "a backup name is 1 to {MAX_BACKUP_NAME_LEN} letters, digits, '.', '_' or '-', not \
             starting with '.'"
        )))
    }
}

fn list_files(dir: &Path) -> std::io::Result<Vec<BackupFile>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if metadata.is_file() && name != MANIFEST_FILE {
            files.push(BackupFile {
                name,
                bytes: metadata.len(),
            });
        }
    }
    files.sort_by(|left, right| left.name.cmp(&right.name));
    Ok(files)
}

fn backup_io(path: &Path, error: std::io::Error) -> BrokerError {
    BrokerError::Internal(format!("backup I/O at {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_names_are_one_plain_path_component() {
        for good in ["nightly", "node-1-1765000000000", "before_upgrade.v2"] {
            assert!(validate_backup_name(good).is_ok(), "{good}");
        }
        let long = "x".repeat(MAX_BACKUP_NAME_LEN + 1);
        for bad in ["", ".hidden", "a/b", "..", "with space", "é", long.as_str()] {
            assert!(validate_backup_name(bad).is_err(), "{bad}");
        }
    }
}
