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
use std::time::Duration;

use parking_lot::RwLock;
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api::problem::{ApiError, PROBLEM_JSON};
use crate::api::server::listener::{ClientStream, CountedStream};
use crate::tls_files::{self, PemError};

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
    #[error(transparent)]
    Files(#[from] PemError),
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
        let acceptor = self.clone();
        crate::tls_files::spawn_reloader(
            "client",
            vec![
                self.settings.cert_file.clone(),
                self.settings.key_file.clone(),
            ],
            self.settings.reload_check_interval,
            move || acceptor.reload().map_err(|error| error.to_string()),
        )
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
    let certificates = tls_files::certificates(cert_file)?;
    let key = tls_files::private_key(key_file)?;
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
