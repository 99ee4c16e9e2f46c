//! How the CLI proves who it is and which servers it trusts: `--token`, or `--client-id` and
//! `--client-secret` (a token fetched at `POST /oauth/token` and fetched again before it
//! expires, so `consume --follow` runs for days), and `--ca-cert` for `https://` servers with
//! a private CA. The flags are global, so they are set once per process ([`configure`]) and
//! every [`Api`](super::client::Api) and WebSocket uses them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use reqwest::Url;
use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::client::ProblemError;

/// What the global flags say.
#[derive(Debug, Clone, Default)]
pub struct CredentialOptions {
    pub token: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub ca_cert: Option<PathBuf>,
}

/// The process's settings, from [`configure`]; none means anonymous, system roots.
static SETTINGS: OnceLock<Settings> = OnceLock::new();

#[derive(Clone)]
pub struct Settings {
    /// PEM certificates trusted (beside none other) for `https://` servers, when given.
    pub ca_certs: Option<Arc<Vec<u8>>>,
    pub tokens: Option<Arc<TokenSource>>,
}

/// Reads the flags once for the whole process: the CA file is read and checked now, so a
/// wrong path fails before any request.
pub fn configure(server: &str, options: &CredentialOptions) -> anyhow::Result<()> {
    let ca_certs = match &options.ca_cert {
        Some(path) => Some(Arc::new(read_ca(path)?)),
        None => None,
    };
    let tokens = match (&options.token, &options.client_id, &options.client_secret) {
        (Some(token), None, None) => Some(TokenSource::fixed(token.clone())),
        (None, Some(client_id), Some(secret)) => Some(TokenSource::client_credentials(
            server,
            client_id.clone(),
            secret.clone(),
            ca_certs.clone(),
        )?),
        (None, None, None) => None,
        (Some(_), _, _) => anyhow::bail!("--token excludes --client-id and --client-secret"),
        _ => anyhow::bail!("--client-id and --client-secret go together"),
    };
    let _ = SETTINGS.set(Settings {
        ca_certs,
        tokens: tokens.map(Arc::new),
    });
    Ok(())
}

/// The process's settings (anonymous, system roots, when [`configure`] never ran).
pub fn settings() -> Settings {
    SETTINGS.get().cloned().unwrap_or(Settings {
        ca_certs: None,
        tokens: None,
    })
}

fn read_ca(path: &Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .with_context(|| format!("cannot read the CA certificate {}", path.display()))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem)
        .with_context(|| format!("{} is not a PEM certificate", path.display()))?;
    if certificates.is_empty() {
        anyhow::bail!("{} holds no PEM certificate", path.display());
    }
    Ok(pem)
}

/// Trusts `ca_certs` (only them) when given.
pub fn trust(
    builder: reqwest::ClientBuilder,
    ca_certs: Option<&[u8]>,
) -> anyhow::Result<reqwest::ClientBuilder> {
    let Some(pem) = ca_certs else {
        return Ok(builder);
    };
    let certificates =
        reqwest::Certificate::from_pem_bundle(pem).context("the CA certificate is not PEM")?;
    Ok(builder.tls_certs_only(certificates))
}

/// Where the bearer token comes from.
pub enum TokenSource {
    /// `--token`: sent as given (it is not refreshed).
    Fixed(String),
    /// `--client-id`/`--client-secret`: fetched, cached, fetched again before it expires.
    ClientCredentials {
        token_url: Url,
        client_id: String,
        client_secret: String,
        http: reqwest::Client,
        cached: Mutex<Option<CachedToken>>,
    },
}

pub struct CachedToken {
    token: String,
    refresh_at: Instant,
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: u64,
}

/// How long before a token expires a new one is fetched: a fifth of its life, so a clock
/// skew or a slow request never sends an expired one.
fn refresh_after(expires_in: Duration) -> Duration {
    expires_in - expires_in / 5
}

impl TokenSource {
    pub fn fixed(token: String) -> TokenSource {
        TokenSource::Fixed(token)
    }

    pub fn client_credentials(
        server: &str,
        client_id: String,
        client_secret: String,
        ca_certs: Option<Arc<Vec<u8>>>,
    ) -> anyhow::Result<TokenSource> {
        let mut token_url = super::client::parse_server(server)?;
        token_url.set_path("/oauth/token");
        let http = trust(
            super::http_client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(30))
                .no_proxy(),
            ca_certs.as_deref().map(Vec::as_slice),
        )?
        .build()
        .context("could not build the HTTP client")?;
        Ok(TokenSource::ClientCredentials {
            token_url,
            client_id,
            client_secret,
            http,
            cached: Mutex::new(None),
        })
    }

    /// A token valid now: the cached one, or a new one when it is due for refresh.
    pub async fn bearer(&self) -> anyhow::Result<String> {
        let (token_url, client_id, client_secret, http, cached) = match self {
            TokenSource::Fixed(token) => return Ok(token.clone()),
            TokenSource::ClientCredentials {
                token_url,
                client_id,
                client_secret,
                http,
                cached,
            } => (token_url, client_id, client_secret, http, cached),
        };
        let mut cached = cached.lock().await;
        if let Some(token) = cached.as_ref() {
            if Instant::now() < token.refresh_at {
                return Ok(token.token.clone());
            }
        }
        let requested = Instant::now();
        let response = http
            .post(token_url.clone())
            .basic_auth(client_id, Some(client_secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .with_context(|| format!("could not reach {token_url} for a token"))?;
        if !response.status().is_success() {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            let problem = ProblemError::from_parts(
                reqwest::Method::POST,
                "/oauth/token".into(),
                status,
                &text,
            );
            // RFC 6749 errors say `error`/`error_description` rather than `code`/`detail`.
            let field = |name: &str| problem.body.get(name).and_then(|v| v.as_str());
            anyhow::bail!(
                "could not get a token for client '{client_id}': HTTP {status}{}",
                match (field("error"), field("error_description")) {
                    (Some(error), Some(description)) => format!(" ({error}): {description}"),
                    (Some(error), None) => format!(" ({error})"),
                    _ => problem.detail.map(|d| format!(": {d}")).unwrap_or_default(),
                }
            );
        }
        let answer: TokenAnswer = response
            .json()
            .await
            .context("the token endpoint's answer is not a token")?;
        let refresh_at = requested + refresh_after(Duration::from_secs(answer.expires_in));
        *cached = Some(CachedToken {
            token: answer.access_token.clone(),
            refresh_at,
        });
        Ok(answer.access_token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_refreshed_with_a_fifth_of_their_life_left() {
        assert_eq!(
            refresh_after(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        assert_eq!(
            refresh_after(Duration::from_secs(60)),
            Duration::from_secs(48)
        );
    }

    /// A token endpoint that counts its grants and answers tokens lasting one second.
    async fn short_token_endpoint() -> (String, Arc<std::sync::atomic::AtomicU64>) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let grants = Arc::new(AtomicU64::new(0));
        let counted = grants.clone();
        let app = axum::Router::new().route(
            "/oauth/token",
            axum::routing::post(move || {
                let grant = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    axum::Json(serde_json::json!({
                        "access_token": format!("token-{grant}"),
                        "token_type": "Bearer",
                        "expires_in": 1
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{address}"), grants)
    }

    #[tokio::test]
    async fn a_token_is_reused_until_it_is_due_then_fetched_again() {
        use std::sync::atomic::Ordering;
        let (server, grants) = short_token_endpoint().await;
        let source =
            TokenSource::client_credentials(&server, "svc".into(), "secret".into(), None).unwrap();
        assert_eq!(source.bearer().await.unwrap(), "token-1");
        assert_eq!(source.bearer().await.unwrap(), "token-1");
        assert_eq!(grants.load(Ordering::SeqCst), 1);
        // The token lasts 1 s and is refreshed with a fifth of that left: after 0.8 s.
        tokio::time::sleep(Duration::from_millis(850)).await;
        assert_eq!(source.bearer().await.unwrap(), "token-2");
        assert_eq!(grants.load(Ordering::SeqCst), 2);
    }
}
