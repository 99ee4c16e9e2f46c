//! The schema registry (`docs/schemas.md`): Confluent Schema Registry's operations over the
//! registry replicated in the metadata group (`herald_domain::schemas`).
//!
//! The domain keeps ids, subjects and versions; this service does what needs the parsers
//! (`herald_schemas`): it compiles a schema before it is registered (a schema that does not
//! parse is never stored), checks compatibility against the subject's earlier versions, and
//! keeps every compiled schema in a cache by id, so validating and decoding messages parse a
//! schema once per node, not once per message. An id always names the same schema (ids are
//! never reused), so a cached entry never goes stale.

mod barrier;
mod compiled;
mod decoding;
mod registry;
mod types;
mod validation;

pub use decoding::{Decoded, DecodedWith, MessageDecoder};
pub use types::*;
pub(crate) use validation::{Part, Payload, Refusal, TopicValidator};

use std::sync::Arc;

use crate::broker_core::Core;
use barrier::MetadataBarrier;
use compiled::CompiledCache;

/// The schema registry's operations, on this node's copy of the replicated registry.
#[derive(Clone)]
pub struct SchemaService {
    core: Arc<Core>,
    compiled: Arc<CompiledCache>,
    barrier: Arc<MetadataBarrier>,
}

impl SchemaService {
    pub(crate) fn new(core: Arc<Core>) -> SchemaService {
        SchemaService {
            core,
            compiled: Arc::new(CompiledCache::default()),
            barrier: Arc::new(MetadataBarrier::default()),
        }
    }
}
