//! The bootstrap `admin` client: the node that founds a cluster creates an OAuth2 client
//! `admin` with role `admin`, so the cluster can be administered (and more clients created)
//! once authentication is on. Its secret is printed once to standard error and written to a
//! file only the node's user can read; `POST /v1/auth/clients/admin/secret` rotates it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use super::service::Auth;
use crate::{BrokerError, ErrorCode};

/// The bootstrap client's id and role.
pub const ADMIN_CLIENT_ID: &str = "admin";
pub const ADMIN_ROLE: &str = "admin";
/// The file in the data directory that holds its credentials.
pub const CREDENTIALS_FILE: &str = "admin-credentials";

/// How long to wait before asking again while the new cluster has no metadata leader yet.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Creates the `admin` client, retrying until the new cluster can take the change or the node
/// stops. `token_url` is where the printed instructions send the user for a token.
pub async fn create_admin(
    auth: Auth,
    data_dir: PathBuf,
    token_url: String,
    mut stopping: watch::Receiver<bool>,
) {
    let (client, secret) = loop {
        match auth
            .create_client(ADMIN_CLIENT_ID, vec![ADMIN_ROLE.to_string()])
            .await
        {
            Ok(created) => break created,
            Err(BrokerError::Conflict {
                code: ErrorCode::ClientExists,
                ..
            }) => {
                tracing::info!("the bootstrap admin client exists already");
                return;
            }
            Err(error) => {
                tracing::debug!(%error, "the bootstrap admin client is not created yet; retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_PAUSE) => {}
            _ = stopping.wait_for(|stopped| *stopped) => return,
        }
    };
    let path = data_dir.join(CREDENTIALS_FILE);
    let written = write_credentials(&path, &client.client_id, &secret);
    if let Err(error) = &written {
        tracing::error!(path = %path.display(), %error, "could not write the admin credentials file");
    }
    let file_line = match written {
        Ok(()) => format!(
            "They are also in {} (readable only by this user).",
            path.display()
        ),
        Err(_) => "Writing them to a file failed (see the log): keep them now.".to_string(),
    };
    let client_id = &client.client_id;
    eprintln!(
        "\n\
         ======================== HERALD ADMIN CREDENTIALS ========================\n\
         This new cluster has an OAuth2 client '{client_id}' with role '{ADMIN_ROLE}'.\n\
         Its secret is shown this once. {file_line}\n\
         \n\
         \x20 client_id:     {client_id}\n\
         \x20 client_secret: {secret}\n\
         \n\
         Get a token:   curl -u '{client_id}:<client_secret>' -d grant_type=client_credentials {token_url}\n\
         Or the CLI:    HERALD_CLIENT_ID={client_id} HERALD_CLIENT_SECRET=<client_secret> herald topics list\n\
         Rotate it:     POST /v1/auth/clients/{client_id}/secret (herald auth clients rotate-secret {client_id})\n\
         ==========================================================================\n"
    );
}

/// Writes `client_id` and `client_secret` to a new file that is created with mode 0600, so it
/// is never readable by others, not even for an instant.
fn write_credentials(path: &Path, client_id: &str, secret: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    write!(
        file,
        "# Herald's bootstrap admin client. Rotate its secret with\n\
         # POST /v1/auth/clients/{client_id}/secret, then delete this file.\n\
         client_id={client_id}\n\
         client_secret={secret}\n"
    )?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credentials_file_is_created_owner_only_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CREDENTIALS_FILE);
        write_credentials(&path, "admin", "s3cret").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("client_id=admin\n"), "{text}");
        assert!(text.contains("client_secret=s3cret\n"), "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(write_credentials(&path, "admin", "other").is_err());
        assert!(std::fs::read_to_string(&path).unwrap().contains("s3cret"));
    }
}
