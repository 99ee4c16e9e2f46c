//! Internal node-to-node RPC: the transport Herald nodes speak on their `--raft-addr` listener.
//!
//! It carries opaque byte bodies tagged with a [`ServiceId`]. What a body means is the business
//! of the layers above (raft, cluster, broker dispatch), so this module imports neither openraft
//! nor rocksdb, and the transport can be tested, tuned and replaced on its own.
//!
//! Shape: [`RpcClient`] keeps one persistent TCP connection per peer node and [`Lane`], and
//! multiplexes every concurrent call of that lane over it, matching answers to requests by id;
//! [`serve`] accepts connections, checks a handshake naming the node the caller expected and the
//! lane, and runs an [`RpcHandler`] per request within that lane's limits. A call dropped before
//! its answer (its caller gave up or went away) sends a cancel, and the server aborts that
//! request's handler. The wire format is described in `frame`, the lanes in `lane`.
//!
//! Who may connect: with mutual TLS (`tls`), a certificate from the cluster CA naming the node
//! the hello says; without it, a proof of the cluster secret in the hello (`hello_auth`); and in
//! both cases a node the cluster counts as a member ([`PeerFilter`]), checked at the hello and
//! again on open connections, so a removed node is let go. A refused hello is logged and
//! counted in [`HANDSHAKES_REFUSED_TOTAL`].

pub mod cluster_secret;
pub mod tls_files;

mod client;
mod connection;
mod error;
mod frame;
mod hello_auth;
mod lane;
pub mod operation_tag;
mod server;
mod tls;
mod writer;

#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

pub use client::RpcClient;
pub use error::RpcError;
pub use frame::ProtocolVersions;
pub use hello_auth::HelloKey;
pub use lane::{Lane, LaneLimits};
pub use server::serve;
pub use tls::{node_name, PeerTls, PeerTlsError, PeerTlsFiles};

/// Which service of the receiving node a request is for (raft, cluster, broker, ...). The
/// transport only routes it; the numbering belongs to the layers above.
pub type ServiceId = u8;

/// Counter of finished calls, labelled by `service`, `lane` and `outcome`
/// (`ok`, `remote_error`, `timeout`, `unreachable`, `connection_lost`, `no_address`, `too_large`,
/// `unknown_operation`).
pub const CALLS_TOTAL: &str = "herald_rpc_calls_total";
/// Counter of frame bytes written to sockets, by clients and servers alike.
pub const SENT_BYTES_TOTAL: &str = "herald_rpc_sent_bytes_total";
/// Counter of frame bytes read from sockets, by clients and servers alike.
pub const RECEIVED_BYTES_TOTAL: &str = "herald_rpc_received_bytes_total";
/// Gauge of open connections, labelled `direction` = `in` (accepted) or `out` (dialled) and
/// `lane` (`control`, `client`).
pub const CONNECTIONS: &str = "herald_rpc_connections";
/// Counter of requests a server aborted because their caller cancelled them, by `lane`.
pub const CANCELLED_TOTAL: &str = "herald_rpc_cancelled_requests_total";
/// Counter of incoming connections refused at the hello (or closed later because their node
/// left the cluster), by `reason`: `malformed` (not a Herald hello of this version), `tls`
/// (the TLS handshake failed), `version` (a hello version this node does not speak: a node of
/// another release), `wrong_node` (the hello is for another node, or the
/// certificate names another), `bad_secret` (no or a wrong proof of the cluster secret),
/// `not_a_member`, `starting` (this node does not know its cluster yet), `timeout`.
pub const HANDSHAKES_REFUSED_TOTAL: &str = "herald_rpc_handshakes_refused_total";

/// Whether a node may hold a connection to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAdmission {
    Member,
    /// Not (or no longer) a member of the cluster.
    NotMember,
    /// This node does not know its cluster's members yet (it is starting).
    Unknown,
}

/// Who may connect, as the layers above know it (the cluster's members). Consulted at every
/// hello and at most once a second on an open connection.
#[derive(Clone)]
pub struct PeerFilter(Arc<dyn Fn(u64) -> PeerAdmission + Send + Sync>);

impl PeerFilter {
    pub fn new(admits: impl Fn(u64) -> PeerAdmission + Send + Sync + 'static) -> PeerFilter {
        PeerFilter(Arc::new(admits))
    }

    pub(crate) fn admission(&self, node: u64) -> PeerAdmission {
        (self.0)(node)
    }
}

impl std::fmt::Debug for PeerFilter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("PeerFilter(..)")
    }
}

/// Limits of a client or a server. Both ends of a cluster should use the same values: a frame
/// one side may send, the other must accept.
#[derive(Debug, Clone)]
pub struct RpcLimits {
    /// Largest frame accepted or sent (header + body). Default 64 MiB.
    pub max_frame_bytes: usize,
    /// Longest a connect plus handshake may take. Default 1 s.
    pub connect_timeout: Duration,
    /// After a failed connect, calls to that peer fail fast (Unreachable) for this long.
    /// Default 250 ms.
    pub reconnect_backoff: Duration,
    /// The local address connections to peers are dialled from: the node's own raft listen IP,
    /// so a peer (and a packet filter between them) sees which node a connection comes from,
    /// whatever interface the route goes out of. `None` (the default): the kernel picks one.
    /// Unlike the limits above it differs per node.
    pub source_ip: Option<IpAddr>,
    /// The control lane (raft, cluster requests). Default 256 MiB in flight per peer, 4096
    /// requests per connection.
    pub control: LaneLimits,
    /// The client lane (forwarded client requests). Default 256 MiB in flight per peer, 4096
    /// requests per connection; `[rpc]` in the node configuration sets it.
    pub client: LaneLimits,
    /// Mutual TLS with the cluster's CA on every connection, both ways (`tls.rs`); `None`:
    /// plain TCP. Every node of a cluster must agree.
    pub tls: Option<PeerTls>,
    /// The key of the cluster secret every hello proves, both ways (`hello_auth`); `None`:
    /// hellos prove nothing (mutual TLS authenticates the nodes, or a test of the transport).
    /// Every node of a cluster must agree.
    pub hello_key: Option<HelloKey>,
    /// The nodes a server accepts connections from; `None`: any.
    pub peers: Option<PeerFilter>,
    /// The hello versions this node speaks (see `frame`): this release's,
    /// [`ProtocolVersions::CURRENT`]; tests of the version negotiation set others.
    pub protocol: ProtocolVersions,
}

impl Default for RpcLimits {
    fn default() -> Self {
        RpcLimits {
            max_frame_bytes: 64 * 1024 * 1024,
            connect_timeout: Duration::from_secs(1),
            reconnect_backoff: Duration::from_millis(250),
            source_ip: None,
            control: LaneLimits::default(),
            client: LaneLimits::default(),
            tls: None,
            hello_key: None,
            peers: None,
            protocol: ProtocolVersions::CURRENT,
        }
    }
}

impl RpcLimits {
    /// The frame limit actually enforced: a frame's length prefix is a `u32`.
    pub(crate) fn frame_limit(&self) -> usize {
        self.max_frame_bytes.min(u32::MAX as usize)
    }

    pub(crate) fn lane(&self, lane: Lane) -> &LaneLimits {
        match lane {
            Lane::Control => &self.control,
            Lane::Client => &self.client,
        }
    }
}

/// Serves requests arriving at this node. Implemented by the layers above (raft, cluster,
/// broker dispatch).
pub trait RpcHandler: Send + Sync + 'static {
    /// Serves one request from node `from` for `service`; an `Err(message)` reaches the caller
    /// as `RpcError::Remote(message)`, or as `RpcError::UnknownOperation` when it is
    /// [`operation_tag::unknown_operation`]'s.
    fn handle(
        &self,
        from: u64,
        service: ServiceId,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>>;
}

/// Counts one open connection in [`CONNECTIONS`] for as long as it lives.
pub(crate) struct ConnectionGauge {
    gauge: metrics::Gauge,
}

impl ConnectionGauge {
    pub(crate) fn open(direction: &'static str, lane: Lane) -> ConnectionGauge {
        let gauge = metrics::gauge!(CONNECTIONS, "direction" => direction, "lane" => lane.label());
        gauge.increment(1.0);
        ConnectionGauge { gauge }
    }
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}
