//! The `herald` binary: the server (`serve`) and the HTTP clients (`topics`, `produce`,
//! `consume`, `bench`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use herald::config::Config;
use herald_client::bench::{self, BenchCommand};
use herald_client::cli::{
    self, ConsumeArgs, ProduceArgs, PullArgs, ReplyArgs, RequestArgs, SchemasCommand, ServerArg,
    SubscriptionsCommand, TopicsCommand,
};

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
    Serve(Box<ServeArgs>),
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
    /// Creates, lists, describes, deletes and redrives queue subscriptions.
    Subscriptions {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: SubscriptionsCommand,
    },
    /// Leases messages of a subscription, prints them (as `consume` does) and acks them.
    Pull {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        args: PullArgs,
    },
    /// Publishes one request to a topic and prints its reply.
    Request {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        args: RequestArgs,
    },
    /// Answers a request by its herald-reply-to and herald-correlation-id headers.
    Reply {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        args: ReplyArgs,
    },
    /// Manages OAuth2 clients and the authorization policy.
    Auth {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: cli::auth::AuthCommand,
    },
    /// The schema registry: registers, lists, shows, checks and deletes schemas.
    Schemas {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: SchemasCommand,
    },
    /// The cluster's nodes; rebalancing replicas and leaders over them.
    Cluster {
        #[command(flatten)]
        server: ServerArg,
        #[command(subcommand)]
        command: cli::cluster::ClusterCommand,
    },
    /// Takes an online backup of a node (or of every node) on its own disk; prints the manifest.
    Backup {
        #[command(flatten)]
        server: ServerArg,
        #[command(flatten)]
        args: cli::backup::BackupArgs,
    },
    /// Rebuilds a stopped node's data directory, or a whole cluster's, from backups.
    Restore(herald::restore::RestoreArgs),
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
    /// Serve a non-loopback address without TLS and authentication.
    #[arg(long, env = "HERALD_INSECURE")]
    insecure: bool,
    /// Require a bearer token and the route's right on every client request (`[auth] enabled`).
    #[arg(long, env = "HERALD_AUTH_ENABLED")]
    auth: bool,
    /// Founding members of a new cluster, the same on every founding node:
    /// `1=HOST:RAFT_PORT,2=HOST:RAFT_PORT,3=...` [default: this node alone].
    #[arg(long, env = "HERALD_INITIAL_CLUSTER")]
    initial_cluster: Option<String>,
    /// Found nothing; wait to be added to a running cluster with `POST /v1/cluster/nodes`.
    #[arg(long, env = "HERALD_JOIN")]
    join: bool,
    /// How many nodes vote in the metadata group: 1, 3 or 5 [default: 3].
    #[arg(long, env = "HERALD_METADATA_VOTERS")]
    metadata_voters: Option<usize>,
    /// This node's zone (availability zone, rack): replicas and metadata voters spread over
    /// zones.
    #[arg(long, env = "HERALD_ZONE")]
    zone: Option<String>,
    /// The replicas of a topic created without a replication factor, capped at the nodes that
    /// take replicas [default: 3].
    #[arg(long, env = "HERALD_DEFAULT_REPLICATION_FACTOR")]
    default_replication_factor: Option<u16>,
    /// Raft heartbeat interval in ms [default: 500].
    #[arg(long, env = "HERALD_HEARTBEAT_INTERVAL_MS")]
    heartbeat_interval_ms: Option<u64>,
    /// Shortest raft election timeout in ms [default: 1500].
    #[arg(long, env = "HERALD_ELECTION_TIMEOUT_MIN_MS")]
    election_timeout_min_ms: Option<u64>,
    /// Longest raft election timeout in ms [default: 2500].
    #[arg(long, env = "HERALD_ELECTION_TIMEOUT_MAX_MS")]
    election_timeout_max_ms: Option<u64>,
    /// An idle partition group goes quiet after this many ms without a write; 0: never
    /// [default: 2000].
    #[arg(long, env = "HERALD_QUIESCE_AFTER_MS")]
    quiesce_after_ms: Option<u64>,
    /// How long a request waits for a partition leader before 503 `no_leader` [default: 10000].
    #[arg(long, env = "HERALD_LEADER_WAIT_MS")]
    leader_wait_ms: Option<u64>,
    /// How long a produce waits to be acknowledged before 504 `timeout` [default: 30000].
    #[arg(long, env = "HERALD_PRODUCE_TIMEOUT_MS")]
    produce_timeout_ms: Option<u64>,
    /// Every client request's deadline in ms, then 504 `timeout` [default: 90000].
    #[arg(long, env = "HERALD_REQUEST_TIMEOUT_MS")]
    request_timeout_ms: Option<u64>,
    /// The most client requests in flight; past it 503 `overloaded` [default: 10000].
    #[arg(long, env = "HERALD_MAX_CONCURRENT_REQUESTS")]
    max_concurrent_requests: Option<usize>,
    /// The most open client connections; past it 503 `overloaded` [default: 10000].
    #[arg(long, env = "HERALD_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// How long a client connection may take to send a request's head, ms (counted from when
    /// it waits for one: also an idle HTTP/1.1 keep-alive); then it is closed [default: 30000].
    #[arg(long, env = "HERALD_HEADER_READ_TIMEOUT_MS")]
    header_read_timeout_ms: Option<u64>,
    /// A client connection with no request in flight this long (ms) is closed [default: 60000].
    #[arg(long, env = "HERALD_IDLE_TIMEOUT_MS")]
    idle_timeout_ms: Option<u64>,
    /// How often HTTP/2 connections are pinged, ms; an unanswered one is closed
    /// [default: 20000].
    #[arg(long, env = "HERALD_HTTP2_KEEPALIVE_INTERVAL_MS")]
    http2_keepalive_interval_ms: Option<u64>,
    /// A client reading nothing this long (ms) while an answer waits is closed [default: 30000].
    #[arg(long, env = "HERALD_CLIENT_STALL_TIMEOUT_MS")]
    client_stall_timeout_ms: Option<u64>,
    /// A file holding the cluster secret, the same on every node (it seals signing keys at
    /// rest and authenticates nodes without mutual TLS). HERALD_CLUSTER_SECRET holds the secret
    /// itself [default: <data_dir>/cluster-secret, generated for a node that founds a cluster
    /// alone].
    #[arg(long, env = "HERALD_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// The most open server-sent event streams; past it 503 `overloaded` [default: 1000].
    #[arg(long, env = "HERALD_MAX_SSE_STREAMS")]
    max_sse_streams: Option<usize>,
    /// Keepalive comment interval of idle server-sent event streams, ms [default: 15000].
    #[arg(long, env = "HERALD_SSE_KEEPALIVE_MS")]
    sse_keepalive_ms: Option<u64>,
    /// The most bytes of messages a partition holds waiting to be written; past it 503
    /// `overloaded` [default: 67108864].
    #[arg(long, env = "HERALD_MAX_QUEUED_BYTES_PER_PARTITION")]
    max_queued_bytes_per_partition: Option<usize>,
    /// The node's memory budget in bytes: block cache + memtables + 64 MiB of recent raft
    /// entries + in-flight produce bytes + a 128 MiB reserve; startup refuses one smaller than its parts [default: 1073741824].
    #[arg(long, env = "HERALD_MEMORY_BUDGET_BYTES")]
    memory_budget_bytes: Option<usize>,
    /// The most raft entries of produced messages a partition's leader has in flight, 1 to 64
    /// [default: 4].
    #[arg(long, env = "HERALD_MAX_IN_FLIGHT_APPENDS_PER_PARTITION")]
    max_in_flight_appends_per_partition: Option<usize>,
    /// How often retention (time and size) is checked, in ms [default: 300000].
    #[arg(long, env = "HERALD_RETENTION_CHECK_INTERVAL_MS")]
    retention_check_interval_ms: Option<u64>,
    /// Log cleaner budget, bytes read plus written per second, above 0 [default: 67108864].
    #[arg(long, env = "HERALD_CLEANER_IO_MAX_BYTES_PER_SEC")]
    cleaner_io_max_bytes_per_sec: Option<u64>,
    /// Memory for one cleaning pass's key map in bytes, at least 1048576 [default: 134217728].
    #[arg(long, env = "HERALD_CLEANER_DEDUPE_BUFFER_BYTES")]
    cleaner_dedupe_buffer_bytes: Option<u64>,
    /// Share of a compacted partition written since its last cleaning that triggers the next
    /// one, in (0, 1] [default: 0.5].
    #[arg(long, env = "HERALD_CLEANER_MIN_DIRTY_RATIO")]
    cleaner_min_dirty_ratio: Option<f64>,
    /// The shortest consumer group session a member may ask for, in ms [default: 1000].
    #[arg(long, env = "HERALD_GROUP_MIN_SESSION_TIMEOUT_MS")]
    group_min_session_timeout_ms: Option<u64>,
    /// The longest consumer group session a member may ask for, in ms [default: 300000].
    #[arg(long, env = "HERALD_GROUP_MAX_SESSION_TIMEOUT_MS")]
    group_max_session_timeout_ms: Option<u64>,
    /// The most members one consumer group may have [default: 1000].
    #[arg(long, env = "HERALD_GROUP_MAX_MEMBERS")]
    group_max_members: Option<u32>,
    /// Whether the metadata leader rebalances by itself (`true` or `false`) [default: true].
    #[arg(long, env = "HERALD_REBALANCE_AUTO")]
    rebalance_auto: Option<bool>,
    /// How long the nodes must be unchanged, all up, before an automatic rebalance, ms
    /// [default: 30000].
    #[arg(long, env = "HERALD_REBALANCE_SETTLE_MS")]
    rebalance_settle_ms: Option<u64>,
    /// The most partitions a rebalance copies to new replicas at once [default: 4].
    #[arg(long, env = "HERALD_REBALANCE_MAX_MOVES")]
    rebalance_max_moves: Option<usize>,
    /// The most requests waiting for a reply on this node; past it 503 `overloaded`
    /// [default: 10000].
    #[arg(long, env = "HERALD_MAX_WAITING_REQUESTS")]
    max_waiting_requests: Option<usize>,
    /// The most forwarded requests (long polls included) one peer may run on this node at
    /// once, and this node on one peer [default: 4096].
    #[arg(long, env = "HERALD_RPC_FORWARD_MAX_CONCURRENT_REQUESTS")]
    rpc_forward_max_concurrent_requests: Option<usize>,
    /// The client port's PEM certificate chain; with --tls-key the port speaks TLS only.
    #[arg(long, env = "HERALD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "HERALD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// This node's PEM certificate for the internal RPC (DNS name herald-node-<id>, from the
    /// cluster CA); with --rpc-tls-key and --rpc-tls-ca, nodes speak mutual TLS.
    #[arg(long, env = "HERALD_RPC_TLS_CERT", requires_all = ["rpc_tls_key", "rpc_tls_ca"])]
    rpc_tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --rpc-tls-cert.
    #[arg(long, env = "HERALD_RPC_TLS_KEY", requires = "rpc_tls_cert")]
    rpc_tls_key: Option<std::path::PathBuf>,
    /// The cluster CA (PEM) peers' certificates must come from.
    #[arg(long, env = "HERALD_RPC_TLS_CA", requires = "rpc_tls_cert")]
    rpc_tls_ca: Option<std::path::PathBuf>,
    /// Serve plaintext HTTP on the TLS port too (a migration), instead of refusing it.
    #[arg(long, env = "HERALD_TLS_ALLOW_PLAINTEXT")]
    tls_allow_plaintext: bool,
    /// The most open WebSockets; past it the handshake answers 503 [default: 1000].
    #[arg(long, env = "HERALD_WS_MAX_CONNECTIONS")]
    ws_max_connections: Option<usize>,
    /// The largest WebSocket client frame in bytes; past it close 1009 [default: 1048576].
    #[arg(long, env = "HERALD_WS_MAX_FRAME_BYTES")]
    ws_max_frame_bytes: Option<usize>,
    /// How often the server pings a WebSocket, in ms [default: 15000].
    #[arg(long, env = "HERALD_WS_PING_INTERVAL_MS")]
    ws_ping_interval_ms: Option<u64>,
    /// A WebSocket silent this long (ms) is closed 1001 [default: 60000].
    #[arg(long, env = "HERALD_WS_IDLE_TIMEOUT_MS")]
    ws_idle_timeout_ms: Option<u64>,
    /// Bytes queued to one WebSocket unread; past it subscriptions wait [default: 8388608].
    #[arg(long, env = "HERALD_WS_MAX_OUTBOUND_BYTES")]
    ws_max_outbound_bytes: Option<usize>,
    /// The credit (messages) a WebSocket subscription starts with [default: 1000].
    #[arg(long, env = "HERALD_WS_DEFAULT_CREDIT")]
    ws_default_credit: Option<u64>,
    /// The most subscriptions one WebSocket may hold [default: 1000].
    #[arg(long, env = "HERALD_WS_MAX_SUBSCRIPTIONS")]
    ws_max_subscriptions: Option<usize>,
    /// Log lines: auto (JSON when stdout is not a terminal), text or json [default: auto].
    #[arg(long, env = "HERALD_LOG_FORMAT", value_enum)]
    log_format: Option<herald::config::LogFormat>,
    /// Export spans over OTLP/HTTP (protobuf) to this collector URL, e.g.
    /// http://127.0.0.1:4318 (sends to /v1/traces) [default: none, no export].
    #[arg(long, env = "HERALD_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// The share of traces this node starts that it exports, 0.0 to 1.0 [default: 1.0].
    #[arg(long, env = "HERALD_OTLP_SAMPLE_RATIO")]
    otlp_sample_ratio: Option<f64>,
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
        config.auth.enabled |= self.auth;
        if let Some(initial_cluster) = self.initial_cluster {
            config.initial_cluster = initial_cluster;
        }
        config.join |= self.join;
        if let Some(voters) = self.metadata_voters {
            config.metadata_voters = voters;
        }
        if let Some(zone) = self.zone {
            config.zone = Some(zone);
        }
        if let Some(factor) = self.default_replication_factor {
            config.default_replication_factor = factor;
        }
        if let Some(interval) = self.heartbeat_interval_ms {
            config.raft.heartbeat_interval_ms = interval;
        }
        if let Some(timeout) = self.election_timeout_min_ms {
            config.raft.election_timeout_min_ms = timeout;
        }
        if let Some(timeout) = self.election_timeout_max_ms {
            config.raft.election_timeout_max_ms = timeout;
        }
        if let Some(after) = self.quiesce_after_ms {
            config.raft.quiesce_after_ms = after;
        }
        if let Some(wait) = self.leader_wait_ms {
            config.leader_wait_ms = wait;
        }
        if let Some(timeout) = self.produce_timeout_ms {
            config.produce_timeout_ms = timeout;
        }
        if let Some(timeout) = self.request_timeout_ms {
            config.request_timeout_ms = timeout;
        }
        if let Some(limit) = self.max_concurrent_requests {
            config.max_concurrent_requests = limit;
        }
        if let Some(limit) = self.max_connections {
            config.max_connections = limit;
        }
        if let Some(timeout) = self.header_read_timeout_ms {
            config.header_read_timeout_ms = timeout;
        }
        if let Some(timeout) = self.idle_timeout_ms {
            config.idle_timeout_ms = timeout;
        }
        if let Some(interval) = self.http2_keepalive_interval_ms {
            config.http2_keepalive_interval_ms = interval;
        }
        if let Some(timeout) = self.client_stall_timeout_ms {
            config.client_stall_timeout_ms = timeout;
        }
        if let Some(path) = self.cluster_secret_file {
            config.cluster_secret_file = Some(path);
        }
        if let Some(limit) = self.max_sse_streams {
            config.max_sse_streams = limit;
        }
        if let Some(interval) = self.sse_keepalive_ms {
            config.sse_keepalive_ms = interval;
        }
        if let Some(bytes) = self.max_queued_bytes_per_partition {
            config.max_queued_bytes_per_partition = bytes;
        }
        if let Some(bytes) = self.memory_budget_bytes {
            config.storage.memory_budget_bytes = bytes;
        }
        if let Some(entries) = self.max_in_flight_appends_per_partition {
            config.max_in_flight_appends_per_partition = entries;
        }
        if let Some(interval) = self.retention_check_interval_ms {
            config.retention_check_interval_ms = interval;
        }
        if let Some(budget) = self.cleaner_io_max_bytes_per_sec {
            config.cleaner_io_max_bytes_per_sec = budget;
        }
        if let Some(bytes) = self.cleaner_dedupe_buffer_bytes {
            config.cleaner_dedupe_buffer_bytes = bytes;
        }
        if let Some(ratio) = self.cleaner_min_dirty_ratio {
            config.cleaner_min_dirty_ratio = ratio;
        }
        if let Some(timeout) = self.group_min_session_timeout_ms {
            config.groups.min_session_timeout_ms = timeout;
        }
        if let Some(timeout) = self.group_max_session_timeout_ms {
            config.groups.max_session_timeout_ms = timeout;
        }
        if let Some(auto) = self.rebalance_auto {
            config.rebalance.auto = auto;
        }
        if let Some(settle) = self.rebalance_settle_ms {
            config.rebalance.settle_ms = settle;
        }
        if let Some(moves) = self.rebalance_max_moves {
            config.rebalance.max_moves = moves;
        }
        if let Some(members) = self.group_max_members {
            config.groups.max_members = members;
        }
        if let Some(limit) = self.max_waiting_requests {
            config.max_waiting_requests = limit;
        }
        if let Some(limit) = self.rpc_forward_max_concurrent_requests {
            config.rpc.forward_max_concurrent_requests = limit;
        }
        if let Some(path) = self.tls_cert {
            config.tls.cert_file = Some(path);
        }
        if let Some(path) = self.tls_key {
            config.tls.key_file = Some(path);
        }
        config.tls.allow_plaintext |= self.tls_allow_plaintext;
        if let Some(format) = self.log_format {
            config.telemetry.log_format = format;
        }
        if let Some(endpoint) = self.otlp_endpoint {
            config.telemetry.otlp_endpoint = Some(endpoint);
        }
        if let Some(ratio) = self.otlp_sample_ratio {
            config.telemetry.otlp_sample_ratio = ratio;
        }
        if let Some(path) = self.rpc_tls_cert {
            config.tls.rpc_cert_file = Some(path);
        }
        if let Some(path) = self.rpc_tls_key {
            config.tls.rpc_key_file = Some(path);
        }
        if let Some(path) = self.rpc_tls_ca {
            config.tls.rpc_ca_file = Some(path);
        }
        if let Some(value) = self.ws_max_connections {
            config.ws.max_connections = value;
        }
        if let Some(value) = self.ws_max_frame_bytes {
            config.ws.max_frame_bytes = value;
        }
        if let Some(value) = self.ws_ping_interval_ms {
            config.ws.ping_interval_ms = value;
        }
        if let Some(value) = self.ws_idle_timeout_ms {
            config.ws.idle_timeout_ms = value;
        }
        if let Some(value) = self.ws_max_outbound_bytes {
            config.ws.max_outbound_bytes = value;
        }
        if let Some(value) = self.ws_default_credit {
            config.ws.default_credit = value;
        }
        if let Some(value) = self.ws_max_subscriptions {
            config.ws.max_subscriptions = value;
        }
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
    if let Command::Serve(_) = cli.command {
        // Before any thread or file exists: whatever the node creates (RocksDB's files, the
        // cluster secret) is its owner's alone, whatever umask it was started with.
        herald::storage::private_files::restrict_new_files();
        herald::allocator::limit_arenas();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        if let Some(server) = cli.command.server() {
            server.configure()?;
        }
        match cli.command {
            Command::Serve(args) => {
                let config = args.into_config()?;
                config.validate()?;
                // Dropped when serving ends, after the last request: it exports the spans
                // still queued.
                let _exporting =
                    herald::telemetry::init_logging(&config.telemetry, config.node_id)?;
                herald::app::serve(config).await
            }
            Command::Topics { server, command } => cli::run_topics(&server.server, command).await,
            Command::Produce { server, args } => cli::run_produce(&server.server, args).await,
            Command::Consume { server, args } => cli::run_consume(&server.server, args).await,
            Command::Subscriptions { server, command } => {
                cli::subscriptions::run(&server.server, command).await
            }
            Command::Pull { server, args } => cli::pull::run(&server.server, args).await,
            Command::Request { server, args } => {
                cli::request::run_request(&server.server, args).await
            }
            Command::Reply { server, args } => cli::request::run_reply(&server.server, args).await,
            Command::Auth { server, command } => cli::auth::run(&server.server, command).await,
            Command::Bench { server, command } => bench::run_bench(&server.server, command).await,
            Command::Backup { server, args } => cli::backup::run(&server.server, args).await,
            Command::Schemas { server, command } => {
                cli::schemas::run(&server.server, command).await
            }
            Command::Cluster { server, command } => {
                cli::cluster::run(&server.server, command).await
            }
            Command::Restore(args) => args.run(),
        }
    })
}

impl Command {
    /// The client commands' connection flags.
    fn server(&self) -> Option<&ServerArg> {
        match self {
            Command::Serve(_) | Command::Restore(_) => None,
            Command::Topics { server, .. }
            | Command::Produce { server, .. }
            | Command::Consume { server, .. }
            | Command::Subscriptions { server, .. }
            | Command::Pull { server, .. }
            | Command::Request { server, .. }
            | Command::Reply { server, .. }
            | Command::Auth { server, .. }
            | Command::Bench { server, .. }
            | Command::Backup { server, .. }
            | Command::Schemas { server, .. }
            | Command::Cluster { server, .. } => Some(server),
        }
    }
}
