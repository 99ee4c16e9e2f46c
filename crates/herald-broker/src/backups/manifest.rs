//! `herald-backup.json`: what a backup directory holds, written last, so a directory without
//! it is not a backup (a copy that was cut short).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The manifest's file name inside a backup directory.
pub const MANIFEST_FILE: &str = "herald-backup.json";

/// The `kind` every manifest carries, so `herald restore` refuses a directory of something else.
pub const MANIFEST_KIND: &str = "herald-backup";

/// The manifest layout; a later release that changes it raises this and reads both.
pub const MANIFEST_VERSION: u32 = 1;

/// One backup of one node: a RocksDB checkpoint of its store plus its cluster secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupManifest {
    /// Always `herald-backup`.
    pub kind: String,
    /// The manifest layout (`MANIFEST_VERSION`).
    pub version: u32,
    /// The backup's name: its directory's name under the node's backup directory.
    pub name: String,
    pub node_id: u64,
    /// The cluster the node belongs to: a whole-cluster restore refuses backups of two.
    pub cluster_id: String,
    pub http_addr: String,
    pub raft_addr: String,
    /// The release that took it (`CARGO_PKG_VERSION`).
    pub herald_version: String,
    /// The on-disk format of the store: a later release migrates it when it starts on it.
    pub format_version: u64,
    /// When the checkpoint was taken, ms since the epoch.
    pub taken_at_ms: u64,
    /// How long taking it took, in ms.
    pub took_ms: u64,
    /// The files of the backup (the manifest aside), with their sizes.
    pub files: Vec<BackupFile>,
    /// The sum of the files' sizes: what a copy to another disk moves.
    pub total_bytes: u64,
    /// The raft groups (metadata and partition replicas) the store holds anything of.
    pub groups: usize,
}

/// A file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupFile {
    pub name: String,
    pub bytes: u64,
}

impl BackupManifest {
    /// Reads the manifest of the backup in `dir`.
    pub fn read(dir: &Path) -> std::io::Result<BackupManifest> {
        let bytes = std::fs::read(dir.join(MANIFEST_FILE))?;
        let manifest: BackupManifest = serde_json::from_slice(&bytes).map_err(|error| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: not a backup manifest: {error}", dir.display()),
            )
        })?;
        if manifest.kind != MANIFEST_KIND || manifest.version != MANIFEST_VERSION {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: a manifest of kind '{}' version {}, this release reads '{MANIFEST_KIND}' \
                     version {MANIFEST_VERSION}",
                    dir.display(),
                    manifest.kind,
                    manifest.version
                ),
            ));
        }
        Ok(manifest)
    }

    /// Writes the manifest into `dir` and syncs it (to a temporary name first: a reader never
    /// sees half of it).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let temporary = dir.join(format!("{MANIFEST_FILE}.tmp"));
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
        }
        std::fs::rename(&temporary, dir.join(MANIFEST_FILE))?;
        sync_dir(dir)
    }
}

/// Syncs a directory, so the names of the files written into it survive a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
