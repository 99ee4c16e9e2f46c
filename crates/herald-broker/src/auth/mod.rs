//! Authentication: OAuth2 client credentials, the cluster's signing keys and its access tokens.
//! The clients and keys live in the metadata group (`domain::auth`); this module generates,
//! hashes, signs and validates; `policy` decides what a principal may do (casbin RBAC).

pub mod access;
pub mod bootstrap;
pub mod external;
pub mod failed_requests;
pub mod keys;
pub mod low_s;
pub mod operation;
pub mod policy;
pub mod sealing;
pub mod secret_checks;
pub mod secrets;
pub mod service;
pub mod tokens;
#[cfg(test)]
mod tokens_tests;
pub mod verified;
pub mod verify;
