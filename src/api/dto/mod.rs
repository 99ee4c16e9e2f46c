//! The wire types of the HTTP API (with OpenAPI schemas), apart from the domain types they
//! convert to and from, so the contract and the model can change independently.

pub mod cluster;
pub mod consume;
pub mod groups;
pub mod headers;
pub mod idempotence;
pub mod produce;
pub mod producer;
pub mod topic;
