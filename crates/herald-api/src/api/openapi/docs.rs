//! `/openapi.json` and `/docs`: the OpenAPI document and a Swagger UI served from the binary (no
//! CDN), so the docs work offline. `/docs` redirects to `/docs/`. `/asyncapi.json`: the live
//! streams' AsyncAPI document.

use axum::Router;
use utoipa::openapi::OpenApi;
use utoipa_swagger_ui::SwaggerUi;

/// The path of the document; the UI loads it from there.
pub const OPENAPI_PATH: &str = "/openapi.json";
pub const DOCS_PATH: &str = "/docs";

pub fn router<S: Clone + Send + Sync + 'static>(openapi: OpenApi) -> Router<S> {
    let asyncapi = crate::api::openapi::asyncapi::document();
    Router::from(SwaggerUi::new(DOCS_PATH).url(OPENAPI_PATH, openapi)).route(
        crate::api::openapi::asyncapi::ASYNCAPI_PATH,
        axum::routing::get(move || std::future::ready(axum::Json(asyncapi.clone()))),
    )
}
