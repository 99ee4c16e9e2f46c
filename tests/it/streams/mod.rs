//! Push streams on one node: the WebSocket transport and server-sent events.

mod sse;
mod sse_streams;
mod ws;
mod ws_backpressure;
mod ws_binary;
mod ws_fanout;
mod ws_groups;
mod ws_limits;
