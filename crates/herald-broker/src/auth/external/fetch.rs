//! The HTTPS client an external issuer's keys are fetched with: rustls with the ring provider
//! and its own roots (a private CA's, or the system's), a deadline for the whole exchange and a
//! cap on the body, so a slow or hostile provider can neither hold a fetch nor fill memory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{header, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;

/// The largest JWKS or discovery document accepted.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("reading the CA file: {0}")]
    CaFile(#[from] herald_rpc::tls_files::PemError),
    #[error("the CA file holds no usable certificate: {0}")]
    CaCertificate(rustls::Error),
    #[error("no trusted root certificates: the system has none and no ca_file is set")]
    NoRoots,
    #[error("the TLS configuration: {0}")]
    Tls(rustls::Error),
    #[error("'{url}' is not a valid URL")]
    Url { url: String },
    #[error("GET {url}: {reason}")]
    Request { url: String, reason: String },
    #[error("GET {url} answered {status}")]
    Status { url: String, status: StatusCode },
    #[error("GET {url} did not answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("GET {url} answered a body that is not the JSON expected: {reason}")]
    Body { url: String, reason: String },
}

/// Fetches JSON documents from one provider.
#[derive(Clone)]
pub struct DocumentClient {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    timeout: Duration,
}

impl DocumentClient {
    /// A client trusting `ca_file`'s certificates, or the system's roots without one.
    pub fn new(ca_file: Option<&Path>, timeout: Duration) -> Result<DocumentClient, FetchError> {
        let mut roots = RootCertStore::empty();
        match ca_file {
            Some(path) => {
                for certificate in herald_rpc::tls_files::certificates(path)? {
                    roots.add(certificate).map_err(FetchError::CaCertificate)?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for error in &native.errors {
                    tracing::debug!(%error, "skipping a system root certificate");
                }
                roots.add_parsable_certificates(native.certs);
                if roots.is_empty() {
                    // Plain-http loopback providers still work; https ones fail with a clear log.
                    tracing::warn!("{}", FetchError::NoRoots);
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(FetchError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(DocumentClient { client, timeout })
    }

    /// GETs `url` and parses its JSON body, within the deadline and the size cap.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<T, FetchError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.get_json_unbounded(url)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout {
                url: url.to_string(),
                timeout,
            }),
        }
    }

    async fn get_json_unbounded<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<T, FetchError> {
        let uri: hyper::Uri = url.parse().map_err(|_| FetchError::Url {
            url: url.to_string(),
        })?;
        let request = Request::get(uri)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                concat!("herald/", env!("CARGO_PKG_VERSION")),
            )
            .body(Empty::new())
            .map_err(|error| FetchError::Request {
                url: url.to_string(),
                reason: error.to_string(),
            })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| FetchError::Request {
                url: url.to_string(),
                reason: error_chain(&error),
            })?;
        let status = response.status();
        if status != StatusCode::OK {
            return Err(FetchError::Status {
                url: url.to_string(),
                status,
            });
        }
        let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
            .collect()
            .await
            .map_err(|error| FetchError::Body {
                url: url.to_string(),
                reason: error.to_string(),
            })?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|error| FetchError::Body {
            url: url.to_string(),
            reason: error.to_string(),
        })
    }
}

/// An error with its causes, which hyper keeps apart (the TLS reason is in a source).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
