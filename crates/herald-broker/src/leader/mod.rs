//! Any node serves any request: one way to run an operation where it must run, here or on
//! another node, whatever the capability.
//!
//! An operation is a small type in its capability's folder (`produce/`, `fetch/`, `subscriptions/`,
//! `requests/`) that says which group it concerns, what it answers and how it runs on the
//! leader ([`LeaderOperation`]), or that it runs on one given node ([`NodeOperation`]).
//! Everything else is here, once:
//!
//! - `dispatch`: the sending side. `Core::run_on_leader` follows the group's leadership
//!   until the leader wait is over, runs the operation in place when this node leads, and
//!   otherwise sends it to the leader; it retries only what was certainly not done.
//! - `wire`: what crosses the internal RPC (the cluster's broker service, on the client lane):
//!   an operation kind and a postcard body each way, and the errors a serving node answers.
//! - `serve`: the receiving side: from the kind to the operation's handler, which checks this
//!   node still leads the group, applies the arrival checks and runs it.
//!
//! Adding an operation is a type, its [`OperationKind`] tag, and its line in `serve`'s table.

mod dispatch;
mod operation;
#[cfg(test)]
mod operation_fixtures;
mod serve;
mod wire;

pub(crate) use operation::{LeaderOperation, NodeOperation, OperationKind};
pub(crate) use serve::ForwardedRequests;
#[cfg(test)]
pub(crate) use wire::round_trip;
