//! The API described: the OpenAPI document (its fixed parts, the rules every operation
//! follows, the security schemes from the rights table), the live streams' AsyncAPI
//! document, and the `/openapi.json` and `/docs` routes serving them.

pub mod asyncapi;
pub mod docs;
pub mod document;
pub mod rules;
pub mod security;
