//! The WebSocket transport's section of the node configuration (`[ws]`), with the client
//! stall default the HTTP server shares. It lives with the transport it configures; the node
//! configuration (`herald::config`) composes it like every layer's section.

use serde::Deserialize;

/// The default of `client_stall_timeout_ms`: how long a client may read nothing while an
/// answer waits for it.
pub const DEFAULT_CLIENT_STALL_TIMEOUT_MS: u64 = 30_000;

/// The default of `ws.max_subscriptions`.
pub const DEFAULT_WS_MAX_SUBSCRIPTIONS: usize = 1_000;

/// Limits of the WebSocket transport (`[ws]`, `GET /v1/ws`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WsConfig {
    /// The most open WebSockets on the node; past it the handshake answers 503 `overloaded`.
    pub max_connections: usize,
    /// The largest client frame (message) in bytes; past it the socket is closed with 1009.
    pub max_frame_bytes: usize,
    /// How often the server pings an open socket.
    pub ping_interval_ms: u64,
    /// A socket the peer sent nothing on (no frame, no pong) for this long is closed with 1001.
    pub idle_timeout_ms: u64,
    /// The most bytes of frames queued to one socket and not yet written to it: past it the
    /// socket's subscriptions wait for the client to drain the queue (backpressure). Answers to
    /// the client's own frames past twice it close the socket with 1008.
    pub max_outbound_bytes: usize,
    /// The credit (messages) a subscription starts with.
    pub default_credit: u64,
    /// The most subscriptions (topic, group and queue) one socket may hold at once; a
    /// `subscribe` past it is answered with an `error` frame `too_many_subscriptions`.
    pub max_subscriptions: usize,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            max_connections: 1_000,
            max_frame_bytes: 1 << 20,
            ping_interval_ms: 15_000,
            idle_timeout_ms: 60_000,
            max_outbound_bytes: 8 << 20,
            default_credit: 1_000,
            max_subscriptions: DEFAULT_WS_MAX_SUBSCRIPTIONS,
        }
    }
}
