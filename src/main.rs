//! The `herald` binary: the server (`serve`) and the HTTP clients (`topics`, `produce`,
//! `consume`, `bench`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use herald::bench::{self, BenchCommand};
use herald::cli::{self, ConsumeArgs, ProduceArgs, ServerArg, TopicsCommand};
use herald::config::Config;

#[derive(Parser, Debug)]
#[command(
    name = "herald",
    version,
    about = "A replicated message log served over HTTP"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a node. With no flags: a one-node cluster on 127.0.0.1:8080 with data in ./data.
    Serve(ServeArgs),
    /// Creates, lists, describes and deletes topics.
    Topics {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Produces one message per line of standard input.
    Produce {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        args: ProduceArgs,
    },
    /// Prints a topic's messages, one JSON object per line.
    Consume {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        args: ConsumeArgs,
    },
    /// Load generator: measures produce and consume throughput and latency.
    Bench {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: BenchCommand,
    },
}

/// Flags of `herald serve`; each overrides the TOML file, and each has a `HERALD_*` variable.
#[derive(Args, Debug)]
struct ServeArgs {
    /// A TOML configuration file (see docs/configuration.md).
    #[arg(long, env = "HERALD_CONFIG")]
    config: Option<PathBuf>,
    /// Data directory [default: ./data].
    #[arg(long, env = "HERALD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Client API address [default: 127.0.0.1:8080].
    #[arg(long, env = "HERALD_HTTP_ADDR")]
    http_addr: Option<SocketAddr>,
    /// Internal raft RPC address [default: 127.0.0.1:8081].
    #[arg(long, env = "HERALD_RAFT_ADDR")]
    raft_addr: Option<String>,
    /// This node's id [default: 1].
    #[arg(long, env = "HERALD_NODE_ID")]
    node_id: Option<u64>,
    /// Largest request body in bytes [default: 16777216].
    #[arg(long, env = "HERALD_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Serve a non-loopback address without authentication.
    #[arg(long, env = "HERALD_INSECURE")]
    insecure: bool,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(data_dir) = self.data_dir {
            config.data_dir = data_dir;
        }
        if let Some(http_addr) = self.http_addr {
            config.http_addr = http_addr;
        }
        if let Some(raft_addr) = self.raft_addr {
            config.raft_addr = raft_addr;
        }
        if let Some(node_id) = self.node_id {
            config.node_id = node_id;
        }
        if let Some(max_body_bytes) = self.max_body_bytes {
            config.max_body_bytes = max_body_bytes;
        }
        config.insecure |= self.insecure;
        Ok(config)
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("herald: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => {
                herald::telemetry::init_tracing();
                herald::app::serve(args.into_config()?).await
            }
            Command::Topics { server, command } => cli::run_topics(&server.server, command).await,
            Command::Produce { server, args } => cli::run_produce(&server.server, args).await,
            Command::Consume { server, args } => cli::run_consume(&server.server, args).await,
            Command::Bench { server, command } => bench::run_bench(&server.server, command).await,
        }
    })
}
