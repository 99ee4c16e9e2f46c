//! The built-in OAuth2 issuer: clients created with a secret shown once, the client-credentials
//! grant by HTTP Basic and by form (through the `oauth2` crate, as a client library would), its
//! RFC 6749 errors, the JWKS and discovery document naming the key tokens are signed with, and
//! secret rotation and deletion taking effect at once, and renewal of a token by token exchange
//! (RFC 8693) until its secret is rotated. What the issuer keeps on disk: a private data
//! directory whatever the umask, the signing key never in plaintext in any of its files. What
//! an anonymous client can make it spend: wrong secrets are hashed a few at a time (503 with
//! `Retry-After` past it) and rate-limited per client id and per address (429), and the node's
//! memory stays put under a flood of them.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::auth::{create_client, token_by_basic};
use crate::common::Server;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn token_header(token: &str) -> Value {
    let header = token.split('.').next().unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap()
}

#[tokio::test]
async fn clients_get_tokens_signed_with_a_published_key() {
    let server = Server::start().await;
    let secret = create_client(&server, "billing", &["producer"]).await;

    let (status, token) = token_by_basic(&server, "billing", &secret).await;
    assert_eq!(status, StatusCode::OK, "{token}");
    assert_eq!(token["token_type"], "Bearer");
    assert_eq!(token["expires_in"], 3600);
    let access_token = token["access_token"].as_str().unwrap();
    let header = token_header(access_token);
    assert_eq!(header["alg"], "ES256");

    let jwks: Value = server.get("/oauth/jwks.json").await.json().await.unwrap();
    assert_eq!(jwks["keys"][0]["kid"], header["kid"]);
    assert_eq!(jwks["keys"][0]["kty"], "EC");
    let discovery: Value = server
        .get("/.well-known/openid-configuration")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        discovery["token_endpoint"],
        format!("{}/oauth/token", server.base_url())
    );

    // The oauth2 crate, with the secret in the form (client_secret_post).
    let client = oauth2::basic::BasicClient::new(oauth2::ClientId::new("billing".into()))
        .set_client_secret(oauth2::ClientSecret::new(secret.clone()))
        .set_auth_type(oauth2::AuthType::RequestBody)
        .set_token_uri(oauth2::TokenUrl::new(server.url("/oauth/token")).unwrap());
    let http = oauth2::reqwest::ClientBuilder::new()
        .redirect(oauth2::reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let granted = client
        .exchange_client_credentials()
        .request_async(&http)
        .await
        .expect("the oauth2 crate gets a token");
    use oauth2::TokenResponse;
    assert_eq!(
        token_header(granted.access_token().secret())["kid"],
        header["kid"]
    );
}

#[tokio::test]
async fn wrong_credentials_and_bad_grants_get_rfc6749_errors() {
    let server = Server::start().await;
    let secret = create_client(&server, "mailer", &["consumer"]).await;
    let (status, body) = token_by_basic(&server, "mailer", "wrong").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "invalid_client");
    let (status, body) = token_by_basic(&server, "nobody", &secret).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "invalid_client");

    let form = |body: &'static str| {
        server
            .http_client()
            .post(server.url("/oauth/token"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let answer = form("grant_type=password&username=a&password=b")
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.json::<Value>().await.unwrap()["error"],
        "unsupported_grant_type"
    );
    let answer = form("client_id=mailer").await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.json::<Value>().await.unwrap()["error"],
        "invalid_request"
    );

    // Creating the same client again is a conflict; a bad id is refused.
    let again = server
        .post_json(
            "/v1/auth/clients",
            &json!({"client_id": "mailer", "roles": []}),
        )
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let bad = server
        .post_json(
            "/v1/auth/clients",
            &json!({"client_id": "no spaces", "roles": []}),
        )
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn rotation_and_deletion_take_effect_at_once() {
    let server = Server::start().await;
    let old = create_client(&server, "etl", &["producer", "consumer"]).await;
    let rotated = server
        .post_json("/v1/auth/clients/etl/secret", &json!({}))
        .await;
    let (status, body) = server.json(rotated).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let new = body["client_secret"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert_eq!(
        token_by_basic(&server, "etl", &old).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(token_by_basic(&server, "etl", &new).await.0, StatusCode::OK);

    let listed: Value = server.get("/v1/auth/clients").await.json().await.unwrap();
    // Beside the bootstrap `admin` client the node made on its first start.
    assert!(
        listed["clients"]
            .as_array()
            .unwrap()
            .iter()
            .any(|client| client["client_id"] == "etl"),
        "{listed}"
    );
    assert!(
        listed.to_string().find(&new).is_none(),
        "secrets are never listed"
    );

    let deleted = server.delete("/v1/auth/clients/etl").await;
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        token_by_basic(&server, "etl", &new).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        server.get("/v1/auth/clients/etl").await.status(),
        StatusCode::NOT_FOUND
    );
}

/// A token exchange (RFC 8693) of `token` for its successor: the answer's status and body.
async fn renew(server: &Server, token: &str) -> (StatusCode, Value) {
    let body = format!(
        "grant_type={}&subject_token={token}&subject_token_type={}",
        "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange",
        "urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token"
    );
    let response = server
        .http_client()
        .post(server.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("JSON")
}

#[tokio::test]
async fn a_token_is_renewed_without_the_secret_until_the_secret_is_rotated() {
    // Clients are made with authentication off, then the node restarts with it on.
    let mut server = Server::start().await;
    let secret = create_client(&server, "console", &["viewer"]).await;
    let admin_secret = create_client(&server, "admin", &["admin"]).await;
    server.set_extra_args(vec!["--auth".to_string()]);
    server.restart().await;
    let admin = common::auth::token(&server, "admin", &admin_secret).await;
    let first = common::auth::token(&server, "console", &secret).await;

    let (status, renewed) = renew(&server, &first).await;
    assert_eq!(status, StatusCode::OK, "{renewed}");
    assert_eq!(
        renewed["issued_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    let second = renewed["access_token"]
        .as_str()
        .expect("a token")
        .to_string();
    assert_ne!(second, first);
    let (before, after) = (claims(&first), claims(&second));
    assert_eq!(after["sub"], "console");
    assert_eq!(after["auth_time"], before["auth_time"], "the same session");
    // The successor works like the original.
    let topics = server
        .http_client()
        .get(server.url("/v1/topics"))
        .bearer_auth(&second)
        .send()
        .await
        .unwrap();
    assert_eq!(topics.status(), StatusCode::OK);

    // Garbage, a missing type and a foreign grant are refused without a token.
    let (status, body) = renew(&server, "not.a.token").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "invalid_grant", "{body}");
    let missing_type = server
        .http_client()
        .post(server.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange&subject_token={second}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(missing_type.status(), StatusCode::BAD_REQUEST);
    let body: Value = missing_type.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request", "{body}");

    // Rotating the secret (it leaked, say) ends the session: its tokens are not renewed, nor
    // accepted. So does a rotation in the very second the session began: whole seconds
    // (`auth_time`, `iat`) cannot tell it from one before, so a token is bound to the secret
    // it was issued under. Start early in a second, so token and rotation share it.
    common::poll(Duration::from_secs(5), Duration::from_millis(5), || async {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis();
        if millis < 100 {
            Ok(())
        } else {
            Err(format!("{millis} ms into the second"))
        }
    })
    .await
    .unwrap_or_else(|seen| panic!("{seen}"));
    let second = common::auth::token(&server, "console", &secret).await;
    let rotated = server
        .http_client()
        .post(server.url("/v1/auth/clients/console/secret"))
        .bearer_auth(&admin)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status(), StatusCode::OK);
    let (status, body) = renew(&server, &second).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid_grant");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("rotated"),
        "{body}"
    );
    let topics = server
        .http_client()
        .get(server.url("/v1/topics"))
        .bearer_auth(&second)
        .send()
        .await
        .unwrap();
    assert_eq!(topics.status(), StatusCode::UNAUTHORIZED);

    let discovery: Value = server
        .get("/.well-known/openid-configuration")
        .await
        .json()
        .await
        .unwrap();
    assert!(
        discovery["grant_types_supported"]
            .as_array()
            .unwrap()
            .iter()
            .any(|grant| grant == "urn:ietf:params:oauth:grant-type:token-exchange"),
        "{discovery}"
    );
}

/// Every file and directory under `root`, directories first.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![root.to_path_buf()];
    let mut index = 0;
    while index < found.len() {
        let path = found[index].clone();
        index += 1;
        if path.is_dir() && !path.is_symlink() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&path)
                .unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
                .map(|entry| entry.expect("a directory entry").path())
                .collect();
            entries.sort();
            found.extend(entries);
        }
    }
    found
}

/// The start of an ECPrivateKey (RFC 5915) inside a P-256 PKCS#8 document as ring writes
/// one: the OCTET STRING around it, its version 1 and the 32-byte private key's header. The
/// private key itself follows.
const PKCS8_P256_PRIVATE_KEY: &[u8] = &[0x04, 0x6d, 0x30, 0x6b, 0x02, 0x01, 0x01, 0x04, 0x20];

/// The files under `root` that hold a P-256 private key in plaintext.
fn files_with_plaintext_keys(root: &Path) -> Vec<PathBuf> {
    walk(root)
        .into_iter()
        .filter(|path| path.is_file())
        .filter(|path| {
            let bytes = std::fs::read(path).unwrap_or_default();
            bytes
                .windows(PKCS8_P256_PRIVATE_KEY.len())
                .any(|window| window == PKCS8_P256_PRIVATE_KEY)
        })
        .collect()
}

/// The paths under `root` that users other than the owner may read, write or enter.
fn open_to_others(root: &Path) -> Vec<(PathBuf, u32)> {
    walk(root)
        .into_iter()
        .filter_map(|path| {
            let mode = std::fs::symlink_metadata(&path).ok()?.permissions().mode() & 0o777;
            (mode & 0o077 != 0).then_some((path, mode))
        })
        .collect()
}

#[tokio::test]
async fn the_data_directory_is_private_and_holds_no_plaintext_signing_key() {
    let mut server = Server::prepare(1, 0, 0, Vec::new());
    // A data directory an older version (or a careless copy) left open to everyone.
    let data = server.data_dir();
    std::fs::create_dir_all(data.join("old")).unwrap();
    std::fs::write(data.join("old").join("notes"), b"kept").unwrap();
    for (path, mode) in [(&data, 0o755), (&data.join("old"), 0o777)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(
        data.join("old").join("notes"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // And a process umask that would make every new file readable (and writable) by all.
    server.set_umask(0o000);
    let mut server = server.start_on_free_ports().await;

    // The cluster's first token creates its signing key, replicated through the raft log.
    let secret = create_client(&server, "keeper", &["producer"]).await;
    let (status, body) = token_by_basic(&server, "keeper", &secret).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let loose = open_to_others(&data);
    assert!(loose.is_empty(), "open to other users: {loose:?}");
    assert!(
        server.logs().concat().contains("was open to other users"),
        "no warning about the open data directory:\n{}",
        server.log_tail()
    );
    let leaking = files_with_plaintext_keys(&data);
    assert!(
        leaking.is_empty(),
        "a private key in plaintext in {leaking:?}"
    );

    // After a clean stop (memtables flushed to table files) and a start that signs again.
    server.stop().await;
    server.restart().await;
    let (status, body) = token_by_basic(&server, "keeper", &secret).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.stop().await;
    let loose = open_to_others(&data);
    assert!(loose.is_empty(), "open to other users: {loose:?}");
    let leaking = files_with_plaintext_keys(&data);
    assert!(
        leaking.is_empty(),
        "a private key in plaintext in {leaking:?}"
    );
}

/// `count` token requests for `client` with a wrong secret, all at once; their statuses and
/// `Retry-After` headers.
async fn wrong_secrets_at_once(
    server: &Server,
    client: &str,
    count: usize,
) -> Vec<(StatusCode, Option<String>)> {
    let requests = (0..count).map(|attempt| {
        let request = server
            .http_client()
            .post(server.url("/oauth/token"))
            .basic_auth(client, Some(format!("wrong-{attempt}")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials");
        async move {
            let response = request.send().await.expect("a token request");
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .map(String::from);
            (response.status(), retry_after)
        }
    });
    futures::future::join_all(requests).await
}

/// The resident memory of process `pid`, in bytes.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// A node started with a configuration file holding `toml`; the file lives as long as the
/// returned guard.
async fn start_with_config(toml: &str) -> (Server, tempfile::NamedTempFile) {
    use std::io::Write;
    let mut config = tempfile::NamedTempFile::new().expect("a config file");
    config.write_all(toml.as_bytes()).expect("write the config");
    let path = config.path().to_string_lossy().into_owned();
    (Server::start_with(&["--config", &path]).await, config)
}

#[tokio::test]
async fn wrong_secrets_are_hashed_a_few_at_a_time() {
    // One hash at a time, two waiting, and failures not rate-limited: only the bound on
    // concurrent hashes answers here.
    let (server, _config) = start_with_config(
        "[auth]\nmax_concurrent_secret_checks = 1\nsecret_check_queue = 2\n\
         failed_token_requests_per_client_per_min = 0\n\
         failed_token_requests_per_address_per_min = 0\n",
    )
    .await;
    let secret = create_client(&server, "busy", &["consumer"]).await;
    let answers = wrong_secrets_at_once(&server, "busy", 40).await;
    let busy: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::SERVICE_UNAVAILABLE)
        .collect();
    assert!(!busy.is_empty(), "nothing was turned away: {answers:?}");
    assert!(
        busy.iter().all(|(_, retry)| retry.as_deref() == Some("1")),
        "{busy:?}"
    );
    assert!(
        answers
            .iter()
            .all(|(status, _)| *status == StatusCode::UNAUTHORIZED
                || *status == StatusCode::SERVICE_UNAVAILABLE),
        "{answers:?}"
    );
    // The right secret still gets its token once the flood is over.
    let (status, body) = token_by_basic(&server, "busy", &secret).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_flood_of_wrong_secrets_leaves_memory_alone() {
    // The defaults: a flood from one address is cut short by the rate limit and the hashes
    // that do run are a few at a time, each in memory the node keeps for it.
    let server = Server::start().await;
    create_client(&server, "flooded", &["consumer"]).await;
    let pid = server.pid().expect("the node's pid");
    let before = resident_bytes(pid);
    for _ in 0..2 {
        let answers = wrong_secrets_at_once(&server, "flooded", 200).await;
        assert!(
            answers.iter().all(|(status, _)| [
                StatusCode::UNAUTHORIZED,
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::SERVICE_UNAVAILABLE
            ]
            .contains(status)),
            "{answers:?}"
        );
    }
    let after = resident_bytes(pid);
    let grown = after.saturating_sub(before);
    eprintln!(
        "resident memory before the flood {} MiB, after {} MiB",
        before >> 20,
        after >> 20
    );
    assert!(
        grown < 160 << 20,
        "resident memory grew by {} MiB (from {} MiB)",
        grown >> 20,
        before >> 20
    );
}

#[tokio::test]
async fn failed_token_requests_are_rate_limited_per_client_and_per_address() {
    let (server, _config) = start_with_config(
        "[auth]\nfailed_token_requests_per_client_per_min = 5\n\
         failed_token_requests_per_address_per_min = 8\n",
    )
    .await;
    let target = create_client(&server, "target", &["consumer"]).await;
    let other = create_client(&server, "other", &["consumer"]).await;

    // Five failures for `target`: the sixth attempt is refused before its secret is checked,
    // even the right one, with the time to wait.
    for attempt in 0..5 {
        let (status, body) = token_by_basic(&server, "target", &format!("no-{attempt}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let response = server
        .http_client()
        .post(server.url("/oauth/token"))
        .basic_auth("target", Some(&target))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "slow_down", "{body}");

    // Another client from the same address is still served: 5 of the address's 8.
    let (status, body) = token_by_basic(&server, "other", &other).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Three more failures (unknown clients count too) use up the address's budget: then every
    // client from it waits.
    for attempt in 0..3 {
        let (status, body) = token_by_basic(&server, &format!("ghost-{attempt}"), "x").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let (status, body) = token_by_basic(&server, "other", &other).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
}

/// `GET /v1/topics` with `token`: the status.
async fn list_topics(server: &Server, token: &str) -> StatusCode {
    server
        .http_client()
        .get(server.url("/v1/topics"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

/// A token is valid for the client it was issued to, not for a client made later under the
/// same id: deleting a client and creating it again (with more roles, say) does not bring its
/// old tokens back.
#[tokio::test]
async fn a_recreated_client_does_not_revive_the_old_clients_tokens() {
    let mut server = Server::start().await;
    let secret = create_client(&server, "svc", &["viewer"]).await;
    let admin_secret = create_client(&server, "admin", &["admin"]).await;
    server.set_extra_args(vec!["--auth".to_string()]);
    server.restart().await;
    let admin = common::auth::token(&server, "admin", &admin_secret).await;
    let old = common::auth::token(&server, "svc", &secret).await;
    assert_eq!(list_topics(&server, &old).await, StatusCode::OK);

    let admin_call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = server
            .http_client()
            .request(method, server.url(path))
            .bearer_auth(&admin);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let deleted = admin_call(reqwest::Method::DELETE, "/v1/auth/clients/svc", None)
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(list_topics(&server, &old).await, StatusCode::UNAUTHORIZED);
    let created = admin_call(
        reqwest::Method::POST,
        "/v1/auth/clients",
        Some(json!({"client_id": "svc", "roles": ["admin"]})),
    )
    .await
    .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let new_secret = created.json::<Value>().await.unwrap()["client_secret"]
        .as_str()
        .unwrap()
        .to_string();
    // The old token stays refused, with the new client's admin role or without.
    assert_eq!(list_topics(&server, &old).await, StatusCode::UNAUTHORIZED);
    let clients = server
        .http_client()
        .get(server.url("/v1/auth/clients"))
        .bearer_auth(&old)
        .send()
        .await
        .unwrap();
    assert_eq!(clients.status(), StatusCode::UNAUTHORIZED);
    let (status, _) = renew(&server, &old).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // The new client's own tokens work.
    let new = common::auth::token(&server, "svc", &new_secret).await;
    assert_eq!(list_topics(&server, &new).await, StatusCode::OK);
}

/// The order of P-256, big-endian.
const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The token with its ES256 signature `(r, s)` replaced by `(r, n - s)`, which verifies too.
fn with_other_s(token: &str) -> String {
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let mut signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
    assert_eq!(signature.len(), 64);
    let mut borrow = 0i16;
    for index in (0..32).rev() {
        let mut difference =
            i16::from(P256_ORDER[index]) - i16::from(signature[32 + index]) - borrow;
        borrow = i16::from(difference < 0);
        if difference < 0 {
            difference += 256;
        }
        signature[32 + index] = difference as u8;
    }
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// ECDSA signatures are malleable: `(r, n - s)` verifies wherever `(r, s)` does. The issuer
/// signs with the low `s` only and accepts no other, so a token has one valid text.
#[tokio::test]
async fn a_token_has_exactly_one_valid_signature() {
    let mut server = Server::start().await;
    let secret = create_client(&server, "svc", &["viewer"]).await;
    server.set_extra_args(vec!["--auth".to_string()]);
    server.restart().await;
    for _ in 0..4 {
        let token = common::auth::token(&server, "svc", &secret).await;
        assert_eq!(list_topics(&server, &token).await, StatusCode::OK);
        let twin = with_other_s(&token);
        assert_ne!(twin, token);
        assert_eq!(
            list_topics(&server, &twin).await,
            StatusCode::UNAUTHORIZED,
            "the twin of {token}"
        );
    }
}
