//! The documents users follow: the README's walkthrough, the AsyncAPI document, SDKs generated
//! from the OpenAPI document.

mod asyncapi;
mod group_bounds;
mod readme;
mod sdk;
