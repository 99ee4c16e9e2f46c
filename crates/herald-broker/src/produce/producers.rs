//! Idempotent producer ids (`POST /v1/producers`), handed out by the metadata group so they are
//! unique in the cluster and a name's epochs only grow (see `domain::producers`).

use crate::ProduceService;

use crate::{BrokerError, BrokerResult, ProducerInfo};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_domain::names::{is_internal, validate_name};

impl ProduceService {
    /// Registers a producer: a name gets its id back with the next epoch, which fences the
    /// previous holder of the name; no name gets a fresh id at epoch 0.
    pub async fn init_producer(&self, name: Option<String>) -> BrokerResult<ProducerInfo> {
        if let Some(name) = &name {
            validate_name("producer name", name).map_err(BrokerError::InvalidRequest)?;
            if is_internal(name) {
                return Err(BrokerError::InvalidRequest(format!(
                    "producer name '{name}' is reserved: names starting with '__' are internal"
                )));
            }
        }
        let command = MetadataCommand::InitProducer { name: name.clone() };
        match self.core.cluster().metadata().propose(command).await? {
            MetadataOutcome::ProducerInitialized(registration) => Ok(ProducerInfo {
                producer_id: registration.producer_id,
                producer_epoch: registration.producer_epoch,
                name,
            }),
            MetadataOutcome::Invalid(message) => Err(BrokerError::InvalidRequest(message)),
            other => Err(BrokerError::Internal(format!(
                "unexpected outcome of a producer registration: {other:?}"
            ))),
        }
    }
}
