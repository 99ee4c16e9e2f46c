//! Room on the data directory's file system, and the reserve kept for what must still be
//! written when clients may not write any more.
//!
//! RocksDB that runs out of space fails the write and stops taking any (a hard background
//! error: every later write fails until the process restarts), which a client sees as 500s and
//! the node as a raft log it cannot append to. So the node stops taking client data before the
//! file system is full: once the free space falls under `storage.disk_reserve_bytes`, produce
//! requests are refused (507, nothing written) while raft replication, metadata and consumer
//! group commits, flushes and the compactions that free space (retention, a deleted topic) go
//! on writing into the reserve. Writes resume by themselves once the free space is back above
//! the reserve.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one look at the file system answers for: `statvfs` is cheap, but every produce
/// asks.
const RECHECK_AFTER: Duration = Duration::from_millis(200);

/// The file system holding the data directory is under its reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFull {
    pub free_bytes: u64,
    pub reserve_bytes: u64,
}

impl std::fmt::Display for DiskFull {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "the data directory's file system has {} bytes free, under the reserve of {} \
             (storage.disk_reserve_bytes)",
            self.free_bytes, self.reserve_bytes
        )
    }
}

/// Watches the free space of the data directory's file system against the reserve.
#[derive(Debug)]
pub(crate) struct DiskSpace {
    path: PathBuf,
    reserve_bytes: u64,
    /// When the file system was last looked at, and what it said.
    last: Mutex<Option<(Instant, Option<DiskFull>)>>,
}

impl DiskSpace {
    pub(crate) fn new(path: &Path, reserve_bytes: u64) -> DiskSpace {
        DiskSpace {
            path: path.to_path_buf(),
            reserve_bytes,
            last: Mutex::new(None),
        }
    }

    /// `Some` while the free space is under the reserve. A file system that does not answer
    /// counts as having room: refusing every write on a failed `statvfs` would be worse.
    pub(crate) fn full(&self) -> Option<DiskFull> {
        // A panic while holding it cannot leave it inconsistent: it is one value.
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((at, full)) = *last {
            if at.elapsed() < RECHECK_AFTER {
                return full;
            }
        }
        let full = file_system_space(&self.path).and_then(|(_, free_bytes)| {
            (free_bytes < self.reserve_bytes).then_some(DiskFull {
                free_bytes,
                reserve_bytes: self.reserve_bytes,
            })
        });
        if full.is_some() != last.and_then(|(_, before)| before).is_some() {
            match full {
                Some(full) => {
                    tracing::warn!(%full, "refusing produce requests (507) until space is freed")
                }
                None if last.is_some() => {
                    tracing::info!("the data directory has room again: taking produce requests")
                }
                None => {}
            }
        }
        *last = Some((Instant::now(), full));
        full
    }
}

/// Size and space available to this (unprivileged) process of the file system at `path`.
pub(crate) fn file_system_space(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string that outlives the call and `stats` is a
    // properly sized, writable statvfs the call fills in.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return None;
    }
    let block = stats.f_frsize as u64;
    Some((stats.f_blocks as u64 * block, stats.f_bavail as u64 * block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_above_the_free_space_is_full_and_one_below_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (_, free) = file_system_space(dir.path()).expect("statvfs answers");
        assert!(DiskSpace::new(dir.path(), 0).full().is_none());
        let full = DiskSpace::new(dir.path(), u64::MAX).full().expect("full");
        assert_eq!(full.reserve_bytes, u64::MAX);
        // Free space moves with other writers on the machine; it was there a moment ago.
        assert!(full.free_bytes > 0 && full.free_bytes <= free.saturating_mul(2));
        assert!(full.to_string().contains("storage.disk_reserve_bytes"));
    }
}
