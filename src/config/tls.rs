//! `[tls]`: TLS on the client listener (`docs/security.md`).

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// TLS on the client API port. Set `cert_file` and `key_file` to turn it on.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The PEM certificate chain of the client listener, the node's certificate first. With
    /// `key_file` the client port speaks TLS (HTTP/2 and HTTP/1.1 by ALPN). Reloaded on SIGHUP
    /// and when the file changes.
    pub cert_file: Option<PathBuf>,
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of `cert_file`'s certificate.
    pub key_file: Option<PathBuf>,
    /// Also serve plaintext HTTP on the TLS port (for a migration). Off: a plaintext request
    /// is answered 400 and closed.
    pub allow_plaintext: bool,
    /// How long a new connection may take to complete its TLS handshake. At least 100.
    pub handshake_timeout_ms: u64,
    /// How often the certificate and key files are checked for changes. At least 100.
    pub reload_check_interval_ms: u64,
    /// This node's PEM certificate chain for the internal RPC, from the cluster CA, naming the
    /// node as the DNS name `herald-node-<node_id>`. With `rpc_key_file` and `rpc_ca_file`,
    /// every connection between nodes is mutual TLS.
    pub rpc_cert_file: Option<PathBuf>,
    /// The PEM private key of `rpc_cert_file`'s certificate.
    pub rpc_key_file: Option<PathBuf>,
    /// The cluster CA (PEM): peers must present a certificate it issued.
    pub rpc_ca_file: Option<PathBuf>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert_file: None,
            key_file: None,
            allow_plaintext: false,
            handshake_timeout_ms: 10_000,
            reload_check_interval_ms: 5_000,
            rpc_cert_file: None,
            rpc_key_file: None,
            rpc_ca_file: None,
        }
    }
}

impl TlsConfig {
    /// Whether the client port speaks TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// Whether the internal RPC is mutual TLS.
    pub fn rpc_enabled(&self) -> bool {
        self.rpc_cert_file.is_some()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let rpc_files = [&self.rpc_cert_file, &self.rpc_key_file, &self.rpc_ca_file];
        if rpc_files.iter().any(|file| file.is_some())
            && !rpc_files.iter().all(|file| file.is_some())
        {
            return Err(ConfigError::Invalid(
                "tls.rpc_cert_file, tls.rpc_key_file and tls.rpc_ca_file go together: set all three or none"
                    .into(),
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(ConfigError::Invalid(
                "tls.cert_file and tls.key_file go together: set both or neither".into(),
            ));
        }
        if self.handshake_timeout_ms < 100 || self.reload_check_interval_ms < 100 {
            return Err(ConfigError::Invalid(
                "tls.handshake_timeout_ms and tls.reload_check_interval_ms must be at least 100"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_is_off_by_default_and_needs_both_files() {
        let config = TlsConfig::default();
        assert!(!config.enabled());
        config.validate().unwrap();
        let half = TlsConfig {
            cert_file: Some("cert.pem".into()),
            ..TlsConfig::default()
        };
        assert!(half
            .validate()
            .unwrap_err()
            .to_string()
            .contains("key_file"));
        let parsed: super::super::Config =
            toml::from_str("[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n").unwrap();
        assert!(parsed.tls.enabled());
        parsed.validate().unwrap();
        let partial = TlsConfig {
            rpc_cert_file: Some("node.pem".into()),
            rpc_key_file: Some("node.key".into()),
            ..TlsConfig::default()
        };
        assert!(partial
            .validate()
            .unwrap_err()
            .to_string()
            .contains("rpc_ca_file"));
    }
}
