use super::*;

fn avro(text: &str) -> StoredSchema {
    StoredSchema {
        format: SchemaFormat::Avro,
        text: text.into(),
        references: Vec::new(),
    }
}

fn register(
    registry: &mut SchemaRegistry,
    subject: &str,
    schema: &StoredSchema,
    checked_against: Option<u32>,
) -> SchemaOutcome {
    registry.apply(
        &SchemaCommand::Register {
            subject: subject.into(),
            schema: schema.clone(),
            checked_against,
        },
        |_| true,
    )
}

fn delete_subject(registry: &mut SchemaRegistry, subject: &str, permanent: bool) -> SchemaOutcome {
    registry.apply(
        &SchemaCommand::DeleteSubject {
            subject: subject.into(),
            permanent,
        },
        |_| true,
    )
}

#[test]
fn the_same_schema_gets_one_id_across_subjects_and_registrations() {
    let mut registry = SchemaRegistry::default();
    let schema = avro(r#""string""#);
    assert_eq!(
        register(&mut registry, "a-value", &schema, None),
        SchemaOutcome::Registered { id: 1, version: 1 }
    );
    // Again in the same subject: the same id and version, nothing new.
    assert_eq!(
        register(&mut registry, "a-value", &schema, Some(1)),
        SchemaOutcome::Registered { id: 1, version: 1 }
    );
    // In another subject: the same id, that subject's version 1.
    assert_eq!(
        register(&mut registry, "b-value", &schema, None),
        SchemaOutcome::Registered { id: 1, version: 1 }
    );
    assert_eq!(
        register(&mut registry, "a-value", &avro(r#""long""#), Some(1)),
        SchemaOutcome::Registered { id: 2, version: 2 }
    );
    assert_eq!(registry.versions_of(1).len(), 2);
}

#[test]
fn a_registration_checked_against_an_older_latest_is_stale() {
    let mut registry = SchemaRegistry::default();
    register(&mut registry, "s", &avro(r#""string""#), None);
    register(&mut registry, "s", &avro(r#""long""#), Some(1));
    // Its proposer checked compatibility against version 1; version 2 came in between.
    assert_eq!(
        register(&mut registry, "s", &avro(r#""int""#), Some(1)),
        SchemaOutcome::Stale
    );
    assert_eq!(registry.subjects["s"].versions.len(), 2);
    // A first registration racing another first one.
    assert_eq!(
        register(&mut registry, "s", &avro(r#""int""#), None),
        SchemaOutcome::Stale
    );
}

#[test]
fn deletes_are_soft_first_and_permanent_after() {
    let mut registry = SchemaRegistry::default();
    register(&mut registry, "s", &avro(r#""string""#), None);
    register(&mut registry, "s", &avro(r#""long""#), Some(1));
    assert_eq!(
        delete_subject(&mut registry, "s", true),
        SchemaOutcome::SubjectNotSoftDeleted
    );
    assert_eq!(
        delete_subject(&mut registry, "s", false),
        SchemaOutcome::Deleted {
            versions: vec![1, 2]
        }
    );
    assert!(registry.subjects["s"].is_hidden());
    // Soft-deleted ids still resolve: old messages still decode.
    assert!(registry.schemas.contains_key(&1));
    assert_eq!(
        delete_subject(&mut registry, "s", false),
        SchemaOutcome::SubjectSoftDeleted
    );
    assert_eq!(
        delete_subject(&mut registry, "s", true),
        SchemaOutcome::Deleted {
            versions: vec![1, 2]
        }
    );
    assert!(registry.subjects.is_empty());
    assert!(registry.schemas.is_empty());
    // Ids are never reused.
    assert_eq!(
        register(&mut registry, "s", &avro(r#""int""#), None),
        SchemaOutcome::Registered { id: 3, version: 1 }
    );
}

#[test]
fn versions_continue_after_a_soft_deleted_one() {
    let mut registry = SchemaRegistry::default();
    register(&mut registry, "s", &avro(r#""string""#), None);
    register(&mut registry, "s", &avro(r#""long""#), Some(1));
    let outcome = registry.apply(
        &SchemaCommand::DeleteVersion {
            subject: "s".into(),
            version: 2,
            permanent: false,
        },
        |_| true,
    );
    assert_eq!(outcome, SchemaOutcome::Deleted { versions: vec![2] });
    // The latest live version is 1 again; the next one is 3, never 2 again.
    assert_eq!(
        register(&mut registry, "s", &avro(r#""int""#), Some(1)),
        SchemaOutcome::Registered { id: 3, version: 3 }
    );
    let again = registry.apply(
        &SchemaCommand::DeleteVersion {
            subject: "s".into(),
            version: 2,
            permanent: false,
        },
        |_| true,
    );
    assert_eq!(again, SchemaOutcome::VersionSoftDeleted);
    let missing = registry.apply(
        &SchemaCommand::DeleteVersion {
            subject: "s".into(),
            version: 9,
            permanent: false,
        },
        |_| true,
    );
    assert_eq!(missing, SchemaOutcome::VersionNotFound);
}

#[test]
fn a_referenced_version_cannot_be_deleted_and_a_missing_reference_is_refused() {
    let mut registry = SchemaRegistry::default();
    register(
        &mut registry,
        "address",
        &avro(r#"{"type":"record","name":"Address","fields":[]}"#),
        None,
    );
    let reference = SchemaReference {
        name: "Address".into(),
        subject: "address".into(),
        version: 1,
    };
    let user = StoredSchema {
        format: SchemaFormat::Avro,
        text: r#"{"type":"record","name":"User","fields":[{"name":"a","type":"Address"}]}"#.into(),
        references: vec![reference.clone()],
    };
    assert_eq!(
        register(&mut registry, "user", &user, None),
        SchemaOutcome::Registered { id: 2, version: 1 }
    );
    assert_eq!(
        delete_subject(&mut registry, "address", false),
        SchemaOutcome::Referenced { by: vec![2] }
    );
    let dangling = StoredSchema {
        references: vec![SchemaReference {
            version: 7,
            ..reference
        }],
        ..user
    };
    assert!(matches!(
        register(&mut registry, "user2", &dangling, None),
        SchemaOutcome::ReferenceNotFound(_)
    ));
    assert!(
        !registry.subjects.contains_key("user2") || registry.subjects["user2"].versions.is_empty()
    );
}

#[test]
fn compatibility_levels_fall_back_to_the_registry_then_the_default() {
    let mut registry = SchemaRegistry::default();
    assert_eq!(registry.compatibility_of("s"), Compatibility::Backward);
    registry.apply(
        &SchemaCommand::SetCompatibility {
            subject: None,
            level: Some(Compatibility::Full),
        },
        |_| true,
    );
    assert_eq!(registry.compatibility_of("s"), Compatibility::Full);
    registry.apply(
        &SchemaCommand::SetCompatibility {
            subject: Some("s".into()),
            level: Some(Compatibility::None),
        },
        |_| true,
    );
    assert_eq!(registry.compatibility_of("s"), Compatibility::None);
    // A level set before any version: the subject has no versions, so it is not listed as one.
    assert!(registry.subjects["s"].is_hidden());
    registry.apply(
        &SchemaCommand::SetCompatibility {
            subject: Some("s".into()),
            level: None,
        },
        |_| true,
    );
    assert_eq!(registry.compatibility_of("s"), Compatibility::Full);
    assert!(!registry.subjects.contains_key("s"));
    let unset = registry.apply(
        &SchemaCommand::SetCompatibility {
            subject: Some("s".into()),
            level: None,
        },
        |_| true,
    );
    assert_eq!(unset, SchemaOutcome::SubjectLevelNotSet);
    for level in Compatibility::ALL {
        assert_eq!(Compatibility::parse(level.as_str()), Some(level));
    }
}

#[test]
fn topics_bind_to_subjects_only_when_they_exist() {
    let mut registry = SchemaRegistry::default();
    let schemas = TopicSchemas {
        key_subject: None,
        value_subject: Some("orders-value".into()),
    };
    let missing = registry.apply(
        &SchemaCommand::BindTopic {
            topic: "orders".into(),
            schemas: schemas.clone(),
        },
        |_| false,
    );
    assert_eq!(missing, SchemaOutcome::TopicNotFound);
    registry.apply(
        &SchemaCommand::BindTopic {
            topic: "orders".into(),
            schemas,
        },
        |topic| topic == "orders",
    );
    assert_eq!(
        registry.topics_using("orders-value"),
        vec!["orders".to_string()]
    );
    registry.forget_topic("orders");
    assert!(registry.topics_using("orders-value").is_empty());
}

#[test]
fn subject_names_are_checked() {
    assert!(validate_subject_name("orders-value").is_ok());
    assert!(validate_subject_name("com.acme.Order").is_ok());
    assert!(validate_subject_name("").is_err());
    assert!(validate_subject_name("a\nb").is_err());
    assert!(validate_subject_name(&"x".repeat(256)).is_err());
}
