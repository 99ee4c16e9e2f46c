use super::Cf;

/// One atomic write: puts, deletes and range deletes over any column families. Built by the
/// layers above without touching RocksDB types; applied as one RocksDB `WriteBatch`.
#[derive(Debug, Default)]
pub struct WriteSet {
    pub(super) ops: Vec<WriteOp>,
    pub(super) bytes: usize,
}

#[derive(Debug)]
pub(super) enum WriteOp {
    Put(Cf, Vec<u8>, Vec<u8>),
    Delete(Cf, Vec<u8>),
    DeleteRange(Cf, Vec<u8>, Vec<u8>),
}

impl WriteSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, cf: Cf, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len();
        self.ops.push(WriteOp::Put(cf, key, value));
    }

    pub fn delete(&mut self, cf: Cf, key: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Delete(cf, key.into()));
    }

    /// Deletes keys in `[from, to)`.
    pub fn delete_range(&mut self, cf: Cf, from: impl Into<Vec<u8>>, to: impl Into<Vec<u8>>) {
        self.ops
            .push(WriteOp::DeleteRange(cf, from.into(), to.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Approximate payload size, for metrics.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
