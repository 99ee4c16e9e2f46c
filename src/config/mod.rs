//! Typed node configuration: defaults, then an optional TOML file (`--config`), then
//! `HERALD_*` environment variables and command-line flags (the last two through clap).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod audit;
mod auth;
mod quotas;
mod storage;
mod tls;
pub use audit::AuditConfig;
pub use auth::{AuthConfig, ExternalIssuerConfig};
pub use herald_api::ws::config::{
    WsConfig, DEFAULT_CLIENT_STALL_TIMEOUT_MS, DEFAULT_WS_MAX_SUBSCRIPTIONS,
};
pub use herald_telemetry::config::{LogFormat, TelemetryConfig};
pub use quotas::{ClientQuota, QuotasConfig};
pub use storage::StorageConfig;
pub use tls::TlsConfig;

/// 64 MiB/s: the default `cleaner_io_max_bytes_per_sec`.
pub const DEFAULT_CLEANER_IO_MAX_BYTES_PER_SEC: u64 = 64 << 20;
/// 128 MiB: the default `cleaner_dedupe_buffer_bytes`.
pub const DEFAULT_CLEANER_DEDUPE_BUFFER_BYTES: u64 = 128 << 20;
/// The smallest `cleaner_dedupe_buffer_bytes` accepted: 1 MiB.
pub const MIN_CLEANER_DEDUPE_BUFFER_BYTES: u64 = 1 << 20;
/// The default `cleaner_min_dirty_ratio`.
pub const DEFAULT_CLEANER_MIN_DIRTY_RATIO: f64 = 0.5;
/// 64 MiB: the default `max_queued_bytes_per_partition`.
pub const DEFAULT_MAX_QUEUED_BYTES_PER_PARTITION: usize = 64 << 20;
/// The default `max_in_flight_appends_per_partition`.
pub const DEFAULT_MAX_IN_FLIGHT_APPENDS_PER_PARTITION: usize = 4;
/// The largest `max_in_flight_appends_per_partition` accepted.
pub const MAX_IN_FLIGHT_APPENDS_PER_PARTITION: usize = 64;

/// Everything a node is configured with. Every field has a default; see `docs/configuration.md`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// This node's id, unique in the cluster and fixed for its data directory.
    pub node_id: u64,
    /// Where RocksDB keeps this node's data. Created if missing.
    pub data_dir: PathBuf,
    /// The client API (HTTP, WebSocket, SSE, console).
    pub http_addr: SocketAddr,
    /// The internal RPC address (raft and forwarded requests) other nodes reach this one at;
    /// the node listens on it too. A host name resolves to this node's own address.
    pub raft_addr: String,
    /// The founding members of a new cluster, `ID=HOST:PORT` (raft addresses), comma
    /// separated, the same on every founding node. Empty: a cluster of this node alone.
    /// Ignored once the data directory belongs to a cluster.
    pub initial_cluster: String,
    /// Start without founding a cluster and wait to be added with `POST /v1/cluster/nodes`.
    pub join: bool,
    /// How many nodes vote in the metadata group (the rest follow it as learners): 1, 3 or 5.
    pub metadata_voters: usize,
    /// The failure domain this node is in (an availability zone, a rack): partitions' replicas
    /// and the metadata group's voters spread over as many zones as there are. 1 to 64 of
    /// `A-Za-z0-9._-`. None: a zone of its own.
    pub zone: Option<String>,
    /// The replicas of each partition of a topic created without a `replication_factor`,
    /// capped at the nodes that take replicas when it is created: 3 on a cluster of three or
    /// more, 1 on a node alone. At least 1.
    pub default_replication_factor: u16,
    /// The largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// The most bytes of stored batches one fetch gathers.
    pub fetch_max_bytes: usize,
    /// How long a request waits for a partition's leader (e.g. during startup) before 503.
    pub leader_wait_ms: u64,
    /// How long a produce waits for its batches to be acknowledged: a batch still queued then
    /// is dropped, never written (503 `unavailable`); one being replicated answers 504
    /// `timeout` (the outcome is unknown: it may still be written when a lost quorum returns).
    pub produce_timeout_ms: u64,
    /// How often partition leaders check retention (time and size) and trim expired batches.
    pub retention_check_interval_ms: u64,
    /// The log cleaner's budget of bytes read plus written per second, all compacted partitions
    /// of the node together (one cleaning pass runs at a time). Must be above 0.
    pub cleaner_io_max_bytes_per_sec: u64,
    /// Memory for the key map of one cleaning pass, in bytes; a partition leader plans passes
    /// that fit in it. At least 1 MiB.
    pub cleaner_dedupe_buffer_bytes: u64,
    /// A compacted partition is cleaned once this share of its messages was written since the
    /// last pass: above 0, at most 1.
    pub cleaner_min_dirty_ratio: f64,
    /// How many `acks=none` produce requests may still be writing in the background; past it,
    /// such requests wait (backpressure) instead of buffering without bound.
    pub max_unacknowledged_produces: usize,
    /// How long a graceful shutdown waits for in-flight requests.
    pub shutdown_grace_ms: u64,
    /// On SIGTERM, how long the node waits for the leadership of the groups it leads to move
    /// to in-sync replicas before it stops taking requests (the rest is elected after it is
    /// gone, as after a crash). 0: stop without handing off.
    pub leadership_handoff_timeout_ms: u64,
    /// Every client request's server-side deadline: past it the request answers 504 `timeout`
    /// and its work is dropped. Keep it above the longest long poll (60 s) plus the produce
    /// timeout's share, or long polls end with 504 instead of an empty answer.
    pub request_timeout_ms: u64,
    /// The most client requests in flight at once; past it a request answers 503 `overloaded`
    /// with `Retry-After` and does nothing. `/healthz`, `/readyz` and `/metrics` are not counted.
    pub max_concurrent_requests: usize,
    /// The most open client connections; past it a new connection is answered one 503
    /// `overloaded` and closed.
    pub max_connections: usize,
    /// The most server-sent event streams open at once on this node; past it a new stream
    /// answers 503 `overloaded` with `Retry-After`. Streams are not counted in
    /// `max_concurrent_requests` (they last for hours) but hold a connection each.
    pub max_sse_streams: usize,
    /// How often an idle server-sent event stream sends a `: keepalive` comment, so proxies and
    /// load balancers do not close it. At least 1000.
    pub sse_keepalive_ms: u64,
    /// Allows binding the client API to a non-loopback address without TLS and authentication.
    pub insecure: bool,
    /// How long a client connection may take to deliver a request's head (request line and
    /// headers), counted from when it waits for one: just opened (after the TLS handshake),
    /// or, on HTTP/1.1, after the previous answer. Past it the connection is closed, so slow
    /// or silent clients cannot hold `max_connections`. At least 100.
    pub header_read_timeout_ms: u64,
    /// A client connection with no request in flight for this long is closed (HTTP/2 with a
    /// GOAWAY). At least 100.
    pub idle_timeout_ms: u64,
    /// How often an HTTP/2 connection is pinged; one whose peer does not answer within the
    /// same time is closed (a vanished client). At least 100.
    pub http2_keepalive_interval_ms: u64,
    /// A client that reads nothing for this long while an answer waits for it (an event
    /// stream, a WebSocket's frames, a large read) is disconnected. A client that reads, however
    /// slowly, is never cut off: the node stops reading for its streams until it drains them
    /// (backpressure). At least 100.
    pub client_stall_timeout_ms: u64,
    /// A file holding the cluster secret (the same on every node; `cluster_secret`). None:
    /// `HERALD_CLUSTER_SECRET`, else `<data_dir>/cluster-secret`.
    pub cluster_secret_file: Option<PathBuf>,
    /// The most bytes of messages (encoded as stored: key, value, headers and their framing)
    /// one partition's leader holds waiting to be written, those being replicated included;
    /// past it a produce to the partition answers 503 `overloaded` with `Retry-After` at once
    /// and writes nothing. Bounds what a partition whose quorum is gone accumulates.
    pub max_queued_bytes_per_partition: usize,
    /// The most raft entries of produced messages one partition's leader has proposed and not
    /// yet seen committed: the next batch is proposed without waiting for the quorum of the
    /// ones before, so a partition's throughput is not one entry per replication round trip.
    /// 1 to 64.
    pub max_in_flight_appends_per_partition: usize,
    /// The most requests (`POST /v1/topics/{topic}/requests`) waiting for their reply on this
    /// node at once; past it a request answers 503 `overloaded` with `Retry-After` and publishes
    /// nothing. At least 1.
    pub max_waiting_requests: usize,
    pub raft: RaftConfig,
    pub rebalance: RebalanceConfig,
    pub storage: StorageConfig,
    pub groups: GroupsConfig,
    pub rpc: RpcConfig,
    pub ws: WsConfig,
    pub tls: TlsConfig,
    pub auth: AuthConfig,
    pub audit: AuditConfig,
    pub quotas: QuotasConfig,
    pub telemetry: TelemetryConfig,
}

/// Raft timing, shared by every group of the node.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RaftConfig {
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// What a leader sends followers far behind its commit point (more than 1024 entries: a
    /// replaced node rebuilding its replicas, a node back after a long absence), in bytes per
    /// second for the whole node, so the partitions' clients keep their latency while replicas
    /// are rebuilt. Followers near the commit point are never held. 0: unlimited.
    pub catch_up_bytes_per_sec: u64,
    /// A partition group with no write for this long whose followers all hold its whole log
    /// goes quiet: no ticks, no heartbeats, until a write, a raft message or a silent peer
    /// wakes it. What lets a node hold thousands of idle partitions. 0: never.
    pub quiesce_after_ms: u64,
}

/// Rebalancing (`[rebalance]`): moving replicas and preferred leaderships so that nodes hold
/// about equal shares, a few partitions at a time (docs/clustering.md "Balance").
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RebalanceConfig {
    /// The metadata leader rebalances by itself once the cluster's nodes have settled (a node
    /// that joined gets its share). False: only `POST /v1/cluster/rebalance` moves anything.
    pub auto: bool,
    /// How long the cluster's nodes must have been the same, every one up and none draining,
    /// before an automatic rebalance moves anything: a node restarting is not a reason to move
    /// its replicas away.
    pub settle_ms: u64,
    /// The most partitions copying to new replicas at once (the bytes they copy are held to
    /// `raft.catch_up_bytes_per_sec`). At least 1.
    pub max_moves: usize,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        RebalanceConfig {
            auto: true,
            settle_ms: 30_000,
            max_moves: 4,
        }
    }
}

/// Consumer group limits (`[groups]`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GroupsConfig {
    /// The shortest `session_timeout_ms` a member may ask for. Short sessions make the metadata
    /// leader expire members that merely paused.
    pub min_session_timeout_ms: u64,
    /// The longest `session_timeout_ms` a member may ask for: how long a dead member's
    /// partitions may sit unread at most.
    pub max_session_timeout_ms: u64,
    /// The session a member gets when its join names none.
    pub default_session_timeout_ms: u64,
    /// The most members one group may have; a join past it is 409 `group_full`.
    pub max_members: u32,
    /// The longest poll `cursor` a request may carry, in characters (400 past it); an
    /// answer's cursor is kept within it, leaving out positions a member with thousands of
    /// partitions cannot fit (those restart at the committed offset). At least 1024.
    pub max_cursor_bytes: usize,
    /// The most consumer groups listed with their own series in `/metrics` (the first by
    /// name); the others are only counted, so client-chosen names cannot grow the series
    /// without bound.
    pub max_metric_groups: usize,
}

/// Limits of the internal RPC's client lane (`[rpc]`): the connection to each peer that carries
/// the client requests this node forwards to partition leaders. Raft messages and the cluster's
/// own requests travel on a separate control lane with fixed limits, so forwarded traffic can
/// never hold them up.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RpcConfig {
    /// The most forwarded requests one peer may have running on this node at once (long polls
    /// included), and the most this node keeps running on one peer; past it a forwarded request
    /// waits for room within its own deadline. At least 1.
    pub forward_max_concurrent_requests: usize,
    /// The most bytes of forwarded request bodies this node has in flight to one peer; past it a
    /// forwarded request waits for room within its own deadline. At least 1.
    pub forward_max_in_flight_bytes: usize,
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            forward_max_concurrent_requests: 4096,
            forward_max_in_flight_bytes: 256 << 20,
        }
    }
}

impl Default for GroupsConfig {
    fn default() -> Self {
        GroupsConfig {
            min_session_timeout_ms: 1_000,
            max_session_timeout_ms: 300_000,
            default_session_timeout_ms: 10_000,
            max_members: 1_000,
            max_cursor_bytes: 64 * 1024,
            max_metric_groups: 1_000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_id: 1,
            data_dir: PathBuf::from("./data"),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            raft_addr: "127.0.0.1:8081".into(),
            initial_cluster: String::new(),
            join: false,
            metadata_voters: 3,
            zone: None,
            max_body_bytes: 16 << 20,
            fetch_max_bytes: 16 << 20,
            leader_wait_ms: 10_000,
            produce_timeout_ms: 30_000,
            retention_check_interval_ms: 300_000,
            cleaner_io_max_bytes_per_sec: DEFAULT_CLEANER_IO_MAX_BYTES_PER_SEC,
            cleaner_dedupe_buffer_bytes: DEFAULT_CLEANER_DEDUPE_BUFFER_BYTES,
            cleaner_min_dirty_ratio: DEFAULT_CLEANER_MIN_DIRTY_RATIO,
            max_unacknowledged_produces: 1024,
            shutdown_grace_ms: 10_000,
            leadership_handoff_timeout_ms: 10_000,
            request_timeout_ms: 90_000,
            max_concurrent_requests: 10_000,
            max_connections: 10_000,
            max_sse_streams: 1_000,
            sse_keepalive_ms: 15_000,
            insecure: false,
            header_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            http2_keepalive_interval_ms: 20_000,
            client_stall_timeout_ms: DEFAULT_CLIENT_STALL_TIMEOUT_MS,
            cluster_secret_file: None,
            max_queued_bytes_per_partition: DEFAULT_MAX_QUEUED_BYTES_PER_PARTITION,
            max_in_flight_appends_per_partition: DEFAULT_MAX_IN_FLIGHT_APPENDS_PER_PARTITION,
            max_waiting_requests: 10_000,
            default_replication_factor: 3,
            raft: RaftConfig::default(),
            rebalance: RebalanceConfig::default(),
            storage: StorageConfig::default(),
            groups: GroupsConfig::default(),
            rpc: RpcConfig::default(),
            ws: WsConfig::default(),
            tls: TlsConfig::default(),
            auth: AuthConfig::default(),
            audit: AuditConfig::default(),
            telemetry: TelemetryConfig::default(),
            quotas: QuotasConfig::default(),
        }
    }
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            heartbeat_interval_ms: 500,
            election_timeout_min_ms: 1500,
            election_timeout_max_ms: 2500,
            catch_up_bytes_per_sec: crate::raft::DEFAULT_CATCH_UP_BYTES_PER_SEC,
            quiesce_after_ms: 2000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Defaults overlaid with a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source,
        })
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.node_id == 0 || self.node_id > i64::MAX as u64 {
            return Err(ConfigError::Invalid(format!(
                "node_id must be 1 to {}",
                i64::MAX
            )));
        }
        if self.request_timeout_ms < 100 {
            return Err(ConfigError::Invalid(
                "request_timeout_ms must be at least 100".into(),
            ));
        }
        if self.max_concurrent_requests == 0 || self.max_connections == 0 {
            return Err(ConfigError::Invalid(
                "max_concurrent_requests and max_connections must be at least 1".into(),
            ));
        }
        if self.header_read_timeout_ms < 100
            || self.idle_timeout_ms < 100
            || self.http2_keepalive_interval_ms < 100
            || self.client_stall_timeout_ms < 100
        {
            return Err(ConfigError::Invalid(
                "header_read_timeout_ms, idle_timeout_ms, http2_keepalive_interval_ms and client_stall_timeout_ms must be at least 100"
                    .into(),
            ));
        }
        if self.max_sse_streams == 0 || self.sse_keepalive_ms < 1000 {
            return Err(ConfigError::Invalid(
                "max_sse_streams must be at least 1 and sse_keepalive_ms at least 1000".into(),
            ));
        }
        if self.max_queued_bytes_per_partition == 0 {
            return Err(ConfigError::Invalid(
                "max_queued_bytes_per_partition must be at least 1".into(),
            ));
        }
        if !(1..=MAX_IN_FLIGHT_APPENDS_PER_PARTITION)
            .contains(&self.max_in_flight_appends_per_partition)
        {
            return Err(ConfigError::Invalid(format!(
                "max_in_flight_appends_per_partition must be from 1 to {MAX_IN_FLIGHT_APPENDS_PER_PARTITION}"
            )));
        }
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "max_body_bytes must be at least 1024".into(),
            ));
        }
        if self.raft.election_timeout_min_ms <= self.raft.heartbeat_interval_ms
            || self.raft.election_timeout_max_ms <= self.raft.election_timeout_min_ms
        {
            return Err(ConfigError::Invalid(
                "raft timing must satisfy heartbeat_interval_ms < election_timeout_min_ms < election_timeout_max_ms"
                    .into(),
            ));
        }
        if self.rebalance.max_moves == 0 {
            return Err(ConfigError::Invalid(
                "rebalance.max_moves must be at least 1".into(),
            ));
        }
        // Below it one raft entry of a few megabytes would hold a rebuild for seconds on end.
        if self.raft.catch_up_bytes_per_sec != 0 && self.raft.catch_up_bytes_per_sec < 1 << 20 {
            return Err(ConfigError::Invalid(format!(
                "raft.catch_up_bytes_per_sec must be 0 (unlimited) or at least 1048576 (1 MiB/s), got {}",
                self.raft.catch_up_bytes_per_sec
            )));
        }
        if self.default_replication_factor == 0 {
            return Err(ConfigError::Invalid(
                "default_replication_factor must be at least 1".into(),
            ));
        }
        if self.max_waiting_requests == 0 {
            return Err(ConfigError::Invalid(
                "max_waiting_requests must be at least 1".into(),
            ));
        }
        let groups = &self.groups;
        if groups.min_session_timeout_ms < 100
            || groups.min_session_timeout_ms > groups.default_session_timeout_ms
            || groups.default_session_timeout_ms > groups.max_session_timeout_ms
        {
            return Err(ConfigError::Invalid(
                "groups: session timeouts must satisfy 100 <= min_session_timeout_ms <= default_session_timeout_ms <= max_session_timeout_ms"
                    .into(),
            ));
        }
        if groups.max_members == 0 {
            return Err(ConfigError::Invalid(
                "groups.max_members must be at least 1".into(),
            ));
        }
        if groups.max_cursor_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "groups.max_cursor_bytes must be at least 1024".into(),
            ));
        }
        if self.rpc.forward_max_concurrent_requests == 0
            || self.rpc.forward_max_in_flight_bytes == 0
        {
            return Err(ConfigError::Invalid(
                "rpc.forward_max_concurrent_requests and rpc.forward_max_in_flight_bytes must be at least 1"
                    .into(),
            ));
        }
        let ws = &self.ws;
        if ws.max_connections == 0
            || ws.max_frame_bytes < 1024
            || ws.max_outbound_bytes < ws.max_frame_bytes
            || ws.ping_interval_ms < 10
            || ws.idle_timeout_ms <= ws.ping_interval_ms
            || ws.default_credit == 0
            || ws.max_subscriptions == 0
        {
            return Err(ConfigError::Invalid(
                "ws: max_connections, default_credit and max_subscriptions at least 1, max_frame_bytes at least 1024 and at most max_outbound_bytes, 10 <= ping_interval_ms < idle_timeout_ms"
                    .into(),
            ));
        }
        self.storage.validate(self.max_body_bytes)?;
        self.tls.validate()?;
        self.auth.validate()?;
        self.audit.validate()?;
        self.quotas.validate()?;
        self.telemetry.validate().map_err(ConfigError::Invalid)?;
        if let Some(zone) = &self.zone {
            herald_domain::zones::validate_zone(zone)
                .map_err(|reason| ConfigError::Invalid(format!("zone: {reason}")))?;
        }
        if ![1, 3, 5].contains(&self.metadata_voters) {
            return Err(ConfigError::Invalid(
                "metadata_voters must be 1, 3 or 5".into(),
            ));
        }
        if self.cleaner_io_max_bytes_per_sec == 0 {
            return Err(ConfigError::Invalid(
                "cleaner_io_max_bytes_per_sec must be above 0 (there is no unlimited setting)"
                    .into(),
            ));
        }
        if self.cleaner_dedupe_buffer_bytes < MIN_CLEANER_DEDUPE_BUFFER_BYTES {
            return Err(ConfigError::Invalid(format!(
                "cleaner_dedupe_buffer_bytes must be at least {MIN_CLEANER_DEDUPE_BUFFER_BYTES} (1 MiB), got {}",
                self.cleaner_dedupe_buffer_bytes
            )));
        }
        // Written so that NaN fails too.
        if !(self.cleaner_min_dirty_ratio > 0.0 && self.cleaner_min_dirty_ratio <= 1.0) {
            return Err(ConfigError::Invalid(format!(
                "cleaner_min_dirty_ratio must be above 0 and at most 1, got {}",
                self.cleaner_min_dirty_ratio
            )));
        }
        let founders = self.founding_members()?;
        if !founders.is_empty() && !founders.contains_key(&self.node_id) {
            return Err(ConfigError::Invalid(format!(
                "initial_cluster does not list this node (node_id {})",
                self.node_id
            )));
        }
        if self.join && !founders.is_empty() {
            return Err(ConfigError::Invalid(
                "join and initial_cluster exclude each other: a joining node is added by the running cluster"
                    .into(),
            ));
        }
        let secured = self.tls.enabled() && self.auth.enabled;
        if !self.http_addr.ip().is_loopback() && !self.insecure && !secured {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve {} without TLS and authentication: configure TLS (--tls-cert, --tls-key) \
                 and enable authentication (--auth), bind to 127.0.0.1, or pass --insecure to accept \
                 unauthenticated clients on this address",
                self.http_addr
            )));
        }
        if !is_loopback_address(&self.raft_addr) && !self.insecure && !self.tls.rpc_enabled() {
            return Err(ConfigError::Invalid(format!(
                "refusing to open the internal RPC on {} without authentication between nodes: configure mutual \
                 TLS (--rpc-tls-cert, --rpc-tls-key, --rpc-tls-ca), use a loopback address, or pass --insecure \
                 on a network only the cluster's nodes can reach",
                self.raft_addr
            )));
        }
        Ok(())
    }
}

/// Whether `HOST:PORT` names a loopback address (`localhost` counts; other names do not, since
/// they may resolve anywhere).
fn is_loopback_address(address: &str) -> bool {
    if let Ok(socket) = address.parse::<SocketAddr>() {
        return socket.ip().is_loopback();
    }
    address
        .rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}

impl Config {
    /// The address this node dials its peers from: the IP of `raft_addr` when it names a
    /// specific one, so every connection between two nodes carries both nodes' own addresses
    /// (a packet filter can cut one link; several nodes can share a host). `None` for an
    /// unspecified address (`0.0.0.0`, `::`) or a host name: the kernel chooses.
    pub fn raft_source_ip(&self) -> Option<std::net::IpAddr> {
        let address = self.raft_addr.parse::<SocketAddr>().ok()?;
        (!address.ip().is_unspecified()).then(|| address.ip())
    }

    /// Whether this node may be the only one of its cluster: it founds a cluster alone (no
    /// `initial_cluster` but itself, no `join`). Only such a node may make up a cluster
    /// secret of its own.
    pub fn founds_alone(&self) -> bool {
        !self.join
            && self
                .founding_members()
                .map(|founders| founders.keys().all(|id| *id == self.node_id))
                .unwrap_or(false)
    }

    /// The parsed `initial_cluster`: node id to raft address.
    pub fn founding_members(&self) -> Result<BTreeMap<u64, String>, ConfigError> {
        parse_initial_cluster(&self.initial_cluster)
    }
}

/// Parses `1=host:7000,2=host:7001`.
pub fn parse_initial_cluster(text: &str) -> Result<BTreeMap<u64, String>, ConfigError> {
    let mut members = BTreeMap::new();
    for item in text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let invalid = || {
            ConfigError::Invalid(format!(
                "initial_cluster entry '{item}' is not ID=HOST:PORT"
            ))
        };
        let (id, address) = item.split_once('=').ok_or_else(invalid)?;
        let id: u64 = id.trim().parse().map_err(|_| invalid())?;
        let address = address.trim();
        let port_ok = address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if id == 0 || !port_ok {
            return Err(invalid());
        }
        if members.insert(id, address.to_string()).is_some() {
            return Err(ConfigError::Invalid(format!(
                "initial_cluster lists node {id} twice"
            )));
        }
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_a_loopback_single_node() {
        let config = Config::default();
        assert_eq!(config.http_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(config.node_id, 1);
        config.validate().unwrap();
    }

    #[test]
    fn peers_are_dialled_from_a_specific_raft_ip_only() {
        let with = |raft_addr: &str| Config {
            raft_addr: raft_addr.into(),
            ..Config::default()
        };
        assert_eq!(
            with("127.55.1.2:7000").raft_source_ip(),
            Some("127.55.1.2".parse().unwrap())
        );
        assert_eq!(
            with("[::1]:7000").raft_source_ip(),
            Some("::1".parse().unwrap())
        );
        assert_eq!(with("0.0.0.0:7000").raft_source_ip(), None);
        assert_eq!(with("[::]:7000").raft_source_ip(), None);
        assert_eq!(with("herald1:7000").raft_source_ip(), None);
    }

    #[test]
    fn toml_overrides_defaults_and_rejects_unknown_keys() {
        let config: Config =
            toml::from_str("node_id = 3\n[raft]\nheartbeat_interval_ms = 100\n").unwrap();
        assert_eq!(config.node_id, 3);
        assert_eq!(config.raft.heartbeat_interval_ms, 100);
        assert_eq!(config.raft.election_timeout_min_ms, 1500);
        assert!(toml::from_str::<Config>("nod_id = 3").is_err());
    }

    #[test]
    fn the_catch_up_throttle_is_off_or_at_least_a_mebibyte_a_second() {
        let config: Config =
            toml::from_str("[raft]\ncatch_up_bytes_per_sec = 0\n[storage]\nbackup_dir = \"/b\"\n")
                .unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.storage.backup_dir.as_deref(),
            Some(std::path::Path::new("/b"))
        );
        assert_eq!(
            Config::default().raft.catch_up_bytes_per_sec,
            crate::raft::DEFAULT_CATCH_UP_BYTES_PER_SEC
        );
        let slow: Config = toml::from_str("[raft]\ncatch_up_bytes_per_sec = 1000\n").unwrap();
        let error = slow.validate().expect_err("too slow").to_string();
        assert!(error.contains("raft.catch_up_bytes_per_sec"), "{error}");
    }

    #[test]
    fn cleaner_defaults_and_toml() {
        let config = Config::default();
        assert_eq!(config.cleaner_io_max_bytes_per_sec, 67_108_864);
        assert_eq!(config.cleaner_dedupe_buffer_bytes, 134_217_728);
        assert_eq!(config.cleaner_min_dirty_ratio, 0.5);
        let config: Config = toml::from_str(
            "cleaner_io_max_bytes_per_sec = 1000\ncleaner_dedupe_buffer_bytes = 1048576\n\
             cleaner_min_dirty_ratio = 1.0\n",
        )
        .unwrap();
        assert_eq!(config.cleaner_io_max_bytes_per_sec, 1000);
        assert_eq!(config.cleaner_dedupe_buffer_bytes, 1 << 20);
        assert_eq!(config.cleaner_min_dirty_ratio, 1.0);
        config.validate().unwrap();
    }

    #[test]
    fn cleaner_settings_are_checked() {
        let invalid = |config: Config, key: &str| {
            let error = config.validate().expect_err(key).to_string();
            assert!(error.contains(key), "{error}");
        };
        invalid(
            Config {
                cleaner_io_max_bytes_per_sec: 0,
                ..Config::default()
            },
            "cleaner_io_max_bytes_per_sec",
        );
        invalid(
            Config {
                cleaner_dedupe_buffer_bytes: (1 << 20) - 1,
                ..Config::default()
            },
            "cleaner_dedupe_buffer_bytes",
        );
        for ratio in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            invalid(
                Config {
                    cleaner_min_dirty_ratio: ratio,
                    ..Config::default()
                },
                "cleaner_min_dirty_ratio",
            );
        }
        Config {
            cleaner_io_max_bytes_per_sec: 1,
            cleaner_dedupe_buffer_bytes: 1 << 20,
            cleaner_min_dirty_ratio: f64::MIN_POSITIVE,
            ..Config::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn queued_bytes_bound_defaults_and_is_checked() {
        assert_eq!(Config::default().max_queued_bytes_per_partition, 67_108_864);
        let config: Config = toml::from_str("max_queued_bytes_per_partition = 65536\n").unwrap();
        assert_eq!(config.max_queued_bytes_per_partition, 65_536);
        config.validate().unwrap();
        let zero = Config {
            max_queued_bytes_per_partition: 0,
            ..Config::default()
        };
        let error = zero.validate().expect_err("zero").to_string();
        assert!(error.contains("max_queued_bytes_per_partition"), "{error}");
    }

    #[test]
    fn connection_timeouts_and_security_settings_default_parse_and_are_checked() {
        let config = Config::default();
        assert_eq!(config.header_read_timeout_ms, 30_000);
        assert_eq!(config.idle_timeout_ms, 60_000);
        assert_eq!(config.http2_keepalive_interval_ms, 20_000);
        assert_eq!(config.cluster_secret_file, None);
        assert_eq!(config.auth.failed_token_requests_per_client_per_min, 20);
        assert_eq!(config.auth.failed_token_requests_per_address_per_min, 60);
        assert!((1..=4).contains(&config.auth.effective_secret_checks()));
        assert_eq!(config.audit.refusal_window_ms, 60_000);
        let config: Config = toml::from_str(
            "header_read_timeout_ms = 1000\ncluster_secret_file = \"/etc/herald/secret\"\n\
             [auth]\nmax_concurrent_secret_checks = 2\nsecret_check_queue = 0\n\
             [audit]\nrefusal_window_ms = 500\n",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.auth.effective_secret_checks(), 2);
        for bad in [
            "header_read_timeout_ms = 99",
            "idle_timeout_ms = 0",
            "http2_keepalive_interval_ms = 10",
            "[auth]\nmax_concurrent_secret_checks = 5",
            "[audit]\nrefusal_window_ms = 99",
        ] {
            let config: Config = toml::from_str(bad).unwrap();
            assert!(config.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_node_founding_a_cluster_alone_founds_alone() {
        let config = Config::default();
        assert!(config.founds_alone());
        let listed_alone = Config {
            initial_cluster: "1=127.0.0.1:7000".into(),
            ..Config::default()
        };
        assert!(listed_alone.founds_alone());
        let founder = Config {
            initial_cluster: "1=a:1,2=b:1".into(),
            ..Config::default()
        };
        assert!(!founder.founds_alone());
        let joiner = Config {
            join: true,
            ..Config::default()
        };
        assert!(!joiner.founds_alone());
    }

    #[test]
    fn rpc_forward_limits_default_parse_and_are_checked() {
        let config = Config::default();
        assert_eq!(config.rpc.forward_max_concurrent_requests, 4096);
        assert_eq!(config.rpc.forward_max_in_flight_bytes, 256 << 20);
        let config: Config = toml::from_str(
            "[rpc]\nforward_max_concurrent_requests = 16\nforward_max_in_flight_bytes = 1024\n",
        )
        .unwrap();
        assert_eq!(config.rpc.forward_max_concurrent_requests, 16);
        assert_eq!(config.rpc.forward_max_in_flight_bytes, 1024);
        config.validate().unwrap();
        for rpc in [
            RpcConfig {
                forward_max_concurrent_requests: 0,
                ..RpcConfig::default()
            },
            RpcConfig {
                forward_max_in_flight_bytes: 0,
                ..RpcConfig::default()
            },
        ] {
            let error = Config {
                rpc,
                ..Config::default()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(error.contains("rpc.forward_max"), "{error}");
        }
    }

    #[test]
    fn initial_cluster_is_parsed_and_checked() {
        let members = parse_initial_cluster("1=a:7000, 2=127.0.0.1:7001,3=b:1").unwrap();
        assert_eq!(members.len(), 3);
        assert_eq!(members[&2], "127.0.0.1:7001");
        assert!(parse_initial_cluster("").unwrap().is_empty());
        for bad in [
            "1",
            "x=a:1",
            "1=a",
            "1=a:99999",
            "0=a:1",
            "1=a:1,1=b:2",
            "1=:5",
        ] {
            assert!(parse_initial_cluster(bad).is_err(), "{bad}");
        }
        let mut config = Config {
            initial_cluster: "2=a:1,3=b:1".into(),
            ..Config::default()
        };
        assert!(config.validate().is_err(), "node 1 is not listed");
        config.initial_cluster = "1=a:1,3=b:1".into();
        config.validate().unwrap();
        config.join = true;
        assert!(config.validate().is_err());
    }

    #[test]
    fn public_bind_needs_insecure() {
        let mut config = Config {
            http_addr: "0.0.0.0:8080".parse().unwrap(),
            ..Config::default()
        };
        assert!(config.validate().is_err());
        config.insecure = true;
        config.validate().unwrap();
        config.insecure = false;
        config.auth.enabled = true;
        assert!(config.validate().is_err(), "auth without TLS is not enough");
        config.tls.cert_file = Some("cert.pem".into());
        config.tls.key_file = Some("key.pem".into());
        config.validate().unwrap();
        config.auth.enabled = false;
        assert!(config.validate().is_err(), "TLS without auth is not enough");
    }

    #[test]
    fn public_internal_rpc_needs_insecure() {
        for address in ["0.0.0.0:7000", "herald1:7000", "10.0.0.1:7000"] {
            let mut config = Config {
                raft_addr: address.into(),
                ..Config::default()
            };
            assert!(config.validate().is_err(), "{address}");
            config.insecure = true;
            config.validate().unwrap();
        }
        for address in ["127.0.0.1:7000", "[::1]:7000", "localhost:7000"] {
            let config = Config {
                raft_addr: address.into(),
                ..Config::default()
            };
            config.validate().unwrap();
        }
    }
}
