//! Consistent copies of the store while it runs: a RocksDB checkpoint hard-links the immutable
//! SST and blob files into another directory (copying only the small live files), so a copy of
//! gigabytes takes seconds and next to no space until the live files move on.
//!
//! The copy is taken before a format migration (to roll back to the release that wrote it) and
//! by `herald backup`.

use std::path::Path;

use rocksdb::checkpoint::Checkpoint;

use crate::{StorageError, Store};

impl Store {
    /// Writes a consistent copy of the whole store into `target`, which must not exist yet (it
    /// is created); on the same filesystem the files are hard links. Memtables are flushed
    /// first, so the copy opens without replaying any log.
    pub fn checkpoint(&self, target: &Path) -> Result<(), StorageError> {
        if target.exists() {
            return Err(StorageError::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("checkpoint target {} already exists", target.display()),
            )));
        }
        let checkpoint = Checkpoint::new(&*self.db)?;
        checkpoint.create_checkpoint(target)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cf, Store, StoreOptions, WriteSet};

    #[test]
    fn a_checkpoint_opens_as_the_store_was_when_it_was_taken() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        {
            let store = Store::open(&StoreOptions::new(dir.path().join("live"))).unwrap();
            let mut writes = WriteSet::new();
            writes.put(Cf::Node, b"before".to_vec(), b"1".to_vec());
            store.write(writes, true).unwrap();
            store.checkpoint(&copy).unwrap();
            let mut writes = WriteSet::new();
            writes.put(Cf::Node, b"after".to_vec(), b"2".to_vec());
            store.write(writes, true).unwrap();
            // A second checkpoint into the same place is refused, not merged.
            assert!(store.checkpoint(&copy).is_err());
        }
        let reopened = Store::open(&StoreOptions::new(&copy)).unwrap();
        assert_eq!(
            reopened.get(Cf::Node, b"before").unwrap(),
            Some(b"1".to_vec())
        );
        assert_eq!(reopened.get(Cf::Node, b"after").unwrap(), None);
    }
}
