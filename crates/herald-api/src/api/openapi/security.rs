//! Declares authentication in the OpenAPI document from `api::middleware::rights`: the `bearerAuth` and
//! `oauth2` (client credentials at `/oauth/token`) schemes, and on each protected operation
//! its `security`, the right it needs (`x-herald-right`) and its 401 and 403 answers.

use utoipa::openapi::security::{
    ClientCredentials, Flow, HttpAuthScheme, HttpBuilder, OAuth2, Scopes, SecurityRequirement,
    SecurityScheme,
};
use utoipa::openapi::{Components, OpenApi};

use crate::api::middleware::rights::{self, Requirement};
use crate::api::openapi::rules::problem_response;

pub fn apply(document: &mut OpenApi) {
    let components = document.components.get_or_insert_with(Components::new);
    components.add_security_scheme(
        "bearerAuth",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .description(Some(
                    "A token from POST /oauth/token (or an external issuer), needed when the \
                     node runs with [auth] enabled. WebSocket and SSE streams also take it as \
                     ?access_token= for browsers.",
                ))
                .build(),
        ),
    );
    components.add_security_scheme(
        "oauth2",
        SecurityScheme::OAuth2(OAuth2::new([Flow::ClientCredentials(
            ClientCredentials::new("/oauth/token", Scopes::new()),
        )])),
    );
    for (path, item) in document.paths.paths.iter_mut() {
        let operations = [
            ("GET", &mut item.get),
            ("PUT", &mut item.put),
            ("POST", &mut item.post),
            ("DELETE", &mut item.delete),
            ("PATCH", &mut item.patch),
        ];
        for (method, operation) in operations {
            let Some(operation) = operation.as_mut() else {
                continue;
            };
            let Ok(method) = axum::http::Method::from_bytes(method.as_bytes()) else {
                continue;
            };
            let Some(requirement) = rights::requirement(&method, path) else {
                continue;
            };
            if requirement == Requirement::Public {
                operation.security = Some(vec![SecurityRequirement::default()]);
                continue;
            }
            let mut security = vec![
                SecurityRequirement::new("bearerAuth", Vec::<String>::new()),
                SecurityRequirement::new("oauth2", Vec::<String>::new()),
            ];
            if requirement == Requirement::Metrics {
                // Public by default (`[auth] public_metrics`).
                security.push(SecurityRequirement::default());
            }
            operation.security = Some(security);
            if let Some(right) = rights::describe(requirement) {
                operation
                    .extensions
                    .get_or_insert_with(Default::default)
                    .insert("x-herald-right".into(), serde_json::Value::String(right));
            }
            let responses = &mut operation.responses.responses;
            responses.entry("401".into()).or_insert_with(|| {
                problem_response(
                    "`unauthorized`: authentication is on and the request has no valid bearer \
                     token (see `WWW-Authenticate`)",
                )
            });
            if requirement != Requirement::Authenticated {
                responses.entry("403".into()).or_insert_with(|| {
                    problem_response(
                        "`forbidden`: none of the token's roles has the right in `x-herald-right`",
                    )
                });
            }
        }
    }
}
