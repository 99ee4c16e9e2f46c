//! openraft's storage conformance suite, run against Herald's log store and state machine on
//! a real RocksDB in a temporary directory.

use herald_domain::RaftGroupId;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

use super::log_store::LogStore;
use super::state_machine::GroupStateMachine;
use super::types::TypeConfig;
use crate::partition::applier::PartitionApplier;
use herald_storage::{Store, StoreOptions};

struct RocksBuilder;

fn storage_error<E: std::error::Error + 'static>(error: &E) -> StorageError<TypeConfig> {
    StorageError::read(openraft::errors::ErrorSource::from_error(error))
}

impl StoreBuilder<TypeConfig, LogStore, GroupStateMachine<PartitionApplier>, tempfile::TempDir>
    for RocksBuilder
{
    async fn build(
        &self,
    ) -> Result<
        (
            tempfile::TempDir,
            LogStore,
            GroupStateMachine<PartitionApplier>,
        ),
        StorageError<TypeConfig>,
    > {
        let dir = tempfile::tempdir().map_err(|error| storage_error(&error))?;
        let store =
            Store::open(&StoreOptions::new(dir.path())).map_err(|error| storage_error(&error))?;
        // A group id other than 0 checks that keys are really scoped by group.
        let group = RaftGroupId::new(42);
        let state_machine =
            GroupStateMachine::open(group, store.clone(), PartitionApplier::new(group))
                .await
                .map_err(|error| storage_error(&error))?;
        Ok((
            dir,
            LogStore::new(group, store, Default::default()),
            state_machine,
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_store_passes_openraft_storage_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(RocksBuilder).await
}
