//! Herald's black-box tests, in one test binary: each test starts the real `herald` binary
//! (`common::Server`, `common::cluster`) on loopback and talks to it as a client would.
//!
//! One binary instead of one per file: the harness (`common`) and the linking against RocksDB
//! happen once per build, not once per file. Each former `tests/<name>.rs` is the module
//! `<area>::<name>`, so `cargo test --test it <name>` runs the tests of one file, e.g.
//! `cargo test --test it cluster_acks` or `cargo test --test it console::`.

mod common;

mod architecture;
mod cluster;
mod command_line;
mod docs;
mod groups;
mod ops;
mod produce;
mod queues;
mod schemas;
mod security;
mod storage;
mod streams;
mod ui;
