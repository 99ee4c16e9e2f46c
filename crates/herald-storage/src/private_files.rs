//! The data directory is the node's alone: mode 0700, every file in it 0600, whatever the
//! umask the node was started with.
//!
//! It holds what other local users must not read: the replicated metadata (OAuth2 clients'
//! secret hashes, the sealed signing keys, the policy), every message, the bootstrap admin's
//! credentials and, by default, the cluster secret. RocksDB creates its files itself with mode
//! 0644 filtered by the umask, so the node sets its umask to 077 before it creates anything
//! ([`restrict_new_files`]), and on every start it takes away what other users may do to the
//! directory and everything under it ([`make_private`]): a directory an older version (or a
//! copy, a restore, a `chmod -R`) left open is closed again, with a warning, since what was in
//! it may have been read. A directory the node cannot close (owned by another user) stops it.

use std::path::{Path, PathBuf};

use super::StorageError;

/// What [`make_private`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Closed {
    /// Paths that were open to other users (group or others had a permission), now closed.
    pub paths: Vec<PathBuf>,
}

/// Makes every file the process creates from now on its owner's alone (umask 077). Set once at
/// the start of `herald serve`, before any thread or file exists; harmless to repeat.
pub fn restrict_new_files() {
    #[cfg(unix)]
    {
        // SAFETY: umask(2) cannot fail and touches nothing but the process's file mode mask.
        unsafe {
            libc::umask(0o077);
        }
    }
}

/// Creates `dir` (and missing parents) with mode 0700 if it does not exist, then takes group
/// and other permissions away from it and from everything under it. Symbolic links are left
/// alone and not followed. Answers what was open before.
pub fn make_private(dir: &Path) -> Result<Closed, StorageError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let mut closed = Closed::default();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(path) = pending.pop() {
            let metadata = std::fs::symlink_metadata(&path)?;
            if metadata.file_type().is_symlink() {
                continue;
            }
            close(&path, &metadata, &mut closed)?;
            if metadata.is_dir() {
                for entry in std::fs::read_dir(&path)? {
                    pending.push(entry?.path());
                }
            }
        }
        Ok(closed)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)?;
        Ok(Closed::default())
    }
}

#[cfg(unix)]
fn close(
    path: &Path,
    metadata: &std::fs::Metadata,
    closed: &mut Closed,
) -> Result<(), StorageError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode();
    if mode & 0o077 == 0 {
        return Ok(());
    }
    let private = mode & !0o077;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(private)).map_err(|error| {
        StorageError::Io(std::io::Error::new(
            error.kind(),
            format!(
                "{} is open to other users (mode {:o}) and could not be made private: {error}",
                path.display(),
                mode & 0o777
            ),
        ))
    })?;
    closed.paths.push(path.to_path_buf());
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_new_directory_is_created_private_with_its_parents() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a").join("data");
        let closed = make_private(&dir).unwrap();
        assert!(closed.paths.is_empty());
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn an_open_directory_and_its_files_are_closed_and_reported() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub").join("file"), b"x").unwrap();
        std::fs::write(dir.join("private"), b"x").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.join("sub"), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(
            dir.join("sub").join("file"),
            std::fs::Permissions::from_mode(0o664),
        )
        .unwrap();
        std::fs::set_permissions(dir.join("private"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        // A link to something outside is neither followed nor changed.
        let outside = root.path().join("outside");
        std::fs::write(&outside, b"x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();

        let mut closed = make_private(&dir).unwrap().paths;
        closed.sort();
        assert_eq!(
            closed,
            vec![dir.clone(), dir.join("sub"), dir.join("sub").join("file")]
        );
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("sub")), 0o700);
        assert_eq!(mode(&dir.join("sub").join("file")), 0o600);
        assert_eq!(mode(&dir.join("private")), 0o600);
        assert_eq!(mode(&outside), 0o644);
        assert!(make_private(&dir).unwrap().paths.is_empty());
    }
}
