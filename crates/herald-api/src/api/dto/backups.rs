//! Backup DTOs: `/v1/cluster/nodes/{id}/backups`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::broker::backups::manifest::{BackupFile, BackupManifest};

/// `POST /v1/cluster/nodes/{id}/backups`: the backup to take. The body may be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "nightly-2026-12-06"}))]
#[schema(as = TakeBackup)]
pub struct TakeBackupDto {
    /// The backup's name: 1 to 100 letters, digits, `.`, `_` or `-`, not starting with `.`
    /// [default: `node-<id>-<ms since the epoch>`].
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    pub name: Option<String>,
}

/// One backup of one node: a consistent copy of its store and cluster secret, in a directory
/// named `name` under the node's `storage.backup_dir`. `herald restore` rebuilds a node or a
/// cluster from such copies (docs/operations.md, "Backup and restore").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = Backup)]
pub struct BackupDto {
    pub name: String,
    pub node_id: u64,
    pub cluster_id: String,
    pub http_addr: String,
    pub raft_addr: String,
    /// The release that took it.
    pub herald_version: String,
    /// The on-disk format of the copy; a later release migrates it when it starts on it.
    pub format_version: u64,
    /// When it was taken, in ms since the epoch.
    pub taken_at_ms: u64,
    /// How long taking it took, in ms.
    pub took_ms: u64,
    /// Its files (the manifest aside) and their sizes.
    pub files: Vec<BackupFileDto>,
    /// The sum of the files' sizes.
    pub total_bytes: u64,
    /// The raft groups (metadata and partition replicas) it holds anything of.
    pub groups: usize,
}

/// A file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = BackupFile)]
pub struct BackupFileDto {
    pub name: String,
    pub bytes: u64,
}

/// `GET /v1/cluster/nodes/{id}/backups`: the node's backups, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = BackupList)]
pub struct BackupListDto {
    pub backups: Vec<BackupDto>,
}

impl From<BackupFile> for BackupFileDto {
    fn from(file: BackupFile) -> Self {
        BackupFileDto {
            name: file.name,
            bytes: file.bytes,
        }
    }
}

impl From<BackupManifest> for BackupDto {
    fn from(manifest: BackupManifest) -> Self {
        BackupDto {
            name: manifest.name,
            node_id: manifest.node_id,
            cluster_id: manifest.cluster_id,
            http_addr: manifest.http_addr,
            raft_addr: manifest.raft_addr,
            herald_version: manifest.herald_version,
            format_version: manifest.format_version,
            taken_at_ms: manifest.taken_at_ms,
            took_ms: manifest.took_ms,
            files: manifest.files.into_iter().map(Into::into).collect(),
            total_bytes: manifest.total_bytes,
            groups: manifest.groups,
        }
    }
}
