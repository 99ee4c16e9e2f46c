//! What every request passes around its handler: the envelope (request id, audit, metrics,
//! tracing, limits) outside the router and the route guard (authentication, rights, quotas)
//! inside it, each concern in its own file.

pub mod access;
pub mod audit_layer;
pub mod client_address;
pub(crate) mod envelope;
pub mod limits;
pub mod metrics_layer;
pub mod quota;
pub mod request_id;
pub mod rights;
pub(crate) mod route_guard;
pub mod trace;
