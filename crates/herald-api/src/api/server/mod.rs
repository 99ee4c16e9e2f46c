//! The client listener: accepting connections (with a limit, and TLS when configured), serving
//! HTTP/1.1 and HTTP/2 on them, write stalls, and the stop signal long-lived streams follow.

pub mod connections;
pub mod listener;
pub mod shutdown;
pub mod tls;
pub mod write_stall;
