//! The schema registry (docs/schemas.md): Confluent's own clients against a node, the REST API's
//! answers and refusals, and the registry replicated over three nodes.

mod confluent_clients;
mod registry_api;
mod registry_cluster;
