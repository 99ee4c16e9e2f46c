//! Herald's Rust client: the `herald` command line (`cli`) and the load generators of
//! `herald bench` (`bench`). Both are HTTP and WebSocket clients of a running node: they share
//! the wire types in `herald-domain` and nothing else with the server, so the server library
//! ships no HTTP client, histogram or WebSocket client code, and the client builds without
//! RocksDB or openraft.

pub mod bench;
pub mod cli;
