//! Opening the CLI's WebSocket (`consume --follow`): plain `ws://`, or `wss://` through rustls
//! trusting `--ca-cert` (or the system's roots), with the `Authorization` header in the upgrade.

use std::sync::Arc;

use anyhow::Context;
use reqwest::Url;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::WebSocketStream;

/// A byte stream the socket runs over: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type Socket = WebSocketStream<Box<dyn Io>>;

/// Connects to `url` (`ws://` or `wss://`) and makes the WebSocket handshake of `request`.
pub async fn connect(
    url: &Url,
    request: Request,
    ca_certs: Option<&[u8]>,
) -> anyhow::Result<Socket> {
    let host = url
        .host_str()
        .with_context(|| format!("{url} names no host"))?
        .to_string();
    let port = url
        .port_or_known_default()
        .with_context(|| format!("{url} names no port"))?;
    // `[::1]` in a URL is `::1` to a resolver.
    let address = format!(
        "{}:{port}",
        host.trim_start_matches('[').trim_end_matches(']')
    );
    let tcp = TcpStream::connect(&address)
        .await
        .with_context(|| format!("could not connect to {address}"))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if url.scheme() == "wss" {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(ca_certs)?));
        let name = rustls::pki_types::ServerName::try_from(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        )
        .with_context(|| format!("{host} is not a TLS server name"))?;
        Box::new(
            connector
                .connect(name, tcp)
                .await
                .with_context(|| format!("TLS handshake with {address} failed"))?,
        )
    } else {
        Box::new(tcp)
    };
    let (socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .context("the WebSocket handshake failed")?;
    Ok(socket)
}

/// TLS that trusts `ca_certs` only, or the system's roots without them.
fn tls_config(ca_certs: Option<&[u8]>) -> anyhow::Result<rustls::ClientConfig> {
    super::http_client::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let config = match ca_certs {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            let mut reader = std::io::BufReader::new(pem);
            for certificate in rustls_pemfile_certs(&mut reader)? {
                roots
                    .add(certificate)
                    .context("the CA certificate is not usable")?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                rustls_platform_verifier::Verifier::new(provider)
                    .context("the system's certificate roots")?,
            ))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(
    reader: &mut dyn std::io::BufRead,
) -> anyhow::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    let mut pem = Vec::new();
    reader.read_to_end(&mut pem)?;
    rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .context("the CA file is not PEM certificates")
}
