//! The built-in issuer's tokens: issued, validated, renewed, refused.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::tokens::*;
use super::verified::VerifiedTokens;
use crate::auth::keys::{generate_signing_key, Signer};
use crate::auth::sealing::SealingKey;
use herald_domain::auth::{AuthCommand, AuthOutcome, AuthState, SigningKeyRecord};

fn sealing() -> SealingKey {
    SealingKey::for_tests(3)
}

fn new_key(now_ms: i64) -> SigningKeyRecord {
    generate_signing_key(now_ms, &sealing()).unwrap()
}

/// The current key of `state`, opened to sign with.
fn current(state: &AuthState) -> Signer {
    Signer::open(state.current_signing_key().unwrap(), &sealing()).unwrap()
}

fn settings() -> TokenSettings {
    TokenSettings {
        issuer: "http://127.0.0.1:8080".into(),
        audience: "herald".into(),
        lifetime: Duration::from_secs(3600),
        max_session: Duration::from_secs(12 * 3600),
        leeway: Duration::from_secs(5),
        builtin_enabled: true,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The credential of client `billing` in `state`.
fn cred(state: &AuthState) -> String {
    state
        .clients
        .get("billing")
        .map(credential_id)
        .unwrap_or_default()
}

fn state_with_client() -> AuthState {
    let mut state = AuthState::default();
    let outcome = state.apply(&AuthCommand::CreateClient {
        client_id: "billing".into(),
        secret_hash: "$argon2id$x".into(),
        roles: vec!["producer".into()],
        created_at_ms: 0,
    });
    assert_eq!(outcome, AuthOutcome::Done);
    state.apply(&AuthCommand::AddSigningKey {
        key: new_key(now_ms() - 60_000),
    });
    state
}

#[test]
fn issued_tokens_validate_with_the_clients_current_roles() {
    let mut state = state_with_client();
    let key = current(&state);
    let (token, lasts) =
        issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
    assert_eq!(lasts, 3600);
    let principal = validate(&token, &state, &settings()).unwrap();
    assert_eq!(principal.subject, "billing");
    assert_eq!(principal.roles, vec!["producer".to_string()]);

    // A deleted client's tokens stop working at once.
    state.apply(&AuthCommand::DeleteClient {
        client_id: "billing".into(),
    });
    assert!(validate(&token, &state, &settings()).is_err());
}

#[test]
fn a_renewal_keeps_the_session_start_and_ends_with_the_session_or_the_secret() {
    let mut state = state_with_client();
    let key = current(&state);
    let began_ms = now_ms() - 3_600_000;
    let (token, _) = issue(&key, &settings(), "billing", &cred(&state), began_ms, None).unwrap();
    let Renewal {
        subject,
        auth_time_s: auth_time,
        ..
    } = renewal(&token, &state, &settings()).unwrap();
    assert_eq!((subject.as_str(), auth_time), ("billing", began_ms / 1000));
    // The successor carries the same session start, so renewing it again is bounded too.
    let (next, _) = issue(
        &key,
        &settings(),
        &subject,
        &cred(&state),
        now_ms(),
        Some(auth_time),
    )
    .unwrap();
    assert_eq!(
        renewal(&next, &state, &settings()).unwrap().auth_time_s,
        began_ms / 1000
    );

    // Past max_session, a valid token is no longer renewed.
    let short = TokenSettings {
        max_session: Duration::from_secs(1800),
        ..settings()
    };
    assert!(validate(&next, &state, &short).is_ok());
    let error = renewal(&next, &state, &short).unwrap_err();
    assert!(error.to_string().contains("max_session"), "{error}");

    // A secret rotated after the session began ends it.
    state.apply(&AuthCommand::RotateClientSecret {
        client_id: "billing".into(),
        secret_hash: "$argon2id$y".into(),
        rotated_at_ms: now_ms(),
    });
    let error = renewal(&next, &state, &settings()).unwrap_err();
    assert!(error.to_string().contains("rotated"), "{error}");

    // A deleted client's token is not renewed.
    state.apply(&AuthCommand::DeleteClient {
        client_id: "billing".into(),
    });
    let (fresh, _) = issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
    assert!(renewal(&fresh, &state, &settings()).is_err());
}

#[test]
fn tampered_foreign_and_expired_tokens_are_refused() {
    let state = state_with_client();
    let key = current(&state);
    let (token, _) = issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    parts[1] = URL_SAFE_NO_PAD.encode(
        br#"{"iss":"http://127.0.0.1:8080","sub":"billing","aud":"herald","iat":1,"nbf":1,"exp":99999999999,"jti":"x"}"#,
    );
    assert!(validate(&parts.join("."), &state, &settings()).is_err());

    // Signed by a key the cluster does not hold.
    let stranger = Signer::open(&new_key(0), &sealing()).unwrap();
    let (foreign, _) = issue(
        &stranger,
        &settings(),
        "billing",
        &cred(&state),
        now_ms(),
        None,
    )
    .unwrap();
    let error = validate(&foreign, &state, &settings()).unwrap_err();
    assert!(error.to_string().contains("unknown signing key"), "{error}");

    // Long expired.
    let (old, _) = issue(
        &key,
        &settings(),
        "billing",
        &cred(&state),
        now_ms() - 10 * 3_600_000,
        None,
    )
    .unwrap();
    assert!(validate(&old, &state, &settings()).is_err());

    // Another audience.
    let other = TokenSettings {
        audience: "elsewhere".into(),
        ..settings()
    };
    let (elsewhere, _) = issue(&key, &other, "billing", &cred(&state), now_ms(), None).unwrap();
    assert!(validate(&elsewhere, &state, &settings()).is_err());
}

#[test]
fn remembered_tokens_still_need_their_key_and_client() {
    let mut state = state_with_client();
    let key = current(&state);
    let verified = VerifiedTokens::new(16);
    let (token, _) = issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
    assert!(validate_cached(&token, &state, &settings(), &verified).is_ok());
    assert_eq!(verified.len(), 1);
    // A remembered token answers the client's current roles...
    state.apply(&AuthCommand::DeleteClient {
        client_id: "billing".into(),
    });
    assert!(validate_cached(&token, &state, &settings(), &verified).is_err());
    // ...and stops validating once its key is dropped.
    let mut state = state_with_client();
    let key = current(&state);
    let (token, _) = issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
    assert!(validate_cached(&token, &state, &settings(), &verified).is_ok());
    state.apply(&AuthCommand::AddSigningKey {
        key: new_key(now_ms()),
    });
    state.apply(&AuthCommand::DropSigningKey { kid: key.kid });
    assert!(validate_cached(&token, &state, &settings(), &verified).is_err());
    // Tampered tokens are other tokens: never taken for a remembered one.
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    parts[1].push('A');
    assert!(validate_cached(&parts.join("."), &state, &settings(), &verified).is_err());
}

#[test]
fn a_retired_key_validates_its_tokens_until_it_is_dropped() {
    let mut state = state_with_client();
    let old_key = current(&state);
    let (token, _) = issue(
        &old_key,
        &settings(),
        "billing",
        &cred(&state),
        now_ms() - 1000,
        None,
    )
    .unwrap();
    state.apply(&AuthCommand::AddSigningKey {
        key: new_key(now_ms()),
    });
    assert!(validate(&token, &state, &settings()).is_ok());
    state.apply(&AuthCommand::DropSigningKey {
        kid: old_key.kid.clone(),
    });
    assert!(validate(&token, &state, &settings()).is_err());
}

/// A rotation in the very millisecond after a token was issued (so in its second: `iat` and
/// `auth_time` are whole seconds) ends it: the token names the secret it was issued under.
#[test]
fn a_secret_rotated_in_the_second_a_token_was_issued_ends_it() {
    let mut state = state_with_client();
    let key = current(&state);
    let issued_ms = (now_ms() / 1000) * 1000 + 100;
    let (token, _) = issue(&key, &settings(), "billing", &cred(&state), issued_ms, None).unwrap();
    assert!(renewal(&token, &state, &settings()).is_ok());
    state.apply(&AuthCommand::RotateClientSecret {
        client_id: "billing".into(),
        secret_hash: "$argon2id$rotated".into(),
        rotated_at_ms: issued_ms + 1,
    });
    let error = renewal(&token, &state, &settings()).unwrap_err();
    assert!(error.to_string().contains("rotated"), "{error}");
    assert!(validate(&token, &state, &settings()).is_err());
    // A token issued with the new secret in that same second is valid.
    let (fresh, _) = issue(
        &key,
        &settings(),
        "billing",
        &cred(&state),
        issued_ms + 2,
        None,
    )
    .unwrap();
    assert!(validate(&fresh, &state, &settings()).is_ok());
    assert!(renewal(&fresh, &state, &settings()).is_ok());
}

/// A client deleted and created again under the same id (with other roles) is another
/// incarnation: the first one's tokens stay refused.
#[test]
fn a_recreated_client_does_not_revive_older_tokens() {
    let mut state = state_with_client();
    let key = current(&state);
    let verified = VerifiedTokens::new(16);
    let (token, _) = issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
    assert!(validate_cached(&token, &state, &settings(), &verified).is_ok());
    state.apply(&AuthCommand::DeleteClient {
        client_id: "billing".into(),
    });
    let outcome = state.apply(&AuthCommand::CreateClient {
        client_id: "billing".into(),
        secret_hash: "$argon2id$second-incarnation".into(),
        roles: vec!["admin".into()],
        created_at_ms: 0,
    });
    assert_eq!(outcome, AuthOutcome::Done);
    let error = validate_cached(&token, &state, &settings(), &verified).unwrap_err();
    assert!(error.to_string().contains("re-created"), "{error}");
    assert!(validate(&token, &state, &settings()).is_err());
    assert!(renewal(&token, &state, &settings()).is_err());
}

/// Each token has one valid text: the issuer signs with the low `s` and refuses the twin
/// signature `(r, n - s)`, which ECDSA would accept.
#[test]
fn the_twin_of_a_signature_is_refused() {
    let state = state_with_client();
    let key = current(&state);
    for _ in 0..8 {
        let (token, _) =
            issue(&key, &settings(), "billing", &cred(&state), now_ms(), None).unwrap();
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
        assert!(crate::auth::low_s::is_low_s_p256(&signature), "{token}");
        assert!(validate(&token, &state, &settings()).is_ok());
        // n - s, computed with the normalisation's own subtraction run on a high s: the twin
        // of a low s is high, and normalising it gives the original back.
        let twin = twin_of(&signature);
        assert!(!crate::auth::low_s::is_low_s_p256(&twin));
        let forged = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(&twin));
        let error = validate(&forged, &state, &settings()).unwrap_err();
        assert!(error.to_string().contains("low-s"), "{error}");
        let mut normalised = twin.clone();
        crate::auth::low_s::normalize_p256(&mut normalised);
        assert_eq!(normalised, signature);
    }
}

/// `(r, n - s)` for a 64-byte P-256 signature.
fn twin_of(signature: &[u8]) -> Vec<u8> {
    const ORDER: [u8; 32] = [
        0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63,
        0x25, 0x51,
    ];
    let mut twin = signature.to_vec();
    let mut borrow = 0i16;
    for index in (0..32).rev() {
        let mut difference = i16::from(ORDER[index]) - i16::from(signature[32 + index]) - borrow;
        borrow = i16::from(difference < 0);
        if difference < 0 {
            difference += 256;
        }
        twin[32 + index] = difference as u8;
    }
    twin
}
