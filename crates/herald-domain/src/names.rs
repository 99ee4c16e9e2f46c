//! Names of topics, consumer groups and subscriptions.
//!
//! Names become parts of storage keys and URL paths, so they are restricted to a small,
//! unambiguous alphabet (Kafka's): nothing to escape, nothing that collides with a separator.

/// The longest name allowed, Kafka's limit.
pub const MAX_NAME_LEN: usize = 249;

/// Checks that `name` is 1 to [`MAX_NAME_LEN`] characters of `[A-Za-z0-9._-]`.
///
/// `kind` ("topic name", "group id", ...) starts the error message, so it can go to the client
/// as the problem's `detail` unchanged.
pub fn validate_name(kind: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{kind} '' is invalid: it must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{kind} '{}…' is invalid: it is {} characters long, the limit is {MAX_NAME_LEN}",
            name.chars().take(32).collect::<String>(),
            name.chars().count()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!(
            "{kind} '{name}' is invalid: '.' and '..' are reserved"
        ));
    }
    if let Some(bad) = name.chars().find(|&c| !is_name_char(c)) {
        return Err(format!(
            "{kind} '{name}' is invalid: {bad:?} is not allowed; use only A-Z, a-z, 0-9, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Whether a name is reserved for the broker's own use (it starts with `__`).
pub fn is_internal(name: &str) -> bool {
    name.starts_with("__")
}

/// Checks a topic name a client gives, for any use: the name rules, and not internal. Internal
/// topics are the node's own (the audit log, `__audit`, is written by the node alone and read
/// at `GET /v1/audit`): no client reads, describes, subscribes to, dead-letters into or writes
/// them.
pub fn validate_public_topic_name(kind: &str, name: &str) -> Result<(), String> {
    validate_name(kind, name)?;
    if is_internal(name) {
        return Err(format!(
            "{kind} '{name}' is invalid: names starting with '__' are reserved for internal topics (the audit log is read at GET /v1/audit)"
        ));
    }
    Ok(())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_names() {
        for name in [
            "a",
            "orders",
            "Orders.v2",
            "my_topic-1",
            "__consumer_offsets",
            "0",
            "a..b",
        ] {
            assert_eq!(validate_name("topic name", name), Ok(()), "{name}");
        }
        assert_eq!(
            validate_name("topic name", &"x".repeat(MAX_NAME_LEN)),
            Ok(())
        );
    }

    #[test]
    fn rejects_empty() {
        let err = validate_name("topic name", "").unwrap_err();
        assert!(err.starts_with("topic name '' is invalid"), "{err}");
    }

    #[test]
    fn rejects_too_long() {
        let err = validate_name("group id", &"x".repeat(MAX_NAME_LEN + 1)).unwrap_err();
        assert!(err.starts_with("group id '"), "{err}");
        assert!(err.contains("250"), "{err}");
    }

    #[test]
    fn rejects_bad_characters() {
        for name in ["a b", "a/b", "a:b", "é", "a\nb", "a*", "topic#1", "a\0"] {
            let err = validate_name("topic name", name).unwrap_err();
            assert!(err.starts_with("topic name '"), "{err}");
            assert!(err.contains("is invalid"), "{err}");
        }
        assert!(validate_name("topic name", "a b")
            .unwrap_err()
            .starts_with("topic name 'a b' is invalid: "));
    }

    #[test]
    fn rejects_dot_and_dot_dot() {
        assert!(validate_name("topic name", ".").is_err());
        assert!(validate_name("topic name", "..").is_err());
    }

    #[test]
    fn long_multibyte_name_does_not_panic() {
        let name = "é".repeat(200);
        assert!(validate_name("topic name", &name).is_err());
    }

    #[test]
    fn public_topic_names_are_valid_and_not_internal() {
        assert_eq!(validate_public_topic_name("topic name", "orders"), Ok(()));
        let error = validate_public_topic_name("dead_letter_policy.topic", "__audit").unwrap_err();
        assert!(
            error.starts_with("dead_letter_policy.topic '__audit' is invalid"),
            "{error}"
        );
        assert!(validate_public_topic_name("topic name", "é").is_err());
    }

    #[test]
    fn internal_names() {
        assert!(is_internal("__consumer_offsets"));
        assert!(is_internal("__"));
        assert!(!is_internal("_x"));
        assert!(!is_internal("orders"));
        assert!(!is_internal("a__b"));
    }
}
