//! Reading an external token's claims: its issuer before it is verified (to pick the keys),
//! its subject and its roles after.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

use herald_domain::auth::{validate_role, MAX_ROLES_PER_CLIENT};

/// The longest token looked at; longer ones are refused unread.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The longest subject claim accepted.
pub const MAX_SUBJECT_CHARS: usize = 256;

/// The `iss` a token claims, unverified: it only picks which keys verify the token.
pub fn peek_issuer(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    #[derive(serde::Deserialize)]
    struct Issuer {
        iss: Option<String>,
    }
    serde_json::from_slice::<Issuer>(&bytes).ok()?.iss
}

/// The claim at `path`: a top-level claim of that exact name first (Auth0's namespaced claims
/// are URLs, dots included), else the dotted path through nested objects
/// (Keycloak's `realm_access.roles`).
pub fn claim<'a>(claims: &'a Value, path: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(path) {
        return Some(value);
    }
    path.split('.')
        .try_fold(claims, |value, part| value.get(part))
}

/// The roles a claim holds: an array of strings, or one string of space-separated names (like
/// `scope`). Names that are not valid role names are left out (providers add their own, such
/// as `offline_access` or `default-roles-<realm>`; those that are valid names simply match no
/// policy rule); duplicates once; at most [`MAX_ROLES_PER_CLIENT`].
pub fn roles(value: Option<&Value>) -> Vec<String> {
    let names: Vec<&str> = match value {
        Some(Value::String(text)) => text.split_whitespace().collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut roles: Vec<String> = Vec::new();
    for name in names {
        if validate_role(name).is_ok() && !roles.iter().any(|role| role == name) {
            roles.push(name.to_string());
            if roles.len() == MAX_ROLES_PER_CLIENT {
                break;
            }
        }
    }
    roles
}

/// The subject claim's value: a non-empty string (or a number, which some providers use).
pub fn subject(value: Option<&Value>) -> Result<String, String> {
    let subject = match value {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        Some(_) => return Err("the subject claim is not a string".into()),
        None => return Err("the token has no subject claim".into()),
    };
    if subject.is_empty() || subject.chars().count() > MAX_SUBJECT_CHARS {
        return Err(format!(
            "the subject claim must be 1 to {MAX_SUBJECT_CHARS} characters"
        ));
    }
    if subject.chars().any(char::is_control) {
        return Err("the subject claim holds control characters".into());
    }
    Ok(subject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn roles_come_from_nested_and_namespaced_claims() {
        let claims = json!({
            "realm_access": {"roles": ["producer", "offline_access", "not a role", "producer"]},
            "https://herald.example.com/roles": ["viewer"],
            "scope": "consumer  viewer",
        });
        assert_eq!(
            roles(claim(&claims, "realm_access.roles")),
            ["producer", "offline_access"]
        );
        assert_eq!(
            roles(claim(&claims, "https://herald.example.com/roles")),
            ["viewer"]
        );
        assert_eq!(roles(claim(&claims, "scope")), ["consumer", "viewer"]);
        assert!(roles(claim(&claims, "realm_access.missing")).is_empty());
        assert!(roles(claim(&claims, "realm_access")).is_empty());
    }

    #[test]
    fn the_issuer_is_read_from_the_payload_unverified() {
        let payload = URL_SAFE_NO_PAD.encode(br#"{"iss":"https://sso.example.com","sub":"x"}"#);
        assert_eq!(
            peek_issuer(&format!("e30.{payload}.sig")).as_deref(),
            Some("https://sso.example.com")
        );
        assert_eq!(peek_issuer("not a token"), None);
        assert_eq!(
            peek_issuer(&format!("e30.{}.x", URL_SAFE_NO_PAD.encode(b"[]"))),
            None
        );
    }

    #[test]
    fn subjects_are_short_printable_strings() {
        assert_eq!(subject(Some(&json!("a-b"))).unwrap(), "a-b");
        assert_eq!(subject(Some(&json!(42))).unwrap(), "42");
        assert!(subject(Some(&json!(""))).is_err());
        assert!(subject(Some(&json!("a\nb"))).is_err());
        assert!(subject(Some(&json!(["a"]))).is_err());
        assert!(subject(None).is_err());
    }
}
