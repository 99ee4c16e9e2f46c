//! TLS on the client listener (rustls, ring provider): HTTP/1.1 and HTTP/2 by ALPN, WebSocket
//! and server-sent events included, since they all ride the same connections.
//!
//! The certificate and key are PEM files, loaded again on SIGHUP and when either file changes
//! (checked every `reload_check_interval_ms`): new connections get the new certificate, open
//! ones keep theirs, nothing is dropped. A reload that fails (a half-written file, a key that
//! does not match) is logged and the previous certificate stays.
//!
//! Handshakes run in their own tasks, never in the accept loop, so a client that connects and
//! says nothing holds up no one else; past `handshake_timeout_ms` it is dropped. In TLS-only
//! mode (the default once TLS is configured) a plaintext HTTP request on the port is answered
//! with a 400 problem saying to use https, and closed; with `allow_plaintext` it is served as
//! plain HTTP (for a migration).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::listener::{ClientStream, CountedStream};
use super::problem::{ApiError, PROBLEM_JSON};

/// Counter of certificate reloads, by outcome (`ok`, `failed`).
pub const TLS_RELOADS_TOTAL: &str = "herald_tls_reloads_total";
/// Counter of connections that did not become TLS: failed or timed-out handshakes, and
/// plaintext refused in TLS-only mode (`reason`).
pub const TLS_REJECTED_TOTAL: &str = "herald_tls_rejected_connections_total";

/// The first byte of a TLS record carrying a handshake (a ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Where the certificate comes from and how connections are taken (`[tls]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub allow_plaintext: bool,
    pub handshake_timeout: Duration,
    pub reload_check_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {path}: {source}")]
    Certificates {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("cannot read the private key {path}: {source}")]
    Key {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The node's current server configuration, swapped whole on a reload.
#[derive(Clone)]
pub struct TlsAcceptor {
    settings: Arc<TlsSettings>,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl TlsAcceptor {
    /// Loads the certificate and key; fails (the node does not start) when they are unusable.
    pub fn load(settings: TlsSettings) -> Result<TlsAcceptor, TlsError> {
        let config = server_config(&settings.cert_file, &settings.key_file)?;
        Ok(TlsAcceptor {
            settings: Arc::new(settings),
            current: Arc::new(RwLock::new(Arc::new(config))),
        })
    }

    /// Reads the files again; on success new handshakes use them.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.settings.cert_file, &self.settings.key_file)?;
        *self.current.write() = Arc::new(config);
        Ok(())
    }

    /// Reloads on SIGHUP and when the files change, until the process ends.
    pub fn spawn_reloader(&self) -> io::Result<()> {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let acceptor = self.clone();
        tokio::spawn(async move {
            let mut seen = acceptor.file_stamps();
            let mut check = tokio::time::interval(acceptor.settings.reload_check_interval);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let why = tokio::select! {
                    Some(()) = hangups.recv() => "SIGHUP",
                    _ = check.tick() => {
                        let now = acceptor.file_stamps();
                        if now == seen {
                            continue;
                        }
                        seen = now;
                        "a file changed"
                    }
                };
                match acceptor.reload() {
                    Ok(()) => {
                        metrics::counter!(TLS_RELOADS_TOTAL, "outcome" => "ok").increment(1);
                        tracing::info!(why, cert = %acceptor.settings.cert_file.display(), "TLS certificate reloaded");
                    }
                    Err(error) => {
                        metrics::counter!(TLS_RELOADS_TOTAL, "outcome" => "failed").increment(1);
                        tracing::error!(why, %error, "TLS certificate reload failed; the previous certificate stays");
                    }
                }
            }
        });
        Ok(())
    }

    /// When each file was last changed (and its length), to notice a replacement.
    fn file_stamps(&self) -> [Option<(SystemTime, u64)>; 2] {
        let stamp = |path: &Path| {
            let metadata = std::fs::metadata(path).ok()?;
            Some((metadata.modified().ok()?, metadata.len()))
        };
        [
            stamp(&self.settings.cert_file),
            stamp(&self.settings.key_file),
        ]
    }

    /// Takes a new connection: a TLS stream after the handshake, the plain stream when it
    /// speaks plaintext and that is allowed, or `None` (refused, or the handshake failed).
    pub async fn accept(&self, stream: CountedStream) -> Option<ClientStream> {
        let timeout = self.settings.handshake_timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
            Ok(Ok(1)) if self.settings.allow_plaintext => return Some(ClientStream::Plain(stream)),
            Ok(Ok(1)) => {
                metrics::counter!(TLS_REJECTED_TOTAL, "reason" => "plaintext").increment(1);
                refuse_plaintext(stream).await;
                return None;
            }
            _ => {
                metrics::counter!(TLS_REJECTED_TOTAL, "reason" => "no_handshake").increment(1);
                return None;
            }
        }
        let config = self.current.read().clone();
        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(stream);
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(tls)) => Some(ClientStream::Tls(Box::new(tls))),
            Ok(Err(error)) => {
                metrics::counter!(TLS_REJECTED_TOTAL, "reason" => "handshake_failed").increment(1);
                tracing::debug!(%error, "TLS handshake failed");
                None
            }
            Err(_) => {
                metrics::counter!(TLS_REJECTED_TOTAL, "reason" => "handshake_timeout").increment(1);
                None
            }
        }
    }
}

/// The server configuration of a certificate chain and its key, offering HTTP/2 and HTTP/1.1.
fn server_config(cert_file: &Path, key_file: &Path) -> Result<ServerConfig, TlsError> {
    let certificates = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Certificates {
            path: cert_file.into(),
            source,
        })?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_file.into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|source| TlsError::Key {
        path: key_file.into(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certificates, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Answers a plaintext request on a TLS-only port with a 400 saying so, then closes.
async fn refuse_plaintext(mut stream: CountedStream) {
    let mut request = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut request)).await;
    let problem =
        ApiError::invalid_request("this port speaks TLS only: use https:// (or wss://)").problem();
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}
