//! The registry's operations, as Confluent's Schema Registry defines them: reads answer from
//! this node's copy (catching up with the leader before a "not found"), changes are metadata
//! proposals, and a registration is compiled and checked for compatibility here first.

use std::sync::Arc;

use super::compiled::{compile, schema_type};
use super::{
    CheckAgainst, CompatibilityReport, Registered, SchemaService, SubjectSchema, VersionSelector,
};
use crate::{BrokerError, BrokerResult, ErrorCode};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use herald_domain::schemas::{
    validate_subject_name, Compatibility, SchemaCommand, SchemaId, SchemaOutcome, SchemaRegistry,
    StoredSchema, TopicSchemas, MAX_SCHEMA_BYTES, MAX_SCHEMA_REFERENCES,
};
use herald_schemas::compat::{self, CompatibilityLevel};
use herald_schemas::CompiledSchema;

/// How many times a registration checks again after another registration of the same subject
/// got in between its check and its proposal.
const MAX_STALE_RETRIES: usize = 8;

impl SchemaService {
    pub(super) fn state(&self) -> Arc<MetadataState> {
        self.core.cluster().metadata().current()
    }

    /// `lookup` on this node's registry; when it finds nothing, once more after this node
    /// caught up with the metadata leader (a registration through another node a moment ago).
    async fn find<T>(
        &self,
        lookup: impl Fn(&SchemaRegistry) -> BrokerResult<Option<T>>,
    ) -> BrokerResult<Option<T>> {
        if let Some(found) = lookup(&self.state().schemas)? {
            return Ok(Some(found));
        }
        self.barrier.sync(self.core.cluster()).await?;
        lookup(&self.state().schemas)
    }

    /// The registry as of this request, for answers about what changes (subjects, their
    /// versions, `latest`, levels): every change acknowledged through any node before it is
    /// in. The metadata leader applies a change before acknowledging it, so its own state is
    /// current; a follower first catches up with the leader. (Schema ids never change what
    /// they name, so lookups by id only catch up on a miss: see [`Self::find`].)
    async fn fresh(&self) -> BrokerResult<Arc<MetadataState>> {
        let cluster = self.core.cluster();
        if !cluster.metadata().is_leader() {
            self.barrier.sync(cluster).await?;
        }
        Ok(self.state())
    }

    /// `lookup` on the registry as of this request (see [`Self::fresh`]).
    async fn read_fresh<T>(
        &self,
        lookup: impl Fn(&SchemaRegistry) -> BrokerResult<Option<T>>,
    ) -> BrokerResult<Option<T>> {
        lookup(&self.fresh().await?.schemas)
    }

    /// Subject names, sorted; soft-deleted ones too with `deleted`.
    pub async fn subjects(&self, prefix: Option<&str>, deleted: bool) -> BrokerResult<Vec<String>> {
        if let Some(prefix) = prefix.filter(|prefix| !prefix.is_empty()) {
            check_subject(prefix)?;
        }
        Ok(self
            .fresh()
            .await?
            .schemas
            .subjects
            .iter()
            .filter(|(name, subject)| {
                !subject.versions.is_empty()
                    && (deleted || !subject.is_hidden())
                    && prefix.is_none_or(|prefix| name.starts_with(prefix))
            })
            .map(|(name, _)| name.clone())
            .collect())
    }

    /// A subject's version numbers, oldest first.
    pub async fn versions(&self, subject: &str, deleted: bool) -> BrokerResult<Vec<u32>> {
        check_subject(subject)?;
        self.read_fresh(|registry| {
            Ok(registry.subjects.get(subject).and_then(|found| {
                let versions: Vec<u32> = found
                    .versions
                    .iter()
                    .filter(|(_, version)| deleted || !version.deleted)
                    .map(|(number, _)| *number)
                    .collect();
                (!versions.is_empty()).then_some(versions)
            }))
        })
        .await?
        .ok_or_else(|| subject_not_found(subject))
    }

    /// One version of a subject.
    pub async fn version(
        &self,
        subject: &str,
        selector: VersionSelector,
        deleted: bool,
    ) -> BrokerResult<SubjectSchema> {
        check_subject(subject)?;
        let found = self
            .read_fresh(|registry| {
                let Some(found) = registry.subjects.get(subject) else {
                    return Ok(None);
                };
                if found.is_hidden() && !deleted {
                    return Ok(None);
                }
                let number = match selector {
                    VersionSelector::Latest => {
                        let latest = if deleted {
                            found.versions.keys().next_back().copied()
                        } else {
                            found.latest_live().map(|(number, _)| number)
                        };
                        match latest {
                            Some(number) => number,
                            None => return Ok(None),
                        }
                    }
                    VersionSelector::Number(number) => number,
                };
                let version = found
                    .versions
                    .get(&number)
                    .filter(|version| deleted || !version.deleted);
                Ok(Some(version.and_then(|version| {
                    registry
                        .schemas
                        .get(&version.schema_id)
                        .map(|schema| SubjectSchema {
                            subject: subject.to_string(),
                            version: number,
                            id: version.schema_id,
                            schema: schema.clone(),
                        })
                })))
            })
            .await?;
        match found {
            None => Err(subject_not_found(subject)),
            Some(None) => Err(version_not_found(subject, selector)),
            Some(Some(found)) => Ok(found),
        }
    }

    /// The ids of the live schemas that reference a version.
    pub async fn referenced_by(
        &self,
        subject: &str,
        selector: VersionSelector,
    ) -> BrokerResult<Vec<SchemaId>> {
        let version = self.version(subject, selector, true).await?;
        Ok(self
            .state()
            .schemas
            .referrers(subject, Some(version.version)))
    }

    /// The schema an id names.
    pub async fn schema(&self, id: SchemaId) -> BrokerResult<StoredSchema> {
        self.find(|registry| Ok(registry.schemas.get(&id).cloned()))
            .await?
            .ok_or_else(|| schema_not_found(id))
    }

    /// The subjects and versions that hold an id (soft-deleted ones with `deleted`).
    pub async fn schema_versions(
        &self,
        id: SchemaId,
        deleted: bool,
    ) -> BrokerResult<Vec<(String, u32)>> {
        self.find(|registry| {
            if !registry.schemas.contains_key(&id) {
                return Ok(None);
            }
            Ok(Some(
                registry
                    .versions_of(id)
                    .into_iter()
                    .filter(|(_, _, is_deleted)| deleted || !is_deleted)
                    .map(|(subject, version, _)| (subject, version))
                    .collect(),
            ))
        })
        .await?
        .ok_or_else(|| schema_not_found(id))
    }

    /// The compiled schema of an id (compiled once per node).
    pub async fn compiled(&self, id: SchemaId) -> BrokerResult<Arc<CompiledSchema>> {
        let compiled = &self.compiled;
        self.find(|registry| compiled.get(registry, id))
            .await?
            .ok_or_else(|| schema_not_found(id))
    }

    /// Registers a schema under a subject: its id and version, the existing ones when the
    /// subject holds it already. Refused when it does not compile (422 `invalid_schema`) or
    /// breaks the subject's compatibility level (409 `incompatible_schema`).
    pub async fn register(
        &self,
        subject: &str,
        schema: StoredSchema,
        normalize: bool,
    ) -> BrokerResult<Registered> {
        check_subject(subject)?;
        let (schema, compiled) = self.prepare(schema, normalize)?;
        let compiled = Arc::new(compiled);
        for _ in 0..MAX_STALE_RETRIES {
            let state = self.state();
            let registry = &state.schemas;
            if let Some(id) = registry.id_of(&schema) {
                if let Some(version) = registry.live_version_with(subject, id) {
                    return Ok(Registered { id, version });
                }
            }
            let checked_against = registry
                .subjects
                .get(subject)
                .and_then(|found| found.latest_live())
                .map(|(version, _)| version);
            let report = self.check_with(registry, subject, &compiled, CheckAgainst::Level)?;
            if !report.is_compatible() {
                return Err(BrokerError::Schema {
                    code: ErrorCode::IncompatibleSchema,
                    message: incompatible_message(registry.compatibility_of(subject), &report),
                });
            }
            let command = SchemaCommand::Register {
                subject: subject.to_string(),
                schema: schema.clone(),
                checked_against,
            };
            match self.propose(command).await? {
                SchemaOutcome::Registered { id, version } => {
                    self.compiled.insert(id, compiled);
                    return Ok(Registered { id, version });
                }
                SchemaOutcome::Stale => continue,
                SchemaOutcome::ReferenceNotFound(reference) => {
                    return Err(BrokerError::Schema {
                        code: ErrorCode::InvalidSchema,
                        message: format!(
                            "Invalid schema: reference '{}' names version {} of subject '{}', which does not exist",
                            reference.name, reference.version, reference.subject
                        ),
                    })
                }
                other => return Err(unexpected(other)),
            }
        }
        Err(BrokerError::Unavailable(format!(
            "subject '{subject}' kept changing while this registration was checked; retry"
        )))
    }

    /// The version of a subject that holds a schema (Confluent's `POST /subjects/{subject}`).
    pub async fn lookup(
        &self,
        subject: &str,
        schema: StoredSchema,
        normalize: bool,
        deleted: bool,
    ) -> BrokerResult<SubjectSchema> {
        check_subject(subject)?;
        let (schema, _) = self.prepare(schema, normalize)?;
        let found = self
            .read_fresh(|registry| {
                let Some(found) = registry.subjects.get(subject) else {
                    return Ok(None);
                };
                if found.is_hidden() && !deleted {
                    return Ok(None);
                }
                let Some(id) = registry.id_of(&schema) else {
                    return Ok(Some(None));
                };
                let version = found
                    .versions
                    .iter()
                    .rev()
                    .find(|(_, version)| version.schema_id == id && (deleted || !version.deleted))
                    .map(|(number, _)| SubjectSchema {
                        subject: subject.to_string(),
                        version: *number,
                        id,
                        schema: schema.clone(),
                    });
                Ok(Some(version))
            })
            .await?;
        match found {
            None => Err(subject_not_found(subject)),
            Some(None) => Err(BrokerError::Schema {
                code: ErrorCode::SchemaNotFound,
                message: "Schema not found".into(),
            }),
            Some(Some(found)) => Ok(found),
        }
    }

    /// Soft-deletes a subject (or removes a soft-deleted one for good): the versions deleted.
    pub async fn delete_subject(&self, subject: &str, permanent: bool) -> BrokerResult<Vec<u32>> {
        // Catch up first: deleting what another node registered a moment ago must find it.
        self.versions(subject, true).await?;
        let command = SchemaCommand::DeleteSubject {
            subject: subject.to_string(),
            permanent,
        };
        match self.propose(command).await? {
            SchemaOutcome::Deleted { versions } => Ok(versions),
            other => Err(refusal(subject, None, other)),
        }
    }

    /// Soft-deletes a version (or removes a soft-deleted one for good): its number.
    pub async fn delete_version(
        &self,
        subject: &str,
        selector: VersionSelector,
        permanent: bool,
    ) -> BrokerResult<u32> {
        // `latest` is resolved here, against live versions (as Confluent's does); a permanent
        // delete of `latest` is refused there too, since the latest live version is not
        // soft-deleted.
        let version = self.version(subject, selector, permanent).await?.version;
        let command = SchemaCommand::DeleteVersion {
            subject: subject.to_string(),
            version,
            permanent,
        };
        match self.propose(command).await? {
            SchemaOutcome::Deleted { .. } => Ok(version),
            other => Err(refusal(subject, Some(selector), other)),
        }
    }

    /// A subject's level (with `default_to_global`, the registry's when it has none), or the
    /// registry's (`subject: None`).
    pub async fn compatibility(
        &self,
        subject: Option<&str>,
        default_to_global: bool,
    ) -> BrokerResult<Compatibility> {
        let state = self.fresh().await?;
        let registry = &state.schemas;
        match subject {
            None => Ok(registry.compatibility.unwrap_or_default()),
            Some(subject) => {
                check_subject(subject)?;
                let own = registry
                    .subjects
                    .get(subject)
                    .and_then(|found| found.compatibility);
                match own {
                    Some(level) => Ok(level),
                    None if default_to_global => Ok(registry.compatibility_of(subject)),
                    None => Err(BrokerError::Schema {
                        code: ErrorCode::SubjectLevelNotSet,
                        message: format!(
                            "Subject '{subject}' does not have subject-level compatibility configured"
                        ),
                    }),
                }
            }
        }
    }

    /// Sets a subject's level, or the registry's.
    pub async fn set_compatibility(
        &self,
        subject: Option<&str>,
        level: Compatibility,
    ) -> BrokerResult<()> {
        if let Some(subject) = subject {
            check_subject(subject)?;
        }
        let command = SchemaCommand::SetCompatibility {
            subject: subject.map(str::to_string),
            level: Some(level),
        };
        match self.propose(command).await? {
            SchemaOutcome::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Clears a subject's level (it follows the registry's again), or resets the registry's
    /// to the default: the level it had.
    pub async fn clear_compatibility(&self, subject: Option<&str>) -> BrokerResult<Compatibility> {
        let before = self.compatibility(subject, false).await?;
        let command = SchemaCommand::SetCompatibility {
            subject: subject.map(str::to_string),
            level: None,
        };
        match self.propose(command).await? {
            SchemaOutcome::Done => Ok(before),
            SchemaOutcome::SubjectLevelNotSet => Err(BrokerError::Schema {
                code: ErrorCode::SubjectLevelNotSet,
                message: format!(
                    "Subject '{}' does not have subject-level compatibility configured",
                    subject.unwrap_or_default()
                ),
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Whether a schema could be registered under a subject (`CheckAgainst::Level`), or is
    /// compatible with one version of it under the subject's level.
    pub async fn check(
        &self,
        subject: &str,
        schema: StoredSchema,
        against: CheckAgainst,
    ) -> BrokerResult<CompatibilityReport> {
        check_subject(subject)?;
        let (_, compiled) = self.prepare(schema, false)?;
        if let CheckAgainst::Version(selector) = against {
            // A missing subject or version is 404, as Confluent's.
            self.version(subject, selector, false).await?;
        } else {
            // A subject registered a moment ago through another node is checked against.
            let _ = self.versions(subject, false).await;
        }
        let state = self.state();
        self.check_with(&state.schemas, subject, &compiled, against)
    }

    /// The subjects a topic's keys and values follow.
    pub fn topic_schemas(&self, topic: &str) -> TopicSchemas {
        self.state()
            .schemas
            .topics
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }

    /// Sets the subjects a topic's keys and values follow.
    pub async fn bind_topic(&self, topic: &str, schemas: TopicSchemas) -> BrokerResult<()> {
        for subject in [&schemas.key_subject, &schemas.value_subject]
            .into_iter()
            .flatten()
        {
            check_subject(subject)?;
        }
        let command = SchemaCommand::BindTopic {
            topic: topic.to_string(),
            schemas,
        };
        match self.propose(command).await? {
            SchemaOutcome::Done => Ok(()),
            SchemaOutcome::TopicNotFound => Err(BrokerError::TopicNotFound(topic.to_string())),
            other => Err(unexpected(other)),
        }
    }

    /// Checks the limits, compiles (422 when it does not), and with `normalize` replaces the
    /// text with the canonical form, which is what is then stored and compared.
    fn prepare(
        &self,
        mut schema: StoredSchema,
        normalize: bool,
    ) -> BrokerResult<(StoredSchema, CompiledSchema)> {
        if schema.text.len() > MAX_SCHEMA_BYTES {
            return Err(invalid_schema(format!(
                "the schema is {} bytes, over the registry's limit of {MAX_SCHEMA_BYTES}",
                schema.text.len()
            )));
        }
        if schema.references.len() > MAX_SCHEMA_REFERENCES {
            return Err(invalid_schema(format!(
                "a schema has at most {MAX_SCHEMA_REFERENCES} references"
            )));
        }
        for reference in &schema.references {
            if reference.version == 0 || reference.version > i32::MAX as u32 {
                return Err(invalid_schema(format!(
                    "reference '{}' names version {}, which is not a version",
                    reference.name, reference.version
                )));
            }
            validate_subject_name(&reference.subject).map_err(|reason| {
                invalid_schema(format!("reference '{}': {reason}", reference.name))
            })?;
        }
        let state = self.state();
        let compiled = compile(&state.schemas, &schema)?;
        if compiled.schema_type() != schema_type(schema.format) {
            return Err(unexpected_type());
        }
        if normalize {
            schema.text = compiled.canonical();
        }
        Ok((schema, compiled))
    }

    fn check_with(
        &self,
        registry: &SchemaRegistry,
        subject: &str,
        candidate: &CompiledSchema,
        against: CheckAgainst,
    ) -> BrokerResult<CompatibilityReport> {
        let level = registry.compatibility_of(subject);
        let Some(found) = registry.subjects.get(subject) else {
            return Ok(CompatibilityReport {
                messages: Vec::new(),
            });
        };
        let ids: Vec<SchemaId> = match against {
            CheckAgainst::Level => found.live_versions().map(|(_, id)| id).collect(),
            CheckAgainst::Version(VersionSelector::Latest) => {
                found.latest_live().map(|(_, id)| id).into_iter().collect()
            }
            CheckAgainst::Version(VersionSelector::Number(number)) => found
                .versions
                .get(&number)
                .map(|version| version.schema_id)
                .into_iter()
                .collect(),
        };
        let mut previous = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(compiled) = self.compiled.get(registry, id)? {
                previous.push(compiled);
            }
        }
        let previous: Vec<&CompiledSchema> = previous.iter().map(Arc::as_ref).collect();
        Ok(CompatibilityReport {
            messages: compat::check(level_of(level), candidate, &previous),
        })
    }

    async fn propose(&self, command: SchemaCommand) -> BrokerResult<SchemaOutcome> {
        match self
            .core
            .cluster()
            .metadata()
            .propose(MetadataCommand::Schemas(command))
            .await?
        {
            MetadataOutcome::Schemas(outcome) => Ok(outcome),
            other => Err(BrokerError::Internal(format!(
                "unexpected answer to a schema registry command: {other:?}"
            ))),
        }
    }
}

fn level_of(level: Compatibility) -> CompatibilityLevel {
    match level {
        Compatibility::Backward => CompatibilityLevel::Backward,
        Compatibility::BackwardTransitive => CompatibilityLevel::BackwardTransitive,
        Compatibility::Forward => CompatibilityLevel::Forward,
        Compatibility::ForwardTransitive => CompatibilityLevel::ForwardTransitive,
        Compatibility::Full => CompatibilityLevel::Full,
        Compatibility::FullTransitive => CompatibilityLevel::FullTransitive,
        Compatibility::None => CompatibilityLevel::None,
    }
}

fn incompatible_message(level: Compatibility, report: &CompatibilityReport) -> String {
    format!(
        "Schema being registered is incompatible with an earlier schema for subject under level {}: {}",
        level.as_str(),
        report.messages.join("; ")
    )
}

fn check_subject(subject: &str) -> BrokerResult<()> {
    validate_subject_name(subject).map_err(BrokerError::InvalidRequest)
}

fn invalid_schema(reason: String) -> BrokerError {
    BrokerError::Schema {
        code: ErrorCode::InvalidSchema,
        message: format!("Invalid schema: {reason}"),
    }
}

fn unexpected_type() -> BrokerError {
    BrokerError::Internal("the schema compiled as another type than it was given".into())
}

fn subject_not_found(subject: &str) -> BrokerError {
    BrokerError::Schema {
        code: ErrorCode::SubjectNotFound,
        message: format!("Subject '{subject}' not found."),
    }
}

fn version_not_found(subject: &str, selector: VersionSelector) -> BrokerError {
    let version = match selector {
        VersionSelector::Latest => "latest".to_string(),
        VersionSelector::Number(number) => number.to_string(),
    };
    BrokerError::Schema {
        code: ErrorCode::VersionNotFound,
        message: format!("Version {version} not found for subject '{subject}'."),
    }
}

fn schema_not_found(id: SchemaId) -> BrokerError {
    BrokerError::Schema {
        code: ErrorCode::SchemaNotFound,
        message: format!("Schema {id} not found"),
    }
}

/// A delete's refusal, as Confluent words it.
fn refusal(
    subject: &str,
    selector: Option<VersionSelector>,
    outcome: SchemaOutcome,
) -> BrokerError {
    let (code, message) = match outcome {
        SchemaOutcome::SubjectNotFound => return subject_not_found(subject),
        SchemaOutcome::VersionNotFound => {
            return version_not_found(subject, selector.unwrap_or(VersionSelector::Latest))
        }
        SchemaOutcome::SubjectSoftDeleted => (
            ErrorCode::SubjectSoftDeleted,
            format!("Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"),
        ),
        SchemaOutcome::SubjectNotSoftDeleted => (
            ErrorCode::SubjectNotSoftDeleted,
            format!("Subject '{subject}' was not deleted first before being permanently deleted"),
        ),
        SchemaOutcome::VersionSoftDeleted => (
            ErrorCode::VersionSoftDeleted,
            format!("Subject '{subject}' Version was soft deleted. Set permanent=true to delete permanently"),
        ),
        SchemaOutcome::VersionNotSoftDeleted => (
            ErrorCode::VersionNotSoftDeleted,
            format!("Subject '{subject}' Version was not deleted first before being permanently deleted"),
        ),
        SchemaOutcome::Referenced { by } => (
            ErrorCode::SchemaReferenced,
            format!("One or more references exist to the schema {{subject={subject}}}: schema ids {by:?} reference it"),
        ),
        other => return unexpected(other),
    };
    BrokerError::Schema { code, message }
}

fn unexpected(outcome: SchemaOutcome) -> BrokerError {
    BrokerError::Internal(format!(
        "unexpected outcome of a schema registry command: {outcome:?}"
    ))
}
