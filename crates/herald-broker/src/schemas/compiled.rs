//! Compiled schemas, once per id per node, and the resolution of a schema's references into
//! the source the parsers compile.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::{BrokerError, BrokerResult, ErrorCode};
use herald_domain::schemas::{SchemaFormat, SchemaId, SchemaRegistry, StoredSchema};
use herald_schemas::{CompiledSchema, ResolvedReference, SchemaSource, SchemaType};

/// How deep references may nest (a schema referencing one that references another ...): deep
/// enough for real schemas, and a bound on the work a registration can ask for.
const MAX_REFERENCE_DEPTH: usize = 16;

/// Compiled schemas by id. Never invalidated: an id always names the same schema.
#[derive(Default)]
pub(super) struct CompiledCache {
    by_id: RwLock<HashMap<SchemaId, Arc<CompiledSchema>>>,
}

impl CompiledCache {
    /// The compiled schema of `id`, compiling it on first use; `None` when the registry has no
    /// such id.
    pub(super) fn get(
        &self,
        registry: &SchemaRegistry,
        id: SchemaId,
    ) -> BrokerResult<Option<Arc<CompiledSchema>>> {
        if let Some(hit) = self.by_id.read().get(&id) {
            return Ok(Some(hit.clone()));
        }
        let Some(stored) = registry.schemas.get(&id) else {
            return Ok(None);
        };
        let compiled = Arc::new(compile(registry, stored)?);
        self.by_id.write().insert(id, compiled.clone());
        Ok(Some(compiled))
    }

    /// Keeps a schema compiled for its registration under the id it got.
    pub(super) fn insert(&self, id: SchemaId, compiled: Arc<CompiledSchema>) {
        self.by_id.write().entry(id).or_insert(compiled);
    }
}

pub(super) fn schema_type(format: SchemaFormat) -> SchemaType {
    match format {
        SchemaFormat::Avro => SchemaType::Avro,
        SchemaFormat::Protobuf => SchemaType::Protobuf,
        SchemaFormat::Json => SchemaType::Json,
    }
}

/// Compiles `stored` with its references resolved in `registry`.
pub(super) fn compile(
    registry: &SchemaRegistry,
    stored: &StoredSchema,
) -> BrokerResult<CompiledSchema> {
    let source = source_of(registry, stored, 0)?;
    CompiledSchema::compile(&source).map_err(|error| BrokerError::Schema {
        code: ErrorCode::InvalidSchema,
        message: format!("Invalid schema: {error}"),
    })
}

/// `stored` with every reference replaced by the referenced version's source, recursively.
/// A reference may name a soft-deleted version (a schema registered before the delete still
/// compiles); a new registration's references were checked to be live by the caller.
fn source_of(
    registry: &SchemaRegistry,
    stored: &StoredSchema,
    depth: usize,
) -> BrokerResult<SchemaSource> {
    if depth > MAX_REFERENCE_DEPTH {
        return Err(BrokerError::Schema {
            code: ErrorCode::InvalidSchema,
            message: format!("Invalid schema: references nest deeper than {MAX_REFERENCE_DEPTH}"),
        });
    }
    let mut references = Vec::with_capacity(stored.references.len());
    for reference in &stored.references {
        let referenced = registry
            .version(&reference.subject, reference.version)
            .and_then(|version| registry.schemas.get(&version.schema_id))
            .ok_or_else(|| BrokerError::Schema {
                code: ErrorCode::InvalidSchema,
                message: format!(
                    "Invalid schema: reference '{}' names version {} of subject '{}', which does not exist",
                    reference.name, reference.version, reference.subject
                ),
            })?;
        references.push(ResolvedReference {
            name: reference.name.clone(),
            source: source_of(registry, referenced, depth + 1)?,
        });
    }
    Ok(SchemaSource {
        schema_type: schema_type(stored.format),
        schema: stored.text.clone(),
        references,
    })
}
