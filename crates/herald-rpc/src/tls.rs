//! Mutual TLS between nodes: every RPC connection is TLS both ways, each node proving who it is
//! with a certificate from the cluster's CA.
//!
//! A node's certificate names it: a DNS subject alternative name `herald-node-<id>`. A dialling
//! node verifies that the peer's certificate names the node it meant to reach (the TLS server
//! name); an accepting node verifies the client's chain against the CA and then that it names
//! the node the hello says it comes from, so a node cannot speak for another even with a valid
//! certificate of its own. A certificate from another CA fails the handshake.
//!
//! The files are reloaded on SIGHUP and when they change (`crate::tls_files`); new connections
//! use the new certificates, open ones keep theirs.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::tls_files::{self, PemError};

/// A connection's reading half, plain or TLS.
pub(crate) type RpcRead = Box<dyn AsyncRead + Send + Unpin>;
/// A connection's writing half, plain or TLS.
pub(crate) type RpcWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// The name a node's certificate must carry (a DNS subject alternative name).
pub fn node_name(node: u64) -> String {
    format!("herald-node-{node}")
}

/// The node's certificate, key and the cluster CA, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_file: PathBuf,
    pub reload_check_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerTlsError {
    #[error(transparent)]
    Files(#[from] PemError),
    #[error("the cluster CA in {path} is not usable: {reason}")]
    Ca { path: PathBuf, reason: String },
    #[error("the node certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

struct Configs {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

/// The node's TLS for RPC, both as a client and as a server; swapped whole on a reload.
#[derive(Clone)]
pub struct PeerTls {
    files: Arc<PeerTlsFiles>,
    current: Arc<RwLock<Arc<Configs>>>,
}

impl fmt::Debug for PeerTls {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("PeerTls")
            .field("files", &self.files)
            .finish()
    }
}

impl PeerTls {
    pub fn load(files: PeerTlsFiles) -> Result<PeerTls, PeerTlsError> {
        let configs = configs(&files)?;
        Ok(PeerTls {
            files: Arc::new(files),
            current: Arc::new(RwLock::new(Arc::new(configs))),
        })
    }

    pub fn reload(&self) -> Result<(), PeerTlsError> {
        let configs = configs(&self.files)?;
        *self.current.write() = Arc::new(configs);
        Ok(())
    }

    /// Reloads on SIGHUP and when the files change, until the process ends.
    pub fn spawn_reloader(&self) -> std::io::Result<()> {
        let tls = self.clone();
        tls_files::spawn_reloader(
            "rpc",
            vec![
                self.files.cert_file.clone(),
                self.files.key_file.clone(),
                self.files.ca_file.clone(),
            ],
            self.files.reload_check_interval,
            move || tls.reload().map_err(|error| error.to_string()),
        )
    }

    /// The client side of a handshake with node `node`: fails unless its certificate names it.
    pub(crate) async fn connect(
        &self,
        stream: TcpStream,
        node: u64,
    ) -> std::io::Result<(RpcRead, RpcWrite)> {
        let config = self.current.read().client.clone();
        let name = ServerName::try_from(node_name(node))
            .map_err(|error| std::io::Error::other(format!("node name: {error}")))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await?;
        let (read, write) = tokio::io::split(tls);
        Ok((Box::new(read), Box::new(write)))
    }

    /// The server side of a handshake: the client's certificate (verified against the CA) for
    /// the hello to be checked against.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<(RpcRead, RpcWrite, CertificateDer<'static>)> {
        let config = self.current.read().server.clone();
        let tls = tokio_rustls::TlsAcceptor::from(config)
            .accept(stream)
            .await?;
        let certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .cloned()
            .ok_or_else(|| std::io::Error::other("the peer sent no certificate"))?;
        let (read, write) = tokio::io::split(tls);
        Ok((Box::new(read), Box::new(write), certificate))
    }
}

/// Whether `certificate` (already verified against the cluster CA) names node `node`.
pub(crate) fn certifies_node(certificate: &CertificateDer<'_>, node: u64) -> bool {
    let Ok(name) = ServerName::try_from(node_name(node)) else {
        return false;
    };
    webpki::EndEntityCert::try_from(certificate)
        .and_then(|certificate| certificate.verify_is_valid_for_subject_name(&name))
        .is_ok()
}

/// A plain connection's halves.
pub(crate) fn split_plain(stream: TcpStream) -> (RpcRead, RpcWrite) {
    let (read, write) = stream.into_split();
    (Box::new(read), Box::new(write))
}

fn configs(files: &PeerTlsFiles) -> Result<Configs, PeerTlsError> {
    let certificates = tls_files::certificates(&files.cert_file)?;
    let key = tls_files::private_key(&files.key_file)?;
    let mut roots = RootCertStore::empty();
    for ca in tls_files::certificates(&files.ca_file)? {
        roots.add(ca).map_err(|error| PeerTlsError::Ca {
            path: files.ca_file.clone(),
            reason: error.to_string(),
        })?;
    }
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|error| PeerTlsError::Ca {
            path: files.ca_file.clone(),
            reason: error.to_string(),
        })?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certificates.clone(), key.clone_key())?;
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(certificates, key)?;
    Ok(Configs {
        client: Arc::new(client),
        server: Arc::new(server),
    })
}
