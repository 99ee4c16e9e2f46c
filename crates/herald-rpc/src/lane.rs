//! Lanes: separate connections, budgets and limits per kind of traffic to one peer.
//!
//! Raft heartbeats must arrive within an election timeout whatever clients do. When client
//! requests forwarded to a partition leader (a long poll holds its call for up to a minute)
//! shared a connection with raft messages, a flood of them filled the server's per-connection
//! limit, the server stopped reading that connection, and the heartbeats queued behind them
//! until followers elected a new leader. So each peer is reached over one connection per lane,
//! each with its own in-flight byte budget and concurrency limit on both ends and its own
//! writer queue: the control lane cannot wait behind the client lane.

/// Which connection to a peer a call travels on. The caller picks it; the handshake tells the
/// server, which applies that lane's limits to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Raft messages and the cluster's own requests (pings, metadata proposals, group
    /// heartbeats): small, short and needed for the cluster to stay healthy.
    Control = 0,
    /// Client requests forwarded to another node (appends, reads, long polls).
    Client = 1,
}

impl Lane {
    pub const ALL: [Lane; 2] = [Lane::Control, Lane::Client];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn from_byte(byte: u8) -> Option<Lane> {
        match byte {
            0 => Some(Lane::Control),
            1 => Some(Lane::Client),
            _ => None,
        }
    }

    /// The `lane` label of metrics.
    pub fn label(self) -> &'static str {
        match self {
            Lane::Control => "control",
            Lane::Client => "client",
        }
    }
}

/// The limits of one lane, enforced per peer (client side) and per connection (server side).
#[derive(Debug, Clone)]
pub struct LaneLimits {
    /// Bytes of request bodies a client may have in flight to one peer on this lane; a caller
    /// waits for room (within its timeout).
    pub max_in_flight_bytes_per_peer: usize,
    /// Requests a server runs at once for one connection of this lane. The server announces it
    /// in the handshake and the client never has more calls outstanding on the connection (a
    /// caller waits for a slot within its timeout), so the server always reads on, and cancels
    /// reach it at once. Past it (a client that ignores it), the server stops reading that
    /// connection: backpressure.
    pub max_concurrent_requests_per_connection: usize,
}

impl Default for LaneLimits {
    fn default() -> Self {
        LaneLimits {
            max_in_flight_bytes_per_peer: 256 * 1024 * 1024,
            max_concurrent_requests_per_connection: 4096,
        }
    }
}
