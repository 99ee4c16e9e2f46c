//! The schema registry's replicated state (`docs/schemas.md`): schemas with cluster-wide ids,
//! subjects holding numbered versions of them, compatibility levels, and which subjects a
//! topic's keys and values must follow.
//!
//! It lives in the metadata group, beside the topics, because a schema id must mean the same
//! schema on every node at once: a producer validated through one node and a reader decoding
//! through another look the id up in the same replicated map. Registrations are rare, so the
//! whole state is small and republished with the metadata.
//!
//! The semantics are Confluent Schema Registry's, which every Confluent serializer relies on:
//! the same schema registered twice (anywhere) has one id; versions of a subject count from 1
//! and are never reused while the subject lives; a delete is soft first (the versions are
//! hidden, their ids still resolve) and permanent only after that.
//!
//! Compatibility is checked by the proposer (it needs the parsers, which the domain does not
//! have); [`SchemaCommand::Register`] names the latest version it checked against, and the
//! apply refuses the registration as [`SchemaOutcome::Stale`] when another registration got
//! in first, so two concurrent registrations can never both skip a check.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A schema's id: cluster-wide, stable, shared by every subject that registers the same schema.
pub type SchemaId = u32;

/// The most references one schema may have.
pub const MAX_SCHEMA_REFERENCES: usize = 100;
/// The longest schema text the registry stores (bytes).
pub const MAX_SCHEMA_BYTES: usize = 1024 * 1024;
/// The longest subject name (characters).
pub const MAX_SUBJECT_CHARS: usize = 255;

/// A schema's language.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SchemaFormat {
    /// Confluent's default when a registration names no type.
    #[default]
    Avro,
    Protobuf,
    Json,
}

impl SchemaFormat {
    /// The name Confluent's API uses (`schemaType`).
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaFormat::Avro => "AVRO",
            SchemaFormat::Protobuf => "PROTOBUF",
            SchemaFormat::Json => "JSON",
        }
    }

    pub fn parse(name: &str) -> Option<SchemaFormat> {
        match name {
            "AVRO" => Some(SchemaFormat::Avro),
            "PROTOBUF" => Some(SchemaFormat::Protobuf),
            "JSON" => Some(SchemaFormat::Json),
            _ => None,
        }
    }
}

/// How a subject's new versions must relate to its earlier ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Compatibility {
    /// Readers of the new version read data of the latest one. Confluent's default.
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
    None,
}

impl Compatibility {
    pub const ALL: [Compatibility; 7] = [
        Compatibility::Backward,
        Compatibility::BackwardTransitive,
        Compatibility::Forward,
        Compatibility::ForwardTransitive,
        Compatibility::Full,
        Compatibility::FullTransitive,
        Compatibility::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Compatibility::Backward => "BACKWARD",
            Compatibility::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Compatibility::Forward => "FORWARD",
            Compatibility::ForwardTransitive => "FORWARD_TRANSITIVE",
            Compatibility::Full => "FULL",
            Compatibility::FullTransitive => "FULL_TRANSITIVE",
            Compatibility::None => "NONE",
        }
    }

    pub fn parse(name: &str) -> Option<Compatibility> {
        Compatibility::ALL
            .into_iter()
            .find(|level| level.as_str().eq_ignore_ascii_case(name))
    }
}

/// A schema naming another subject's version (an Avro named type, an imported `.proto` file,
/// a JSON Schema `$ref`) by `name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// A schema as registered. Two registrations of equal ones (format, text and references) get
/// one id, as Confluent's do.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoredSchema {
    pub format: SchemaFormat,
    pub text: String,
    pub references: Vec<SchemaReference>,
}

/// One version of a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectVersion {
    pub schema_id: SchemaId,
    /// Soft-deleted: hidden from listings and lookups, its id still resolves.
    pub deleted: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub versions: BTreeMap<u32, SubjectVersion>,
    /// Its own level; `None` follows the registry's.
    pub compatibility: Option<Compatibility>,
}

impl Subject {
    /// Its versions that are not soft-deleted, oldest first.
    pub fn live_versions(&self) -> impl Iterator<Item = (u32, SchemaId)> + '_ {
        self.versions
            .iter()
            .filter(|(_, version)| !version.deleted)
            .map(|(number, version)| (*number, version.schema_id))
    }

    pub fn latest_live(&self) -> Option<(u32, SchemaId)> {
        self.live_versions().last()
    }

    /// Whether it has no live version (never registered, or soft-deleted whole).
    pub fn is_hidden(&self) -> bool {
        self.latest_live().is_none()
    }
}

/// Which subjects a topic's keys and values follow (`key_subject`, `value_subject` in its
/// config). Kept here rather than in the topic's config, whose encoding is frozen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSchemas {
    pub key_subject: Option<String>,
    pub value_subject: Option<String>,
}

impl TopicSchemas {
    pub fn is_empty(&self) -> bool {
        self.key_subject.is_none() && self.value_subject.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaRegistry {
    pub schemas: BTreeMap<SchemaId, StoredSchema>,
    pub subjects: BTreeMap<String, Subject>,
    /// The next new schema's id. Ids are never reused, even after a permanent delete: a reader
    /// of an old message must not decode it with another schema.
    pub next_id: SchemaId,
    /// The registry's level; `None` is [`Compatibility::default`].
    pub compatibility: Option<Compatibility>,
    pub topics: BTreeMap<String, TopicSchemas>,
}

impl Default for SchemaRegistry {
    fn default() -> Self {
        SchemaRegistry {
            schemas: BTreeMap::new(),
            subjects: BTreeMap::new(),
            next_id: 1,
            compatibility: None,
            topics: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SchemaCommand {
    /// Registers `schema` under `subject` (creating it), unless it is there already. The
    /// proposer checked compatibility against the subject's latest live version
    /// `checked_against` (`None`: it had none); a different latest now is
    /// [`SchemaOutcome::Stale`].
    Register {
        subject: String,
        schema: StoredSchema,
        checked_against: Option<u32>,
    },
    /// Soft-deletes a version, or removes a soft-deleted one for good (`permanent`).
    DeleteVersion {
        subject: String,
        version: u32,
        permanent: bool,
    },
    /// Soft-deletes every version of a subject, or removes a soft-deleted subject for good.
    DeleteSubject { subject: String, permanent: bool },
    /// Sets (`Some`) or clears (`None`) a subject's level, or the registry's (`subject: None`).
    SetCompatibility {
        subject: Option<String>,
        level: Option<Compatibility>,
    },
    /// Sets which subjects a topic's keys and values follow (all `None`: none).
    BindTopic {
        topic: String,
        schemas: TopicSchemas,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SchemaOutcome {
    Registered {
        id: SchemaId,
        version: u32,
    },
    /// The subject's latest version is no longer the one the proposer checked against.
    Stale,
    /// The versions a delete removed (or hid).
    Deleted {
        versions: Vec<u32>,
    },
    Done,
    SubjectNotFound,
    VersionNotFound,
    /// The subject (or version) is soft-deleted already: a soft delete again finds nothing.
    SubjectSoftDeleted,
    VersionSoftDeleted,
    /// A permanent delete needs a soft delete first.
    SubjectNotSoftDeleted,
    VersionNotSoftDeleted,
    /// Live schemas reference what a delete would remove.
    Referenced {
        by: Vec<SchemaId>,
    },
    /// A reference names a subject version that does not exist (or is deleted).
    ReferenceNotFound(SchemaReference),
    TopicNotFound,
    SubjectLevelNotSet,
}

impl SchemaRegistry {
    /// The level that governs `subject`: its own, else the registry's.
    pub fn compatibility_of(&self, subject: &str) -> Compatibility {
        self.subjects
            .get(subject)
            .and_then(|subject| subject.compatibility)
            .or(self.compatibility)
            .unwrap_or_default()
    }

    /// The id an equal schema has, if any.
    pub fn id_of(&self, schema: &StoredSchema) -> Option<SchemaId> {
        self.schemas
            .iter()
            .find(|(_, stored)| *stored == schema)
            .map(|(id, _)| *id)
    }

    /// The live version of `subject` that holds `schema_id`.
    pub fn live_version_with(&self, subject: &str, schema_id: SchemaId) -> Option<u32> {
        self.subjects.get(subject).and_then(|subject| {
            subject
                .live_versions()
                .find(|(_, id)| *id == schema_id)
                .map(|(version, _)| version)
        })
    }

    /// The schema a subject version holds (soft-deleted ones included).
    pub fn version(&self, subject: &str, version: u32) -> Option<SubjectVersion> {
        self.subjects.get(subject)?.versions.get(&version).copied()
    }

    /// The subjects and versions that hold `schema_id`.
    pub fn versions_of(&self, schema_id: SchemaId) -> Vec<(String, u32, bool)> {
        let mut found = Vec::new();
        for (name, subject) in &self.subjects {
            for (number, version) in &subject.versions {
                if version.schema_id == schema_id {
                    found.push((name.clone(), *number, version.deleted));
                }
            }
        }
        found
    }

    /// The topics bound to `subject`.
    pub fn topics_using(&self, subject: &str) -> Vec<String> {
        self.topics
            .iter()
            .filter(|(_, schemas)| {
                schemas.key_subject.as_deref() == Some(subject)
                    || schemas.value_subject.as_deref() == Some(subject)
            })
            .map(|(topic, _)| topic.clone())
            .collect()
    }

    /// Live schemas (held by a live version) whose references name `subject` (at `version`, or
    /// at any version), ascending.
    pub fn referrers(&self, subject: &str, version: Option<u32>) -> Vec<SchemaId> {
        let live: BTreeSet<SchemaId> = self
            .subjects
            .values()
            .flat_map(|subject| subject.live_versions().map(|(_, id)| id))
            .collect();
        live.into_iter()
            .filter(|id| {
                self.schemas.get(id).is_some_and(|schema| {
                    schema.references.iter().any(|reference| {
                        reference.subject == subject
                            && version.is_none_or(|version| reference.version == version)
                    })
                })
            })
            .collect()
    }

    /// Forgets schemas no version holds any more (their ids stay retired: `next_id` only
    /// grows).
    fn collect_garbage(&mut self) {
        let held: BTreeSet<SchemaId> = self
            .subjects
            .values()
            .flat_map(|subject| subject.versions.values().map(|version| version.schema_id))
            .collect();
        self.schemas.retain(|id, _| held.contains(id));
    }

    /// `topic` was deleted: it follows no subject any more.
    pub fn forget_topic(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// Applies `command`. `topic_exists` answers whether a topic exists (the metadata's topics
    /// are beside this state, not in it).
    pub fn apply(
        &mut self,
        command: &SchemaCommand,
        topic_exists: impl Fn(&str) -> bool,
    ) -> SchemaOutcome {
        match command {
            SchemaCommand::Register {
                subject,
                schema,
                checked_against,
            } => self.register(subject, schema, *checked_against),
            SchemaCommand::DeleteVersion {
                subject,
                version,
                permanent,
            } => self.delete_version(subject, *version, *permanent),
            SchemaCommand::DeleteSubject { subject, permanent } => {
                self.delete_subject(subject, *permanent)
            }
            SchemaCommand::SetCompatibility { subject, level } => match subject {
                None => {
                    self.compatibility = *level;
                    SchemaOutcome::Done
                }
                Some(name) => {
                    if level.is_none()
                        && self
                            .subjects
                            .get(name)
                            .is_none_or(|subject| subject.compatibility.is_none())
                    {
                        return SchemaOutcome::SubjectLevelNotSet;
                    }
                    // A level may be set before the subject's first version (Confluent allows
                    // it): the subject exists from then on, without versions.
                    let entry = self.subjects.entry(name.clone()).or_default();
                    entry.compatibility = *level;
                    if entry.versions.is_empty() && entry.compatibility.is_none() {
                        self.subjects.remove(name);
                    }
                    SchemaOutcome::Done
                }
            },
            SchemaCommand::BindTopic { topic, schemas } => {
                if !topic_exists(topic) {
                    return SchemaOutcome::TopicNotFound;
                }
                if schemas.is_empty() {
                    self.topics.remove(topic);
                } else {
                    self.topics.insert(topic.clone(), schemas.clone());
                }
                SchemaOutcome::Done
            }
        }
    }

    fn register(
        &mut self,
        subject_name: &str,
        schema: &StoredSchema,
        checked_against: Option<u32>,
    ) -> SchemaOutcome {
        for reference in &schema.references {
            let live = self
                .version(&reference.subject, reference.version)
                .is_some_and(|version| !version.deleted);
            if !live {
                return SchemaOutcome::ReferenceNotFound(reference.clone());
            }
        }
        let existing_id = self.id_of(schema);
        if let Some(id) = existing_id {
            if let Some(version) = self.live_version_with(subject_name, id) {
                return SchemaOutcome::Registered { id, version };
            }
        }
        let subject = self.subjects.entry(subject_name.to_string()).or_default();
        if subject.latest_live().map(|(version, _)| version) != checked_against {
            return SchemaOutcome::Stale;
        }
        let id = match existing_id {
            Some(id) => id,
            None => {
                let id = self.next_id;
                self.next_id = self.next_id.saturating_add(1);
                self.schemas.insert(id, schema.clone());
                id
            }
        };
        let subject = self.subjects.entry(subject_name.to_string()).or_default();
        let version = subject
            .versions
            .keys()
            .next_back()
            .map_or(1, |last| last.saturating_add(1));
        subject.versions.insert(
            version,
            SubjectVersion {
                schema_id: id,
                deleted: false,
            },
        );
        SchemaOutcome::Registered { id, version }
    }

    fn delete_version(
        &mut self,
        subject_name: &str,
        number: u32,
        permanent: bool,
    ) -> SchemaOutcome {
        let Some(subject) = self.subjects.get(subject_name) else {
            return SchemaOutcome::SubjectNotFound;
        };
        if subject.versions.is_empty() {
            return SchemaOutcome::SubjectNotFound;
        }
        let Some(version) = subject.versions.get(&number).copied() else {
            return SchemaOutcome::VersionNotFound;
        };
        if permanent {
            if !version.deleted {
                return SchemaOutcome::VersionNotSoftDeleted;
            }
        } else {
            if version.deleted {
                return SchemaOutcome::VersionSoftDeleted;
            }
            let by = self.referrers(subject_name, Some(number));
            if !by.is_empty() {
                return SchemaOutcome::Referenced { by };
            }
        }
        let Some(subject) = self.subjects.get_mut(subject_name) else {
            return SchemaOutcome::SubjectNotFound;
        };
        if permanent {
            subject.versions.remove(&number);
            if subject.versions.is_empty() && subject.compatibility.is_none() {
                self.subjects.remove(subject_name);
            }
            self.collect_garbage();
        } else if let Some(version) = subject.versions.get_mut(&number) {
            version.deleted = true;
        }
        SchemaOutcome::Deleted {
            versions: vec![number],
        }
    }

    fn delete_subject(&mut self, subject_name: &str, permanent: bool) -> SchemaOutcome {
        let Some(subject) = self.subjects.get(subject_name) else {
            return SchemaOutcome::SubjectNotFound;
        };
        if subject.versions.is_empty() {
            return SchemaOutcome::SubjectNotFound;
        }
        if permanent {
            if !subject.is_hidden() {
                return SchemaOutcome::SubjectNotSoftDeleted;
            }
            let versions: Vec<u32> = subject.versions.keys().copied().collect();
            self.subjects.remove(subject_name);
            self.collect_garbage();
            return SchemaOutcome::Deleted { versions };
        }
        if subject.is_hidden() {
            return SchemaOutcome::SubjectSoftDeleted;
        }
        let by = self.referrers(subject_name, None);
        if !by.is_empty() {
            return SchemaOutcome::Referenced { by };
        }
        let Some(subject) = self.subjects.get_mut(subject_name) else {
            return SchemaOutcome::SubjectNotFound;
        };
        let mut versions = Vec::new();
        for (number, version) in subject.versions.iter_mut() {
            if !version.deleted {
                version.deleted = true;
                versions.push(*number);
            }
        }
        SchemaOutcome::Deleted { versions }
    }
}

impl std::fmt::Display for SchemaCommand {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaCommand::Register { subject, .. } => {
                write!(formatter, "register a schema under subject {subject}")
            }
            SchemaCommand::DeleteVersion {
                subject,
                version,
                permanent,
            } => {
                let how = if *permanent { "permanently " } else { "" };
                write!(
                    formatter,
                    "{how}delete version {version} of subject {subject}"
                )
            }
            SchemaCommand::DeleteSubject { subject, permanent } => {
                let how = if *permanent { "permanently " } else { "" };
                write!(formatter, "{how}delete subject {subject}")
            }
            SchemaCommand::SetCompatibility { subject, level } => {
                let level = level.map_or("the default", Compatibility::as_str);
                match subject {
                    Some(subject) => {
                        write!(
                            formatter,
                            "set subject {subject}'s compatibility to {level}"
                        )
                    }
                    None => write!(formatter, "set the registry's compatibility to {level}"),
                }
            }
            SchemaCommand::BindTopic { topic, .. } => {
                write!(formatter, "set the subjects of topic {topic}")
            }
        }
    }
}

/// Whether `name` may name a subject: Confluent allows nearly anything; Herald refuses what
/// breaks paths, logs and policies (control characters, empty, too long).
pub fn validate_subject_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a subject name must not be empty".into());
    }
    if name.chars().count() > MAX_SUBJECT_CHARS {
        return Err(format!(
            "a subject name is at most {MAX_SUBJECT_CHARS} characters"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a subject name must not hold control characters".into());
    }
    Ok(())
}

#[cfg(test)]
#[path = "schemas_tests.rs"]
mod tests;
