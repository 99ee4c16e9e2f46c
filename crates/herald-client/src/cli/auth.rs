//! `herald auth clients|policies`: the built-in issuer's OAuth2 clients and the authorization
//! policy (API.md § Auth). Secrets are printed once, when a client is created or its secret
//! rotated; the server keeps only their hashes.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::{json, Value};

use super::client::Api;

/// `herald auth ...`.
#[derive(clap::Subcommand, Debug)]
pub enum AuthCommand {
    /// OAuth2 clients of the built-in issuer.
    #[command(subcommand)]
    Clients(ClientsCommand),
    /// The authorization policy: which role may do what on which resources.
    #[command(subcommand)]
    Policies(PoliciesCommand),
    /// The audit log (administrative changes, failed authentications, denied requests), one
    /// JSON event per line, oldest first.
    Audit(super::audit::AuditArgs),
}

/// `herald auth clients ...`.
#[derive(clap::Subcommand, Debug)]
pub enum ClientsCommand {
    /// List the clients (never their secrets).
    List,
    /// Create a client; prints its secret, which cannot be shown again.
    Create {
        /// The client id (what tokens name as their subject).
        #[arg(value_name = "CLIENT_ID")]
        id: String,
        /// A role of the client, repeatable (admin, producer, consumer, viewer or a custom one).
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
    },
    /// Delete a client: its secret stops working and its tokens lose their rights.
    Delete {
        #[arg(value_name = "CLIENT_ID")]
        id: String,
    },
    /// Give a client a new secret (printed once); the old one stops working at once.
    RotateSecret {
        #[arg(value_name = "CLIENT_ID")]
        id: String,
    },
}

/// `herald auth policies ...`.
#[derive(clap::Subcommand, Debug)]
pub enum PoliciesCommand {
    /// Print the policy as JSON (`{"rules":[{"role","resource","action"}]}`).
    Get,
    /// Replace the policy with the JSON of FILE (`-` for standard input).
    Put { file: PathBuf },
}

pub async fn run(server: &str, command: AuthCommand) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    match command {
        AuthCommand::Clients(command) => clients(&api, command).await,
        AuthCommand::Policies(command) => policies(&api, command).await,
        AuthCommand::Audit(args) => super::audit::run(server, args).await,
    }
}

async fn clients(api: &Api, command: ClientsCommand) -> anyhow::Result<()> {
    let clients_url = api.url(&["v1", "auth", "clients"]);
    match command {
        ClientsCommand::List => {
            let listed: Value = api.send_json(api.http().get(clients_url)).await?;
            println!("{:<32} {:<32} CREATED_AT", "CLIENT_ID", "ROLES");
            for client in listed["clients"].as_array().into_iter().flatten() {
                let roles: Vec<&str> = client["roles"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                println!(
                    "{:<32} {:<32} {}",
                    client["client_id"].as_str().unwrap_or_default(),
                    roles.join(","),
                    client["created_at"]
                );
            }
        }
        // The positional is `id`: `client_id` is the global --client-id flag's.
        ClientsCommand::Create { id, roles } => {
            let body = json!({ "client_id": id, "roles": roles });
            let created: Value = api
                .send_json(api.http().post(clients_url).json(&body))
                .await?;
            print_with_secret(&created)?;
        }
        ClientsCommand::Delete { id } => {
            api.send(api.http().delete(api.url(&["v1", "auth", "clients", &id])))
                .await?;
            println!("deleted client `{id}`");
        }
        ClientsCommand::RotateSecret { id } => {
            let rotated: Value = api
                .send_json(
                    api.http()
                        .post(api.url(&["v1", "auth", "clients", &id, "secret"]))
                        .json(&json!({})),
                )
                .await?;
            print_with_secret(&rotated)?;
        }
    }
    Ok(())
}

/// Prints a client with its secret (stdout, for scripts) and a reminder (stderr).
fn print_with_secret(client: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(client)?);
    eprintln!("the client_secret above is shown once: store it now");
    Ok(())
}

async fn policies(api: &Api, command: PoliciesCommand) -> anyhow::Result<()> {
    let url = api.url(&["v1", "auth", "policies"]);
    let answer: Value = match command {
        PoliciesCommand::Get => api.send_json(api.http().get(url)).await?,
        PoliciesCommand::Put { file } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading standard input")?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?
            };
            let policy: Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            api.send_json(api.http().put(url).json(&policy)).await?
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
