//! PEM files for TLS (certificates, keys, trust roots) and their reloading: shared by the client
//! listener (`api::server::tls`) and the internal RPC's mutual TLS (`rpc::tls`).
//!
//! A node reloads its certificates on SIGHUP and when a file changes (its modification time or
//! length), checked at an interval; a reload that fails keeps what was loaded before, so a
//! half-written file never takes TLS down.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Counter of certificate reloads, by `what` (`client`, `rpc`) and `outcome` (`ok`, `failed`).
pub const TLS_RELOADS_TOTAL: &str = "herald_tls_reloads_total";

#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("cannot read the certificates in {path}: {source}")]
    Certificates {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("cannot read the private key {path}: {source}")]
    Key {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
}

/// Every certificate of a PEM file, in order; at least one.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|source| PemError::Certificates {
            path: path.into(),
            source,
        })?;
    if certificates.is_empty() {
        return Err(PemError::NoCertificate { path: path.into() });
    }
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| PemError::Key {
        path: path.into(),
        source,
    })
}

/// Calls `reload` on SIGHUP and whenever one of `files` changes, until the process ends.
pub fn spawn_reloader(
    what: &'static str,
    files: Vec<PathBuf>,
    check_interval: Duration,
    reload: impl Fn() -> Result<(), String> + Send + 'static,
) -> std::io::Result<()> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        let mut seen = stamps(&files);
        let mut check = tokio::time::interval(check_interval);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let why = tokio::select! {
                Some(()) = hangups.recv() => "SIGHUP",
                _ = check.tick() => {
                    let now = stamps(&files);
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    "a file changed"
                }
            };
            match reload() {
                Ok(()) => {
                    metrics::counter!(TLS_RELOADS_TOTAL, "what" => what, "outcome" => "ok")
                        .increment(1);
                    tracing::info!(what, why, "TLS certificates reloaded");
                }
                Err(error) => {
                    metrics::counter!(TLS_RELOADS_TOTAL, "what" => what, "outcome" => "failed")
                        .increment(1);
                    tracing::error!(what, why, %error, "TLS reload failed; the previous certificates stay");
                }
            }
        }
    });
    Ok(())
}

/// When each file was last changed, and its length, to notice a replacement.
fn stamps(files: &[PathBuf]) -> Vec<Option<(SystemTime, u64)>> {
    files
        .iter()
        .map(|path| {
            let metadata = std::fs::metadata(path).ok()?;
            Some((metadata.modified().ok()?, metadata.len()))
        })
        .collect()
}
