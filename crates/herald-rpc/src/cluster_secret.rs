//! The cluster secret: one secret every node of a cluster holds, from which each node derives
//! the keys it shares with the others. Two uses, each with its own derived key:
//! - **signing keys at rest**: the built-in OAuth2 issuer's private keys live in replicated
//!   metadata (the raft log, its snapshots, RocksDB's write-ahead log and table files on every
//!   node), sealed with AES-256-GCM under a key from this secret, so a copy of a data
//!   directory (a backup, a stolen disk, a local account that read it) yields no key to forge
//!   tokens with unless it holds the secret too (`broker::auth::sealing`);
//! - **node-to-node authentication** without mutual TLS: a node proves it holds the secret in
//!   the RPC hello, by an HMAC over nonces of both ends (`rpc::hello_auth`).
//!
//! Where it comes from, first found wins: the `HERALD_CLUSTER_SECRET` environment variable,
//! the file `cluster_secret_file` names, or `<data_dir>/cluster-secret`. The last one is
//! generated (32 random bytes, mode 0600) on the first start of a node that founds a cluster
//! alone, so `herald serve` needs nothing; a node of a bigger cluster must be given the same
//! secret as the others and refuses to start without one. Kept in the data directory, it
//! protects the signing keys from a local user (the directory is private) but not from whoever
//! copies the whole directory: put it elsewhere (a file outside backups, a secret store, the
//! environment) for that.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

/// The environment variable that holds the secret itself.
pub const SECRET_ENV: &str = "HERALD_CLUSTER_SECRET";
/// The file in the data directory the secret is kept in when nothing else names one.
pub const DEFAULT_FILE_NAME: &str = "cluster-secret";
/// The shortest secret accepted, in bytes (after trimming whitespace): 256 bits of a random
/// secret's text, about 192 of random bytes in base64.
pub const MIN_SECRET_BYTES: usize = 32;
/// Random bytes in a generated secret.
const GENERATED_BYTES: usize = 32;
/// The HKDF salt every key derived from a cluster secret starts from.
const DERIVATION_SALT: &[u8] = b"herald cluster secret v1";

/// A purpose a key is derived for; different purposes give unrelated keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPurpose {
    /// Sealing the signing keys kept in replicated metadata.
    SigningKeysAtRest,
    /// Proving the secret in the RPC hello.
    RpcHello,
    /// A short public name of the secret, to compare nodes' secrets in their logs.
    Fingerprint,
}

impl KeyPurpose {
    fn info(self) -> &'static [u8] {
        match self {
            KeyPurpose::SigningKeysAtRest => b"signing keys at rest",
            KeyPurpose::RpcHello => b"rpc hello",
            KeyPurpose::Fingerprint => b"fingerprint",
        }
    }
}

/// Where a node's secret came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Environment,
    File(PathBuf),
    /// Generated now, into this file.
    Generated(PathBuf),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Environment => write!(formatter, "the environment ({SECRET_ENV})"),
            SecretSource::File(path) => write!(formatter, "{}", path.display()),
            SecretSource::Generated(path) => {
                write!(formatter, "{} (generated now)", path.display())
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read the cluster secret in {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write a new cluster secret to {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the cluster secret from {from} is {length} bytes; it must be at least {MIN_SECRET_BYTES} (e.g. `openssl rand -base64 32`)")]
    TooShort { from: SecretSource, length: usize },
    #[error(
        "this node is one of several in its cluster and has no cluster secret: every node needs the same one \
         (it seals the signing keys the nodes replicate and, without mutual TLS, authenticates them to each \
         other). Give it with {SECRET_ENV}, or in a file named by --cluster-secret-file, or put it in {path} \
         (copy a running node's <data_dir>/{DEFAULT_FILE_NAME}, or make one for a new cluster with \
         `openssl rand -base64 32`)"
    )]
    Missing { path: PathBuf },
    #[error("the system's random source failed")]
    Random,
}

/// The secret itself. Never printed: `Debug` shows its fingerprint.
pub struct ClusterSecret {
    bytes: Vec<u8>,
    source: SecretSource,
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ClusterSecret")
            .field("source", &self.source)
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

impl Drop for ClusterSecret {
    fn drop(&mut self) {
        for byte in self.bytes.iter_mut() {
            // SAFETY: a valid, aligned byte of our own vector; volatile so the wipe is kept.
            unsafe { std::ptr::write_volatile(byte, 0) };
        }
    }
}

/// How a node finds its secret.
#[derive(Debug, Clone)]
pub struct SecretLookup<'a> {
    /// `HERALD_CLUSTER_SECRET`, when set.
    pub from_environment: Option<String>,
    /// `cluster_secret_file`, when configured.
    pub configured_file: Option<&'a Path>,
    /// The node's data directory (existing), where the default file is.
    pub data_dir: &'a Path,
    /// Whether a missing default file may be generated: only a node that founds a cluster
    /// alone (a secret of its own could not match its peers' otherwise).
    pub may_generate: bool,
}

impl ClusterSecret {
    /// A secret from its text (whitespace around it ignored).
    pub fn from_text(text: &str, source: SecretSource) -> Result<ClusterSecret, SecretError> {
        let trimmed = text.trim();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort {
                from: source,
                length: trimmed.len(),
            });
        }
        Ok(ClusterSecret {
            bytes: trimmed.as_bytes().to_vec(),
            source,
        })
    }

    /// Finds the node's secret (see the module's documentation), generating the default file
    /// when allowed.
    pub fn load(lookup: &SecretLookup<'_>) -> Result<ClusterSecret, SecretError> {
        if let Some(text) = lookup
            .from_environment
            .as_deref()
            .filter(|text| !text.is_empty())
        {
            return ClusterSecret::from_text(text, SecretSource::Environment);
        }
        if let Some(path) = lookup.configured_file {
            return read_file(path);
        }
        let path = lookup.data_dir.join(DEFAULT_FILE_NAME);
        match std::fs::metadata(&path) {
            Ok(_) => read_file(&path),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if !lookup.may_generate {
                    return Err(SecretError::Missing { path });
                }
                generate_file(&path)
            }
            Err(source) => Err(SecretError::Read { path, source }),
        }
    }

    pub fn source(&self) -> &SecretSource {
        &self.source
    }

    /// A 256-bit key for `purpose` (HKDF-SHA256 of the secret).
    pub fn derive(&self, purpose: KeyPurpose) -> [u8; 32] {
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, DERIVATION_SALT);
        let info = [purpose.info()];
        let mut key = [0u8; 32];
        // Expanding 32 bytes of SHA-256 output cannot fail.
        if let Ok(okm) = salt.extract(&self.bytes).expand(&info, hkdf::HKDF_SHA256) {
            let _ = okm.fill(&mut key);
        }
        key
    }

    /// Eight hex digits naming the secret without revealing it: nodes of one cluster log the
    /// same.
    pub fn fingerprint(&self) -> String {
        self.derive(KeyPurpose::Fingerprint)[..4]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

fn read_file(path: &Path) -> Result<ClusterSecret, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    warn_if_others_may_read(path);
    ClusterSecret::from_text(&text, SecretSource::File(path.to_path_buf()))
}

#[cfg(unix)]
fn warn_if_others_may_read(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{mode:o}"),
                "the cluster secret file is readable by other users: make it 0600 (chmod 600)"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_others_may_read(_path: &Path) {}

/// Generates a secret into a new file created 0600 (never readable by others, not even for an
/// instant) and synced, so a crash cannot lose a secret the node already sealed keys with.
fn generate_file(path: &Path) -> Result<ClusterSecret, SecretError> {
    let mut random = [0u8; GENERATED_BYTES];
    SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| SecretError::Random)?;
    let text = URL_SAFE_NO_PAD.encode(random);
    let write = |error| SecretError::Write {
        path: path.to_path_buf(),
        source: error,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(write)?;
    file.write_all(text.as_bytes()).map_err(write)?;
    file.write_all(b"\n").map_err(write)?;
    file.sync_all().map_err(write)?;
    if let Some(dir) = path.parent() {
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    ClusterSecret::from_text(&text, SecretSource::Generated(path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(dir: &'a Path, may_generate: bool) -> SecretLookup<'a> {
        SecretLookup {
            from_environment: None,
            configured_file: None,
            data_dir: dir,
            may_generate,
        }
    }

    #[test]
    fn a_lone_founder_generates_a_private_secret_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = ClusterSecret::load(&lookup(dir.path(), true)).unwrap();
        let path = dir.path().join(DEFAULT_FILE_NAME);
        assert_eq!(first.source(), &SecretSource::Generated(path.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = ClusterSecret::load(&lookup(dir.path(), true)).unwrap();
        assert_eq!(again.source(), &SecretSource::File(path));
        assert_eq!(
            first.derive(KeyPurpose::RpcHello),
            again.derive(KeyPurpose::RpcHello)
        );
    }

    #[test]
    fn a_node_of_a_bigger_cluster_needs_a_secret_given_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let error = ClusterSecret::load(&lookup(dir.path(), false))
            .unwrap_err()
            .to_string();
        assert!(error.contains(SECRET_ENV), "{error}");
        assert!(!dir.path().join(DEFAULT_FILE_NAME).exists());

        let given = "a-secret-shared-by-every-node-of-the-cluster";
        let from_env = ClusterSecret::load(&SecretLookup {
            from_environment: Some(given.into()),
            ..lookup(dir.path(), false)
        })
        .unwrap();
        assert_eq!(from_env.source(), &SecretSource::Environment);
        let file = dir.path().join("elsewhere");
        std::fs::write(&file, format!("{given}\n")).unwrap();
        let from_file = ClusterSecret::load(&SecretLookup {
            configured_file: Some(&file),
            ..lookup(dir.path(), false)
        })
        .unwrap();
        // The same text makes the same keys, whatever carried it.
        assert_eq!(
            from_env.derive(KeyPurpose::SigningKeysAtRest),
            from_file.derive(KeyPurpose::SigningKeysAtRest)
        );
        assert_eq!(from_env.fingerprint(), from_file.fingerprint());
    }

    #[test]
    fn short_secrets_are_refused_and_purposes_get_unrelated_keys() {
        let short = ClusterSecret::from_text("  too short  ", SecretSource::Environment);
        assert!(matches!(
            short,
            Err(SecretError::TooShort { length: 9, .. })
        ));
        let secret = ClusterSecret::from_text(&"x".repeat(40), SecretSource::Environment).unwrap();
        assert_ne!(
            secret.derive(KeyPurpose::RpcHello),
            secret.derive(KeyPurpose::SigningKeysAtRest)
        );
        assert!(!format!("{secret:?}").contains("xxxx"));
    }
}
