//! The `herald` CLI run as a separate process against a real node.

mod cli;
mod cli_auth;
mod cli_follow;
mod cli_subscriptions;
