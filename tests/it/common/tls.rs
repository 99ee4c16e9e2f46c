//! TLS for tests: a throwaway certificate authority (rcgen) that issues node certificates as PEM
//! files, a rustls client trusting it, and raw HTTP/1.1 over a TLS connection (the tests'
//! reqwest client speaks plain HTTP only).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// How long a TLS connection and one exchange on it may take.
pub const TLS_DEADLINE: Duration = Duration::from_secs(10);

/// A certificate authority for one test, and the directory its files go to.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
}

/// A certificate and key written as PEM files.
pub struct IssuedFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("herald-tls-")
            .tempdir()
            .unwrap();
        TestCa { issuer, dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Issues a certificate for 127.0.0.1 and localhost with common name `common_name`,
    /// written to `<stem>.pem` and `<stem>.key` in the CA's directory.
    pub fn issue(&self, stem: &str, common_name: &str) -> IssuedFiles {
        self.issue_with_names(stem, common_name, &[])
    }

    /// As [`TestCa::issue`], with more DNS names (e.g. `herald-node-2`).
    pub fn issue_with_names(&self, stem: &str, common_name: &str, names: &[&str]) -> IssuedFiles {
        let mut all_names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        all_names.extend(names.iter().map(|name| name.to_string()));
        let mut params = CertificateParams::new(all_names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = IssuedFiles {
            cert: self.dir.path().join(format!("{stem}.pem")),
            key: self.dir.path().join(format!("{stem}.key")),
        };
        write_replacing(&files.cert, cert.pem().as_bytes());
        write_replacing(&files.key, key.serialize_pem().as_bytes());
        files
    }

    /// The CA's certificate as a PEM file (`ca.pem` in its directory).
    pub fn write_ca(&self) -> PathBuf {
        let path = self.dir.path().join("ca.pem");
        write_replacing(&path, self.issuer.pem().as_bytes());
        path
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A client that trusts this CA only, offering `alpn` protocols.
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert_der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Arc::new(config)
    }
}

/// Writes a file by renaming a complete temporary file over it, as certificate tools do, so a
/// reader never sees half a file.
fn write_replacing(path: &Path, contents: &[u8]) {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, contents).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// Connects with TLS to `address` as 127.0.0.1.
pub async fn connect(
    address: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let attempt = async {
        let tcp = TcpStream::connect(address).await?;
        let name = ServerName::IpAddress(address.ip().into());
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
    };
    tokio::time::timeout(TLS_DEADLINE, attempt)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS connect timed out"))?
}

/// `GET path` over a new TLS connection: the status code and the body.
pub async fn https_get(
    address: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> std::io::Result<(u16, String)> {
    let mut stream = connect(address, config).await?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
    let exchange = async {
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(TLS_DEADLINE, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer"))??;
    parse_answer(&answer)
}

/// The status and body of an HTTP/1.1 answer read to its end.
pub fn parse_answer(answer: &[u8]) -> std::io::Result<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
