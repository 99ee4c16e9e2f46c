//! Schema registry DTOs: the JSON shapes of Confluent's Schema Registry API, field for field
//! (camelCase where Confluent's are), because its serializers parse them.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::problem::ApiError;
use crate::broker::schemas::{Registered, SubjectSchema};
use herald_domain::schemas::{SchemaFormat, SchemaReference, StoredSchema};

/// A schema to register, look up or check (`POST /schema-registry/subjects/{subject}/versions`
/// and the others). Fields Confluent's newer clients may add (`metadata`, `ruleSet`, `id`,
/// `version`) are accepted and ignored.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = RegistrySchemaRequest)]
#[schema(example = json!({"schema": "{\"type\":\"record\",\"name\":\"Order\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}))]
pub struct SchemaRequest {
    /// The schema's text: Avro JSON, a `.proto` file, or a JSON Schema.
    #[schema(max_length = 1048576)]
    pub schema: String,
    /// `AVRO` (when left out), `PROTOBUF` or `JSON`.
    #[serde(default, rename = "schemaType")]
    pub schema_type: Option<String>,
    /// Other subjects' versions this schema uses, each under the name the schema uses.
    #[serde(default)]
    pub references: Option<Vec<SchemaReferenceDto>>,
}

impl SchemaRequest {
    /// The schema as the broker stores it: 422 `invalid_schema` for an unknown type.
    pub fn into_stored(self) -> Result<StoredSchema, ApiError> {
        let format = match self.schema_type.as_deref() {
            None => SchemaFormat::Avro,
            Some(name) => SchemaFormat::parse(&name.to_ascii_uppercase()).ok_or_else(|| {
                ApiError::from(crate::broker::BrokerError::Schema {
                    code: crate::broker::ErrorCode::InvalidSchema,
                    message: format!(
                        "Invalid schema: unknown schema type '{name}' (AVRO, PROTOBUF or JSON)"
                    ),
                })
            })?,
        };
        let mut references = Vec::new();
        for reference in self.references.unwrap_or_default() {
            references.push(reference.into_domain()?);
        }
        Ok(StoredSchema {
            format,
            text: self.schema,
            references,
        })
    }
}

/// A reference to another subject's version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistrySchemaReference)]
pub struct SchemaReferenceDto {
    /// The name the schema uses for it: an Avro full name, an imported `.proto` path, a JSON
    /// Schema `$ref`.
    pub name: String,
    pub subject: String,
    #[schema(minimum = 1, maximum = 2147483647)]
    pub version: i64,
}

impl SchemaReferenceDto {
    fn into_domain(self) -> Result<SchemaReference, ApiError> {
        let version = u32::try_from(self.version)
            .ok()
            .filter(|version| (1..=i32::MAX as u32).contains(version))
            .ok_or_else(|| {
                ApiError::from(crate::broker::BrokerError::Schema {
                    code: crate::broker::ErrorCode::InvalidSchema,
                    message: format!(
                        "Invalid schema: reference '{}' names version {}, which is not a version",
                        self.name, self.version
                    ),
                })
            })?;
        Ok(SchemaReference {
            name: self.name,
            subject: self.subject,
            version,
        })
    }
}

impl From<SchemaReference> for SchemaReferenceDto {
    fn from(reference: SchemaReference) -> Self {
        SchemaReferenceDto {
            name: reference.name,
            subject: reference.subject,
            version: i64::from(reference.version),
        }
    }
}

/// What a registration answers: the schema's id.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistryRegistered)]
pub struct RegisteredDto {
    pub id: u32,
    /// The version the subject holds it as.
    pub version: u32,
}

impl From<Registered> for RegisteredDto {
    fn from(registered: Registered) -> Self {
        RegisteredDto {
            id: registered.id,
            version: registered.version,
        }
    }
}

/// One version of a subject.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistrySubjectVersion)]
pub struct SubjectVersionDto {
    pub subject: String,
    pub id: u32,
    pub version: u32,
    /// Left out for Avro, as Confluent's registry does.
    #[serde(rename = "schemaType", skip_serializing_if = "Option::is_none")]
    pub schema_type: Option<String>,
    pub schema: String,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub references: Vec<SchemaReferenceDto>,
}

impl From<SubjectSchema> for SubjectVersionDto {
    fn from(found: SubjectSchema) -> Self {
        SubjectVersionDto {
            subject: found.subject,
            id: found.id,
            version: found.version,
            schema_type: schema_type_field(found.schema.format),
            schema: found.schema.text,
            references: found
                .schema
                .references
                .into_iter()
                .map(Into::into)
                .collect(),
        }
    }
}

/// A schema by its id.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistrySchema)]
pub struct SchemaDto {
    /// Left out for Avro, as Confluent's registry does.
    #[serde(rename = "schemaType", skip_serializing_if = "Option::is_none")]
    pub schema_type: Option<String>,
    pub schema: String,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub references: Vec<SchemaReferenceDto>,
}

impl From<StoredSchema> for SchemaDto {
    fn from(schema: StoredSchema) -> Self {
        SchemaDto {
            schema_type: schema_type_field(schema.format),
            schema: schema.text,
            references: schema.references.into_iter().map(Into::into).collect(),
        }
    }
}

fn schema_type_field(format: SchemaFormat) -> Option<String> {
    (format != SchemaFormat::Avro).then(|| format.as_str().to_string())
}

/// A subject and version that hold a schema id.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistrySubjectVersionRef)]
pub struct SubjectVersionRefDto {
    pub subject: String,
    pub version: u32,
}

/// A compatibility level as `GET /config` answers it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistryConfig)]
pub struct ConfigDto {
    /// `BACKWARD`, `BACKWARD_TRANSITIVE`, `FORWARD`, `FORWARD_TRANSITIVE`, `FULL`,
    /// `FULL_TRANSITIVE` or `NONE`.
    #[serde(rename = "compatibilityLevel")]
    pub compatibility_level: String,
}

/// A compatibility level as `PUT /config` takes and answers it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistryConfigUpdate)]
#[schema(example = json!({"compatibility": "FULL"}))]
pub struct ConfigUpdateDto {
    /// `BACKWARD`, `BACKWARD_TRANSITIVE`, `FORWARD`, `FORWARD_TRANSITIVE`, `FULL`,
    /// `FULL_TRANSITIVE` or `NONE`.
    #[schema(max_length = 32)]
    pub compatibility: String,
}

/// What a compatibility check found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = RegistryCompatibilityCheck)]
pub struct CompatibilityCheckDto {
    pub is_compatible: bool,
    /// What breaks, with `verbose=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<String>>,
}

/// A query flag as Confluent's clients write it: `true` or `false` in any case (Python's
/// client sends `normalize=False`).
fn any_case_bool<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if text.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(serde::de::Error::custom(format!(
            "'{text}' is not `true` or `false`"
        )))
    }
}

/// `?deleted=`: include soft-deleted subjects or versions.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeletedQuery {
    /// Include soft-deleted ones.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub deleted: bool,
}

/// `GET /schema-registry/subjects` parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SubjectsQuery {
    /// Include soft-deleted subjects.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub deleted: bool,
    /// Only subjects whose names start with it.
    #[serde(default, rename = "subjectPrefix")]
    #[param(max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub subject_prefix: Option<String>,
}

/// `?permanent=`: remove for good (after a soft delete).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PermanentQuery {
    /// Remove soft-deleted ones for good.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub permanent: bool,
}

/// Registration parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RegisterQuery {
    /// Store (and compare) the schema's canonical form.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub normalize: bool,
}

/// Lookup parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LookupQuery {
    /// Compare the schema's canonical form.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub normalize: bool,
    /// Find it among soft-deleted versions too.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub deleted: bool,
}

/// `GET /schema-registry/config/{subject}` parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SubjectConfigQuery {
    /// Answer the registry's level when the subject has none of its own.
    #[serde(
        default,
        rename = "defaultToGlobal",
        deserialize_with = "any_case_bool"
    )]
    pub default_to_global: bool,
}

/// Compatibility check parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VerboseQuery {
    /// List what breaks.
    #[serde(default, deserialize_with = "any_case_bool")]
    pub verbose: bool,
}
