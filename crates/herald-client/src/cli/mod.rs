//! The `herald` client commands: topic administration, producing from stdin and consuming to
//! stdout, in the spirit of kcat but over Herald's HTTP API.
//!
//! This module holds the command-line shapes (clap types that `main.rs` embeds) and the entry
//! points; each command lives in its own file, and [`client`] holds everything that talks HTTP.

pub mod archive;
mod archive_ids;
pub mod audit;
pub mod auth;
pub mod backup;
mod batch_reads;
pub mod client;
pub mod cluster;
pub mod consume;
pub mod credentials;
pub mod export;
mod export_output;
mod follow;
pub mod groups_api;
pub mod http_client;
pub mod import;
mod import_partition;
mod import_target;
pub mod produce;
mod progress;
pub mod pull;
pub mod redrive;
pub mod request;
mod retry;
mod schema_encoder;
pub mod schemas;
pub mod subscriptions;
pub mod subscriptions_api;
pub mod topics;
mod ws_connect;

use serde_json::Value;

pub use client::{Acks, OffsetSpec};
pub use pull::PullArgs;
pub use request::{ReplyArgs, RequestArgs};
pub use schemas::SchemasCommand;
pub use subscriptions::SubscriptionsCommand;

/// Which server to talk to, as whom, trusting which CA; shared by every client command, so
/// global.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArg {
    /// Base URL of a Herald node (`http://` or `https://`).
    #[arg(
        long,
        env = "HERALD_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub server: String,
    /// A bearer token sent with every request (not refreshed; see --client-id).
    #[arg(long, env = "HERALD_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// An OAuth2 client id: the CLI gets a token at POST /oauth/token with it and
    /// --client-secret, and gets a new one before it expires.
    #[arg(long, env = "HERALD_CLIENT_ID", global = true)]
    pub client_id: Option<String>,
    /// The OAuth2 client's secret (prefer HERALD_CLIENT_SECRET: flags show in `ps`).
    #[arg(
        long,
        env = "HERALD_CLIENT_SECRET",
        global = true,
        hide_env_values = true
    )]
    pub client_secret: Option<String>,
    /// A PEM file of the CA certificate(s) that signed the server's certificate: trusted
    /// instead of the system's roots for https:// (and wss://).
    #[arg(long, env = "HERALD_CA_CERT", global = true)]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl ServerArg {
    /// Sets the process's credentials and trusted CAs from these flags (once, before any
    /// request).
    pub fn configure(&self) -> anyhow::Result<()> {
        credentials::configure(
            &self.server,
            &credentials::CredentialOptions {
                token: self.token.clone(),
                client_id: self.client_id.clone(),
                client_secret: self.client_secret.clone(),
                ca_cert: self.ca_cert.clone(),
            },
        )
    }
}

/// `herald topics ...`.
#[derive(clap::Subcommand, Debug)]
pub enum TopicsCommand {
    /// Create a topic.
    Create {
        /// Topic name: 1-249 characters of [A-Za-z0-9._-].
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Number of replicas of each partition (default: the cluster's
        /// `default_replication_factor`, capped at its nodes).
        #[arg(long)]
        replication_factor: Option<u16>,
        /// Topic configuration as key=value, repeatable (e.g. --config retention_ms=-1
        /// --config cleanup_policy=compact).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = topics::parse_config_entry)]
        config: Vec<(String, Value)>,
    },
    /// List topics as a table.
    List,
    /// Show one topic (partitions, leaders, offsets, config) as JSON.
    Describe {
        /// Topic name.
        name: String,
    },
    /// Delete a topic and its data.
    Delete {
        /// Topic name.
        name: String,
    },
    /// Write a topic's messages (keys, values, headers, timestamps, original offsets), as the
    /// batches the cluster stores, to an export file (docs/export-import.md).
    Export(export::ExportArgs),
    /// Write an export file's messages into a topic of any cluster (created like the exported
    /// one when missing), in order per partition; run again, it writes nothing twice.
    Import(import::ImportArgs),
}

/// `herald produce TOPIC`: one message per stdin line.
#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    /// Topic to produce to.
    pub topic: String,
    /// Key set on every message (messages with a key go to hash(key) % partitions).
    #[arg(long, short = 'k')]
    pub key: Option<String>,
    /// Partition for every message (default: chosen by the server).
    #[arg(long, short = 'p')]
    pub partition: Option<u32>,
    /// Lines per produce request.
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    /// Acknowledgement level.
    #[arg(long, value_enum, default_value_t = Acks::All)]
    pub acks: Acks,
    /// Send each line as raw bytes (value_b64) instead of as JSON (or a JSON string).
    #[arg(long)]
    pub bytes: bool,
    /// Send the lines as batches in Herald's stored layout (`application/vnd.herald.batch`,
    /// docs/binary-batches.md), stored as sent; needs --partition.
    #[arg(long, requires = "partition")]
    pub binary: bool,
    /// Encode each line (a JSON value) with this schema registry subject's latest schema (Avro,
    /// Protobuf or JSON Schema) in the Confluent wire format (docs/schemas.md).
    #[arg(long, conflicts_with_all = ["bytes", "binary"])]
    pub schema: Option<String>,
}

/// What `herald consume` prints per message.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// The whole message (topic, partition, offset, key, value, ...) as one JSON line.
    #[default]
    Json,
    /// Only the value: strings as text, other JSON as JSON, bytes raw.
    Value,
}

/// `herald consume TOPIC`: print messages to stdout.
#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    /// Topic to read.
    pub topic: String,
    /// Only this partition (default: all partitions).
    #[arg(long, short = 'p')]
    pub partition: Option<u32>,
    /// Where to start: earliest, latest or an offset.
    #[arg(long, default_value = "earliest")]
    pub from: OffsetSpec,
    /// Keep waiting for new messages instead of stopping at the end: the messages are pushed
    /// over the WebSocket, and each printed one (`--format json`) carries its `resume` token.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: continue after the message whose `resume` token this is (every
    /// partition's next offset, e.g. `0:18,1:5`), instead of --from.
    #[arg(long, requires = "follow", conflicts_with = "from")]
    pub resume: Option<String>,
    /// Messages per read request.
    #[arg(long, default_value_t = 500)]
    pub max_messages: u32,
    /// Stop after printing this many messages.
    #[arg(long, short = 'c')]
    pub count: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,
    /// Values (and keys) in the Confluent wire format printed decoded as JSON, with the schema
    /// they were decoded with (docs/schemas.md).
    #[arg(long)]
    pub decode: bool,
}

/// Runs `herald topics <command>` against `server`.
pub async fn run_topics(server: &str, command: TopicsCommand) -> anyhow::Result<()> {
    topics::run(server, command).await
}

/// Runs `herald produce` against `server`, reading stdin.
pub async fn run_produce(server: &str, args: ProduceArgs) -> anyhow::Result<()> {
    produce::run(server, args).await
}

/// Runs `herald consume` against `server`, writing stdout.
pub async fn run_consume(server: &str, args: ConsumeArgs) -> anyhow::Result<()> {
    consume::run(server, args).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Command {
        #[command(subcommand)]
        Topics(TopicsCommand),
        Produce(ProduceArgs),
        Consume(ConsumeArgs),
    }

    #[test]
    fn topics_create_parses_repeated_config() {
        let cli = Cli::try_parse_from([
            "herald",
            "topics",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention_ms=-1",
            "--config",
            "cleanup_policy=compact",
            "--server",
            "http://h:1",
        ])
        .unwrap();
        assert_eq!(cli.server.server, "http://h:1");
        match cli.command {
            Command::Topics(TopicsCommand::Create {
                name,
                partitions,
                replication_factor,
                config,
            }) => {
                assert_eq!(
                    (name.as_str(), partitions, replication_factor),
                    ("orders", 3, None)
                );
                assert_eq!(config.len(), 2);
                assert_eq!(config[0], ("retention_ms".to_string(), Value::from(-1)));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn produce_and_consume_defaults() {
        let cli = Cli::try_parse_from(["herald", "produce", "t"]).unwrap();
        let Command::Produce(args) = cli.command else {
            panic!("not produce")
        };
        assert_eq!(
            (args.batch_size, args.acks, args.bytes),
            (500, Acks::All, false)
        );

        let cli = Cli::try_parse_from([
            "herald", "consume", "t", "--from", "17", "--format", "value",
        ])
        .unwrap();
        let Command::Consume(args) = cli.command else {
            panic!("not consume")
        };
        assert_eq!(args.from, OffsetSpec::At(17));
        assert_eq!(args.format, OutputFormat::Value);
        assert!(!args.follow && args.count.is_none() && args.partition.is_none());
        assert!(Cli::try_parse_from(["herald", "consume", "t", "--from", "soon"]).is_err());
    }
}
