//! Where every `reqwest::Client` of the crate (the CLI, the benchmark) and of its tests starts.
//!
//! reqwest speaks TLS through rustls with no crypto provider of its own (the `ring` provider is
//! the crate's only one: aws-lc needs cmake), and building a client panics unless a process-wide
//! default provider is installed first. [`builder`] installs it, once, before handing out a
//! builder, so no client can be built without it.

use std::sync::Once;

/// Installs rustls's `ring` provider as the process default (once; a provider installed
/// earlier by someone else stays).
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A `reqwest::ClientBuilder` that can build (the crypto provider installed).
pub fn builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}
