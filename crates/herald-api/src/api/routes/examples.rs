//! `/examples/`: the example pages of `examples/`, compiled into the binary so every node serves
//! them and a browser can try the live streams against the node it loaded them from (same
//! origin, so server-sent events need no CORS). Static text only: nothing here reads state.

use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use axum::Router;

/// Where the pages are served.
pub const EXAMPLES_PATH: &str = "/examples/";

/// The live streams page: a topic over WebSocket and EventSource side by side.
const LIVE_STREAMS_PAGE: &str = include_str!("../../../../../examples/index.html");

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(EXAMPLES_PATH, get(live_streams_page))
        .route(
            "/examples",
            get(|| async { Redirect::permanent(EXAMPLES_PATH) }),
        )
}

async fn live_streams_page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page's script is inline and loads nothing else; nothing may frame it.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src data:; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self' ws: wss: http: https:; frame-ancestors 'none'",
            ),
        ],
        LIVE_STREAMS_PAGE,
    )
}
