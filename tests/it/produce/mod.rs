//! Producing and reading over HTTP: values, batches, idempotency, exactly-once, request/reply,
//! errors, HTTP/2, and durability across restarts.

mod binary_batches;
mod binary_idempotent;
mod durability;
mod errors;
mod exactly_once;
mod http2;
mod idempotent_produce;
mod produce_fetch;
mod request_reply;
