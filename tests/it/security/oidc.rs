//! External OIDC issuers: a provider simulated by a local discovery + JWKS server (axum on
//! 127.0.0.1, plain and over TLS with a private CA) whose RS256 and ES256 tokens validate with
//! roles from a nested claim; forged, misdirected and expired tokens refused; key rotation picked
//! up with one refetch; a burst of unknown keys fetching at most once per interval; cached keys
//! surviving the provider going down; and a node fetching its issuers' keys at start.

use crate::common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use herald::broker::auth::external::{ExternalIssuer, ExternalIssuerSettings, ExternalIssuers};
use herald::broker::auth::tokens::Principal;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use parking_lot::Mutex;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::common::{poll, Server};

/// A test RSA key (2048 bits, made with `openssl genpkey` for these tests only; PKCS#1 DER in
/// base64) and its modulus (base64url).
const RSA_KEY_PKCS1_DER_BASE64: &str = "MIIEpAIBAAKCAQEArBI77SvYjngrfKJnfr8JoZDCK43jbZvogCuhMbVDT6YVNMGYZkk7uGiUFArRuD1acofhL2cuihoHdkTVrpa9++OlreF0dzvcZGJyCXNyHF1s+6ITFGQ6zC39WKpCVwIYzcrpzcSykWJUYfwkqi2tI78QHbe/Iqh/g7450ufPn73UZ9pWIBef/2LLKlRAO6Qpzb9rvR/r9PyVm80A2aYayVtJDi2k1hMmMDS4zpJLKRjwF7Rw5uoT8mUsNyYMw7U66PsjO0Cn7thwBtYRUq9IXWRvSg+jMsH5VrafnYovs+JCODhK1YH33s63+lakVP/H6enXaU/OT7vducDoci5y9wIDAQABAoIBAFTx13WY/Jowhr9LaS4v3vBMhx57ODfnDJshbr0cT7NlOPjHTZXJN1ss/VT7llaOqzT5EViWZmo0uVRQXPCIaBeOZT72msk12vIPi15RCJcqI+ABPcwGQuSDG5uGyaMsXNRTBKLZJJIS6bdJg0wjqmKIMsuI5ymT5wdBhEgyudOQUkTcqI6E3F2bSCSiErYZaYOL0oJq9AWMHz8jnZxA2sgRWBulZVsotLrO+O89eUHwmngtKqigC4e4Kj+K2piuVad0iHml3nXkuEr8SNx0ao1YK7CP4lPNFzddHqYsO5s6wrX7DP6j9TqSUbJFsdofg18CKZGIUG7FOYl2+WklI8kCgYEA35c8LbvlucX0gwrXbFv3x8zgcJMktd3yiX17AJQIo3Ey8hh/eWjfTqbSIIWBCgkCS5Y1tvGefjVkJRVcIB+dgR43XSJdvNy+jKXlCeYpj8UET2ZBxLA5nRJ859n7kOPI/4JpF5mya2Ljhg4RZ3adv7kn9s6k7EVbrwxBe7zirvsCgYEAxQNEhO3daouBFZXOAF2UWNlF7ND7vOstjaXBYeRhSCVJJv4uujsXPwv0he0eUn+WjGG4b2Py8AQsYcIzz6sWi0prR1F7ukpsIadwcNLEqqmuyuC2s54Y5NYaAOoj82l1wLTUgHjZiyaJRefgNQ9uUw5xjwrWzH5Y3lmuqBeXWzUCgYA2vYMJO2Bh3Boh3wygxd9i9kDYrt2k/QK9MJBlsthuk29CoEbNRaSuT99QAP93on8CXHMoJ/2CrrWm8pTMdJEOJISvc5N5gp3QN2lcxBHW1ghZHBLsAa0JTJZx+QdDENGL5LSwB3wMGHjVwCn4p6y1XLJxFWSBR/XLZHe/wJ3K8wKBgQC9v/zxjuvv33cvY/5qCbeEr5eSlGGxvk08nUYZU86Cny7KuIwm4Bzuo0Qa7ZuD19EXWlM6LejhVROuAE7ImD75X27d3NQvQ9jLvSol8EptGUr5qd8uNnpBhRi8gsanfY5lUYVOS5czV6VlSASA9mDK7CFhpQ3nHVXYqkX3LemgdQKBgQCZ1d8lH3O70NHp+4OMnONXVWTLsz/ukWX1Hvd9QMIt73/POVKsHhJvn7IMvc4WSU2+aoyK+A6WeeH/psRd9Tt9Cj3tX5/HSBXwqozH+Si7eKbNSKFkccVLm65nTUOQ8QIwB/e0R7R07niOT4hmeA6XyPOZS22qMMT2JsyWe2Sqlg==";
const RSA_MODULUS: &str = "rBI77SvYjngrfKJnfr8JoZDCK43jbZvogCuhMbVDT6YVNMGYZkk7uGiUFArRuD1acofhL2cuihoHdkTVrpa9--OlreF0dzvcZGJyCXNyHF1s-6ITFGQ6zC39WKpCVwIYzcrpzcSykWJUYfwkqi2tI78QHbe_Iqh_g7450ufPn73UZ9pWIBef_2LLKlRAO6Qpzb9rvR_r9PyVm80A2aYayVtJDi2k1hMmMDS4zpJLKRjwF7Rw5uoT8mUsNyYMw7U66PsjO0Cn7thwBtYRUq9IXWRvSg-jMsH5VrafnYovs-JCODhK1YH33s63-lakVP_H6enXaU_OT7vducDoci5y9w";

const AUDIENCE: &str = "herald";
const DEADLINE: Duration = Duration::from_secs(10);

/// A key the simulated provider signs with.
struct SigningKey {
    kid: String,
    algorithm: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

fn es256_key(kid: &str) -> SigningKey {
    let random = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random)
        .unwrap();
    let point = pair.public_key().as_ref();
    SigningKey {
        kid: kid.to_string(),
        algorithm: Algorithm::ES256,
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        }),
    }
}

fn rs256_key(kid: &str) -> SigningKey {
    SigningKey {
        kid: kid.to_string(),
        algorithm: Algorithm::RS256,
        encoding: EncodingKey::from_rsa_der(
            &base64::engine::general_purpose::STANDARD
                .decode(RSA_KEY_PKCS1_DER_BASE64)
                .unwrap(),
        ),
        jwk: json!({
            "kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
            "n": RSA_MODULUS, "e": "AQAB",
        }),
    }
}

fn now_s() -> i64 {
    common::now_ms() / 1000
}

/// The claims a Keycloak access token carries, roles under `realm_access.roles`.
fn keycloak_claims(issuer: &str, subject: &str, roles: &[&str]) -> Value {
    json!({
        "iss": issuer, "aud": AUDIENCE, "sub": subject,
        "iat": now_s(), "nbf": now_s() - 1, "exp": now_s() + 300,
        "realm_access": {"roles": roles},
        "azp": "billing-service",
    })
}

fn sign(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(key.algorithm);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// What the simulated provider serves and how often it was asked.
struct ProviderState {
    issuer: String,
    keys: Mutex<Vec<Value>>,
    jwks_requests: AtomicUsize,
    discovery_requests: AtomicUsize,
    /// How long the JWKS answer takes, so concurrent fetches would overlap.
    jwks_delay_ms: AtomicU64,
}

/// A local OpenID provider: discovery at `/.well-known/openid-configuration`, keys at `/jwks`.
struct Provider {
    base_url: String,
    state: Arc<ProviderState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

async fn discovery(State(state): State<Arc<ProviderState>>) -> Json<Value> {
    state.discovery_requests.fetch_add(1, Ordering::SeqCst);
    Json(json!({
        "issuer": state.issuer,
        "jwks_uri": format!("{}/jwks", state.issuer),
        "token_endpoint": format!("{}/token", state.issuer),
    }))
}

async fn jwks(State(state): State<Arc<ProviderState>>) -> (StatusCode, Json<Value>) {
    state.jwks_requests.fetch_add(1, Ordering::SeqCst);
    let delay = state.jwks_delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let keys = state.keys.lock().clone();
    (StatusCode::OK, Json(json!({ "keys": keys })))
}

impl Provider {
    async fn start(keys: &[&SigningKey]) -> Provider {
        Provider::start_with_tls(keys, None).await
    }

    /// Over TLS when `tls` names a certificate and key for 127.0.0.1.
    async fn start_with_tls(
        keys: &[&SigningKey],
        tls: Option<&common::tls::IssuedFiles>,
    ) -> Provider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base_url = format!("{scheme}://{address}");
        let state = Arc::new(ProviderState {
            issuer: base_url.clone(),
            keys: Mutex::new(keys.iter().map(|key| key.jwk.clone()).collect()),
            jwks_requests: AtomicUsize::new(0),
            discovery_requests: AtomicUsize::new(0),
            jwks_delay_ms: AtomicU64::new(0),
        });
        let router = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .with_state(state.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = match tls {
            None => tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            }),
            Some(files) => {
                let acceptor = herald::api::server::tls::TlsAcceptor::load(
                    herald::api::server::tls::TlsSettings {
                        cert_file: files.cert.clone(),
                        key_file: files.key.clone(),
                        allow_plaintext: false,
                        handshake_timeout: DEADLINE,
                        reload_check_interval: Duration::from_secs(3600),
                    },
                )
                .unwrap();
                let listener = herald::api::server::listener::LimitedListener::new(
                    listener,
                    64,
                    Some(acceptor),
                );
                tokio::spawn(async move {
                    axum::serve(listener, router)
                        .with_graceful_shutdown(async move {
                            let _ = stopped.await;
                        })
                        .await
                        .unwrap();
                })
            }
        };
        Provider {
            base_url,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn publish(&self, keys: &[&SigningKey]) {
        *self.state.keys.lock() = keys.iter().map(|key| key.jwk.clone()).collect();
    }

    fn jwks_requests(&self) -> usize {
        self.state.jwks_requests.load(Ordering::SeqCst)
    }

    /// Stops serving: its port refuses connections afterwards.
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(DEADLINE, task)
                .await
                .expect("the provider stops")
                .unwrap();
        }
    }

    fn settings(&self) -> ExternalIssuerSettings {
        ExternalIssuerSettings {
            issuer: self.base_url.clone(),
            audience: AUDIENCE.into(),
            jwks_url: None,
            roles_claim: "realm_access.roles".into(),
            subject_claim: "sub".into(),
            subject_prefix: "ext:provider:".into(),
            algorithms: vec![Algorithm::RS256, Algorithm::ES256],
            ca_file: None,
            allow_http: false,
            refresh_interval: Duration::from_secs(300),
            min_refetch_interval: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(5),
            leeway: Duration::from_secs(5),
        }
    }
}

fn issuer(settings: ExternalIssuerSettings) -> Arc<ExternalIssuer> {
    Arc::new(ExternalIssuer::new(settings).unwrap())
}

fn refused(
    result: Result<Principal, herald::broker::auth::tokens::TokenError>,
    why: &str,
) -> String {
    match result {
        Ok(principal) => panic!("{why}: accepted as {principal:?}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn tokens_validate_with_roles_from_a_nested_claim_and_keys_from_discovery() {
    let rsa = rs256_key("rsa-1");
    let ec = es256_key("ec-1");
    let provider = Provider::start(&[&rsa, &ec]).await;
    let issuer = issuer(provider.settings());

    let token = sign(
        &rsa,
        &keycloak_claims(
            &provider.base_url,
            "alice",
            &["producer", "offline_access", "bad role!"],
        ),
    );
    let principal = issuer.validate(&token).await.unwrap();
    assert_eq!(principal.subject, "ext:provider:alice");
    assert_eq!(principal.roles, ["producer", "offline_access"]);
    assert!(principal.expires_at_ms > common::now_ms());

    let token = sign(
        &ec,
        &keycloak_claims(&provider.base_url, "bob", &["consumer"]),
    );
    let principal = issuer.validate(&token).await.unwrap();
    assert_eq!(principal.subject, "ext:provider:bob");
    assert_eq!(principal.roles, ["consumer"]);

    // The keys came from the discovered jwks_uri, fetched once; the second token used the cache.
    assert_eq!(provider.state.discovery_requests.load(Ordering::SeqCst), 1);
    assert_eq!(provider.jwks_requests(), 1);
    // Cached keys validate without waiting (the synchronous path).
    issuer.validate_cached(&token).unwrap();
}

#[tokio::test]
async fn forged_misdirected_and_expired_tokens_are_refused() {
    let rsa = rs256_key("rsa-1");
    let ec = es256_key("ec-1");
    let provider = Provider::start(&[&rsa, &ec]).await;
    let issuer = issuer(provider.settings());
    let base = &provider.base_url;
    let good = keycloak_claims(base, "alice", &["viewer"]);
    issuer.validate(&sign(&ec, &good)).await.unwrap();

    let mut other_audience = good.clone();
    other_audience["aud"] = json!("another-service");
    let error = refused(
        issuer.validate(&sign(&ec, &other_audience)).await,
        "audience",
    );
    assert!(error.contains("audience"), "{error}");

    let mut other_issuer = good.clone();
    other_issuer["iss"] = json!("https://elsewhere.example.com");
    let error = refused(issuer.validate(&sign(&ec, &other_issuer)).await, "issuer");
    assert!(error.contains("issuer"), "{error}");

    let mut expired = good.clone();
    expired["exp"] = json!(now_s() - 3600);
    expired["nbf"] = json!(now_s() - 7200);
    let error = refused(issuer.validate(&sign(&rsa, &expired)).await, "expired");
    assert!(error.contains("expired"), "{error}");

    let mut not_yet = good.clone();
    not_yet["nbf"] = json!(now_s() + 3600);
    refused(
        issuer.validate(&sign(&rsa, &not_yet)).await,
        "not valid yet",
    );

    let mut no_audience = good.clone();
    no_audience.as_object_mut().unwrap().remove("aud");
    refused(
        issuer.validate(&sign(&rsa, &no_audience)).await,
        "no audience",
    );

    // The payload changed after signing: the roles of an admin, the signature of a viewer.
    let token = sign(&rsa, &good);
    let mut parts: Vec<&str> = token.split('.').collect();
    let admin = URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&keycloak_claims(base, "alice", &["admin"])).unwrap());
    parts[1] = &admin;
    let error = refused(issuer.validate(&parts.join(".")).await, "tampered");
    assert!(error.contains("signature is not valid"), "{error}");

    // No signature at all.
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#),
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&good).unwrap())
    );
    refused(issuer.validate(&unsigned).await, "alg none");

    // HS256 with the RSA public key as the shared secret (the algorithm confusion attack).
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa-1".into());
    let confused = jsonwebtoken::encode(
        &header,
        &good,
        &EncodingKey::from_secret(RSA_MODULUS.as_bytes()),
    )
    .unwrap();
    let error = refused(issuer.validate(&confused).await, "HS256");
    assert!(error.contains("HS256"), "{error}");

    // An ES256 header on the RSA key's kid.
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("rsa-1".into());
    let mismatched = jsonwebtoken::encode(&header, &good, &ec.encoding).unwrap();
    refused(
        issuer.validate(&mismatched).await,
        "algorithm of another key",
    );

    // Signed by a key the provider does not publish, under a kid it does.
    let stranger = es256_key("ec-1");
    let error = refused(issuer.validate(&sign(&stranger, &good)).await, "stranger");
    assert!(error.contains("signature is not valid"), "{error}");

    // A subject claim that is missing.
    let mut no_subject = good.clone();
    no_subject.as_object_mut().unwrap().remove("sub");
    let error = refused(issuer.validate(&sign(&ec, &no_subject)).await, "no subject");
    assert!(error.contains("subject"), "{error}");

    // Tokens are routed by their exact `iss`: to this issuer, to the built-in one, or refused.
    let issuers = ExternalIssuers::new(vec![provider.settings()]).unwrap();
    let builtin = "http://127.0.0.1:1";
    let routed = issuers.route(&sign(&ec, &good), builtin).unwrap().unwrap();
    assert_eq!(routed.settings().issuer, *base);
    let mut builtins = good.clone();
    builtins["iss"] = json!(builtin);
    assert!(issuers
        .route(&sign(&ec, &builtins), builtin)
        .unwrap()
        .is_none());
    let mut trailing_slash = good.clone();
    trailing_slash["iss"] = json!(format!("{base}/"));
    let Err(error) = issuers.route(&sign(&ec, &trailing_slash), builtin) else {
        panic!("an issuer differing by a slash is trusted");
    };
    assert!(error.to_string().contains("not trusted"), "{error}");
    assert!(issuers.route("not.a-token", builtin).is_err());
    // With no external issuers every token goes to the built-in validation.
    assert!(ExternalIssuers::default()
        .route(&sign(&ec, &trailing_slash), builtin)
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_rotated_key_validates_after_one_refetch() {
    let old = es256_key("key-2026-01");
    let provider = Provider::start(&[&old]).await;
    let issuer = issuer(ExternalIssuerSettings {
        min_refetch_interval: Duration::from_millis(300),
        ..provider.settings()
    });
    issuer
        .validate(&sign(
            &old,
            &keycloak_claims(&provider.base_url, "alice", &["producer"]),
        ))
        .await
        .unwrap();
    assert_eq!(provider.jwks_requests(), 1);

    // The provider rotates: a new kid, the old key still published for its last tokens.
    let new = rs256_key("key-2026-02");
    provider.publish(&[&old, &new]);
    let token = sign(
        &new,
        &keycloak_claims(&provider.base_url, "alice", &["producer"]),
    );
    // Within the minimum interval of the last fetch the unknown key is refused without a
    // fetch; once it has passed, one refetch brings the key.
    let principal = poll(DEADLINE, Duration::from_millis(50), || async {
        issuer
            .validate(&token)
            .await
            .map_err(|error| error.to_string())
    })
    .await
    .unwrap();
    assert_eq!(principal.roles, ["producer"]);
    assert_eq!(provider.jwks_requests(), 2, "one refetch for the new key");
    let old_token = sign(&old, &keycloak_claims(&provider.base_url, "alice", &[]));
    issuer.validate(&old_token).await.unwrap();
    assert_eq!(provider.jwks_requests(), 2);

    // The provider stops publishing the old key: its tokens stop validating at the next
    // fetch, though they were verified (and remembered) before.
    provider.publish(&[&new]);
    issuer.keys().refresh().await.unwrap();
    let error = refused(issuer.validate(&old_token).await, "a withdrawn key");
    assert!(error.contains("unknown signing key"), "{error}");
    assert_eq!(issuer.validate(&token).await.unwrap().roles, ["producer"]);
}

#[tokio::test]
async fn a_burst_of_unknown_keys_fetches_at_most_once_per_interval() {
    let known = es256_key("known");
    let provider = Provider::start(&[&known]).await;
    // The JWKS answers slowly, so the burst's misses overlap the first fetch.
    provider.state.jwks_delay_ms.store(300, Ordering::SeqCst);
    let issuer = issuer(provider.settings());
    let claims = keycloak_claims(&provider.base_url, "mallory", &["admin"]);
    let forged: Vec<String> = (0..50)
        .map(|index| sign(&es256_key(&format!("forged-{index}")), &claims))
        .collect();

    let answers =
        futures::future::join_all(forged.iter().map(|token| issuer.validate(token))).await;
    assert!(answers.iter().all(Result::is_err));
    assert_eq!(provider.jwks_requests(), 1, "the burst shared one fetch");

    // The synchronous path starts background refetches, rate-limited alike.
    for (index, token) in forged.iter().enumerate() {
        assert!(issuer.validate_cached(token).is_err());
        issuer.refetch_in_background(Some(format!("forged-{index}")));
    }
    let answers =
        futures::future::join_all(forged.iter().map(|token| issuer.validate(token))).await;
    assert!(answers.iter().all(Result::is_err));
    assert_eq!(
        provider.jwks_requests(),
        1,
        "no fetch within the minimum interval"
    );

    // The keys fetched serve the tokens they sign.
    issuer.validate(&sign(&known, &claims)).await.unwrap();
    assert_eq!(issuer.keys().fetch_count(), 1);
}

#[tokio::test]
async fn cached_keys_keep_working_while_the_provider_is_down() {
    let key = rs256_key("rsa-1");
    let mut provider = Provider::start(&[&key]).await;
    let issuers = ExternalIssuers::new(vec![ExternalIssuerSettings {
        jwks_url: Some(format!("{}/jwks", provider.base_url)),
        refresh_interval: Duration::from_secs(1),
        min_refetch_interval: Duration::from_millis(100),
        ..provider.settings()
    }])
    .unwrap();
    // The background fetch at start.
    issuers.start();
    let issuer = issuers.get(&provider.base_url).unwrap().clone();
    let token = sign(
        &key,
        &keycloak_claims(&provider.base_url, "alice", &["viewer"]),
    );
    poll(DEADLINE, Duration::from_millis(20), || async {
        issuer
            .validate_cached(&token)
            .map_err(|error| format!("{error:?}"))
    })
    .await
    .unwrap();
    assert_eq!(provider.state.discovery_requests.load(Ordering::SeqCst), 0);

    provider.stop().await;
    let error = issuer.keys().refresh().await.unwrap_err();
    assert!(error.to_string().contains("/jwks"), "{error}");
    // The timer's fetches fail too (its next one is due within a second).
    let failed_after = issuer.keys().fetch_count();
    poll(DEADLINE, Duration::from_millis(50), || async {
        match issuer.keys().fetch_count() > failed_after {
            true => Ok(()),
            false => Err("no refresh yet".to_string()),
        }
    })
    .await
    .unwrap();
    assert_eq!(issuer.validate(&token).await.unwrap().roles, ["viewer"]);
    assert_eq!(issuer.keys().keys().len(), 1);
}

#[tokio::test]
async fn keys_are_fetched_over_https_from_a_provider_with_a_private_ca() {
    let ca = common::tls::TestCa::new("oidc test CA");
    let files = ca.issue("provider", "provider");
    let ca_file = ca.write_ca();
    let key = es256_key("ec-1");
    let provider = Provider::start_with_tls(&[&key], Some(&files)).await;
    assert!(provider.base_url.starts_with("https://"));
    let token = sign(
        &key,
        &keycloak_claims(&provider.base_url, "alice", &["consumer"]),
    );

    let trusting = issuer(ExternalIssuerSettings {
        ca_file: Some(ca_file),
        ..provider.settings()
    });
    assert_eq!(trusting.validate(&token).await.unwrap().roles, ["consumer"]);

    // With the system's roots only, the private CA's certificate is not trusted.
    let system_roots = issuer(provider.settings());
    let error = system_roots.keys().refresh().await.unwrap_err().to_string();
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    refused(system_roots.validate(&token).await, "untrusted JWKS server");
}

#[tokio::test]
async fn a_node_fetches_its_external_issuers_keys_at_start() {
    let key = rs256_key("rsa-1");
    let provider = Provider::start(&[&key]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[auth]
builtin_issuer_enabled = false

[[auth.external_issuers]]
issuer = "{}"
audience = "{AUDIENCE}"
roles_claim = "realm_access.roles"
"#,
            provider.base_url
        ),
    )
    .unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]).await;

    poll(DEADLINE, Duration::from_millis(50), || async {
        match server
            .metric(
                "herald_auth_jwks_fetches_total",
                &[("issuer", provider.base_url.as_str()), ("outcome", "ok")],
            )
            .await
        {
            Some(count) if count >= 1.0 => Ok(()),
            other => Err(format!("fetches: {other:?}")),
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    assert_eq!(provider.state.discovery_requests.load(Ordering::SeqCst), 1);
    assert_eq!(provider.jwks_requests(), 1);

    // The built-in issuer is off: no tokens from it.
    let response = server
        .http_client()
        .post(server.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials&client_id=a&client_secret=b")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "unsupported_grant_type", "{body}");
}

/// With `--auth`, a provider's tokens go through the same middleware as the built-in issuer's:
/// the roles in their claim grant rights (produce with `producer`, 403 with `viewer`); after
/// the provider rotates its key, a token with the new `kid` is accepted on its first use (the
/// request waits for the one refetch instead of being refused); a token of a key the provider
/// never published is refused with 401.
#[tokio::test]
async fn a_node_with_auth_enforces_rights_from_a_providers_tokens() {
    let first = es256_key("es-1");
    let provider = Provider::start(&[&first]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[auth]
enabled = true

[[auth.external_issuers]]
issuer = "{}"
audience = "{AUDIENCE}"
roles_claim = "realm_access.roles"
jwks_min_refetch_interval_ms = 100
"#,
            provider.base_url
        ),
    )
    .unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]).await;
    let issuer = provider.base_url.clone();
    let admin = sign(&first, &keycloak_claims(&issuer, "ops", &["admin"]));
    let create = server
        .http_client()
        .post(server.url("/v1/topics"))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body(json!({"name": "orders", "partitions": 1}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), reqwest::StatusCode::CREATED);
    let produce = |token: String| {
        let request = server
            .http_client()
            .post(server.url("/v1/topics/orders/messages"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(json!({"messages": [{"value": "hi"}]}).to_string());
        async move { request.send().await.unwrap() }
    };
    let producer = sign(&first, &keycloak_claims(&issuer, "svc", &["producer"]));
    let viewer = sign(&first, &keycloak_claims(&issuer, "dash", &["viewer"]));
    let answer = poll(DEADLINE, Duration::from_millis(100), || {
        let producer = producer.clone();
        let produce = &produce;
        async move {
            let response = produce(producer).await;
            match response.status() {
                reqwest::StatusCode::OK => Ok(()),
                status => Err(format!("produce answered {status}")),
            }
        }
    })
    .await;
    answer.unwrap_or_else(|seen| server.fail(&seen));
    assert_eq!(
        produce(viewer).await.status(),
        reqwest::StatusCode::FORBIDDEN
    );

    let second = rs256_key("rsa-2");
    provider.publish(&[&first, &second]);
    // Unknown keys refetch at most once per `jwks_min_refetch_interval_ms` (100 ms here), and
    // the node's start may have fetched just now: let that interval pass (a rule about time, not
    // an event to wait for), so the rotated token's refetch is allowed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fetches = provider.jwks_requests();
    let rotated = sign(&second, &keycloak_claims(&issuer, "svc", &["producer"]));
    assert_eq!(
        produce(rotated).await.status(),
        reqwest::StatusCode::OK,
        "a token of the rotated key is accepted on first use"
    );
    assert_eq!(provider.jwks_requests(), fetches + 1);

    let stranger = es256_key("es-unpublished");
    let forged = sign(&stranger, &keycloak_claims(&issuer, "svc", &["admin"]));
    let response = produce(forged).await;
    assert_eq!(response.status(), reqwest::StatusCode::UNAUTHORIZED);
    assert!(response.headers().contains_key("www-authenticate"));
}
