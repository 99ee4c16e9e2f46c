use thiserror::Error;

/// What can go wrong below the raft layer.
#[derive(Debug, Error)]
pub enum StorageError {
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("the storage syncer has stopped")]
    SyncerStopped,
    #[error("corrupt data: {0}")]
    Corrupt(String),
}

impl From<StorageError> for std::io::Error {
    fn from(error: StorageError) -> Self {
        match error {
            StorageError::Io(inner) => inner,
            other => std::io::Error::other(other.to_string()),
        }
    }
}
