//! The WebSocket transport: `GET /v1/ws` (subprotocol `herald.v1`), JSON text frames to
//! publish, and to subscribe with credit-based flow control to topics, as a consumer group
//! member, or to a queue subscription's leases (`docs/websocket.md`).
//!
//! The handler only checks the handshake and the node's socket limit; `connection` runs a
//! socket, `frames` (and `stream_frames`) are its DTOs, `subscription` reads partitions for a
//! topic `subscribe`, `group_subscription` makes the socket a consumer group member,
//! `queue_subscription` leases from a queue subscription, `outbox` bounds what is queued to a
//! socket (`writer` its writing half), `socket_auth` checks each frame's operation, `publish`
//! produces. Publishing and reading go through the same [`Broker`] calls (and the same DTO
//! checks, produce preparation and authorization) as the HTTP API.

pub mod binary;
pub mod config;
pub mod connection;
pub mod frames;
pub mod group_subscription;
pub mod outbox;
pub mod publish;
pub mod queue_subscription;
pub mod running;
pub mod socket_auth;
pub mod stream_frames;
pub mod subscription;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::config::WsConfig;
use crate::api::problem::{ApiError, Problem};
use crate::api::server::shutdown::Shutdown;
use crate::api::AppState;
use crate::broker::{Broker, ErrorCode};

/// The subprotocol a client must offer.
pub const SUBPROTOCOL: &str = "herald.v1";
/// Gauge of open sockets.
pub const CONNECTIONS: &str = "herald_ws_connections";
/// Counter of frames, by `direction` (`in`, `out`) and `op` (`invalid` for refused frames).
pub const FRAMES_TOTAL: &str = "herald_ws_frames_total";
/// Counter of closed sockets, by close `code` (the server's, or the peer's; 1006: no close).
pub const CLOSED_TOTAL: &str = "herald_ws_closed_total";
/// Counter of sockets cut off for sending while not reading (answers over twice
/// `ws.max_outbound_bytes` queued).
pub const OUTBOUND_OVERFLOWS_TOTAL: &str = "herald_ws_outbound_overflows_total";
/// Counter of `subscribe` frames refused for `ws.max_subscriptions`.
pub const SUBSCRIPTIONS_REFUSED_TOTAL: &str = "herald_ws_subscriptions_refused_total";
/// Counter of times a subscription's reader waited for a socket's queue to drain below
/// `ws.max_outbound_bytes` (backpressure on a slow client).
pub const BACKPRESSURE_WAITS_TOTAL: &str = "herald_ws_backpressure_waits_total";

/// What sockets share: the broker, the stop signal, the limits and the open-socket count.
#[derive(Clone)]
pub struct WsState {
    broker: Broker,
    shutdown: Shutdown,
    config: Arc<WsConfig>,
    open: Arc<Semaphore>,
    /// Deliveries are charged to consume bytes, publishes to produce bytes.
    quotas: crate::broker::quota::Quotas,
    /// A socket whose client reads nothing while frames wait this long is closed with 1008
    /// (`client_stall_timeout_ms`).
    client_stall: Duration,
}

impl WsState {
    pub fn new(broker: Broker, shutdown: Shutdown, config: WsConfig) -> WsState {
        let open = Arc::new(Semaphore::new(
            config.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        ));
        WsState {
            broker,
            shutdown,
            config: Arc::new(config),
            open,
            quotas: crate::broker::quota::Quotas::unlimited(),
            client_stall: Duration::from_millis(config::DEFAULT_CLIENT_STALL_TIMEOUT_MS),
        }
    }

    /// Closes sockets whose client reads nothing for `timeout` while frames wait.
    pub fn with_client_stall_timeout(mut self, timeout: Duration) -> WsState {
        self.client_stall = timeout;
        self
    }

    /// Charges sockets' frames to these quotas.
    pub fn with_quotas(mut self, quotas: crate::broker::quota::Quotas) -> WsState {
        self.quotas = quotas;
        self
    }

    /// Waits (at most `within`) until every socket has closed: on shutdown, so their close
    /// frames are written before the process exits.
    pub async fn closed(&self, within: Duration) -> bool {
        let all = self.config.max_connections.clamp(1, Semaphore::MAX_PERMITS) as u32;
        tokio::time::timeout(within, self.open.acquire_many(all))
            .await
            .is_ok()
    }
}

/// Each socket's read buffer.
const SOCKET_READ_BUFFER_BYTES: usize = 16 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(connect))
}

/// Open a WebSocket (subprotocol `herald.v1`) to publish and subscribe with JSON text frames.
///
/// A subscription reads a topic, makes the socket a consumer group member (`assignment` and
/// `commit` frames), or leases from a queue subscription (`ack`, `nack`, `extend` frames). The
/// frames, flow control, resume tokens and close codes are described in
/// `docs/websocket.md`. A handshake that does not offer the `herald.v1` subprotocol is refused
/// with 400, so a client never talks to a protocol it did not ask for.
#[utoipa::path(
    get,
    path = "/v1/ws",
    tag = "websocket",
    responses(
        (status = 101, description = "Switching to the WebSocket protocol, subprotocol `herald.v1`"),
        (status = 400, description = "Not a WebSocket handshake, or the `herald.v1` subprotocol was not offered", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded`: the node has its maximum of open sockets (`ws.max_connections`); retry later", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn connect(
    State(state): State<WsState>,
    State(access): State<crate::broker::auth::access::Access>,
    State(auditing): State<crate::api::middleware::audit_layer::Auditing>,
    principal: Option<axum::Extension<crate::broker::auth::tokens::Principal>>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            return ApiError::invalid_request(format!(
                "GET /v1/ws takes a WebSocket handshake with subprotocol {SUBPROTOCOL}: {rejection}"
            ))
            .into_response()
        }
    };
    if !offers_subprotocol(&headers) {
        return ApiError::invalid_request(format!(
            "offer the subprotocol {SUBPROTOCOL} (Sec-WebSocket-Protocol)"
        ))
        .into_response();
    }
    let Ok(permit) = state.open.clone().try_acquire_owned() else {
        return ApiError::new(
            ErrorCode::Overloaded,
            format!(
                "the node has its maximum of {} open WebSockets; retry later",
                state.config.max_connections
            ),
        )
        .into_response();
    };
    let audit = socket_auth::SocketAudit {
        remote_addr: crate::api::middleware::audit_layer::remote_address(
            &auditing,
            &extensions,
            &headers,
        ),
        request_id: extensions
            .get::<crate::api::middleware::request_id::RequestId>()
            .map(|id| id.as_str().to_string())
            .unwrap_or_default(),
        log: auditing.log,
    };
    let max_frame_bytes = state.config.max_frame_bytes;
    upgrade
        .protocols([SUBPROTOCOL])
        // tungstenite allocates its read buffer per socket up front (128 KiB by default): most of
        // an idle socket's memory. Larger frames still arrive, in more reads.
        .read_buffer_size(SOCKET_READ_BUFFER_BYTES)
        .max_message_size(max_frame_bytes)
        .max_frame_size(max_frame_bytes)
        .on_upgrade(move |socket| {
            // Who the socket's frames are charged to is fixed at the handshake.
            let quota_key = crate::api::middleware::quota::quota_key(&extensions);
            let principal = principal.map(|axum::Extension(principal)| principal);
            let token = extensions
                .get::<crate::broker::auth::access::AdmittedToken>()
                .map(|token| token.0.clone());
            let auth = socket_auth::SocketAuth {
                life: access.token_life(principal.as_ref(), token),
                access,
                principal,
                audit,
            };
            connection::serve(socket, state, auth, permit, quota_key)
        })
}

fn offers_subprotocol(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|protocol| protocol.trim() == SUBPROTOCOL)
}
