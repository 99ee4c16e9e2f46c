//! `/v1/auth/clients`: OAuth2 clients of the built-in issuer. A client's secret is answered
//! once, when it is created or rotated; only its hash is kept.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::auth::{ClientDto, ClientList, ClientWithSecretDto, CreateClientRequest};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::auth::service::Auth;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_client, list_clients))
        .routes(routes!(describe_client, delete_client))
        .routes(routes!(rotate_secret))
}

/// Create an OAuth2 client; its secret is in the answer, once.
#[utoipa::path(
    post,
    path = "/v1/auth/clients",
    tag = "auth",
    request_body = CreateClientRequest,
    responses(
        (status = 201, description = "The client and its secret (shown once)", body = ClientWithSecretDto),
        (status = 400, description = "`invalid_request`: a bad id or role", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`client_exists`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn create_client(
    State(auth): State<Auth>,
    ApiJson(request): ApiJson<CreateClientRequest>,
) -> ApiResult<(StatusCode, Json<ClientWithSecretDto>)> {
    let (client, client_secret) = auth
        .create_client(&request.client_id, request.roles)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ClientWithSecretDto {
            client: client.into(),
            client_secret,
        }),
    ))
}

/// List OAuth2 clients (never their secrets).
#[utoipa::path(
    get,
    path = "/v1/auth/clients",
    tag = "auth",
    responses((status = 200, description = "Every client", body = ClientList))
)]
async fn list_clients(State(auth): State<Auth>) -> Json<ClientList> {
    Json(ClientList {
        clients: auth.clients().into_iter().map(Into::into).collect(),
    })
}

/// Describe an OAuth2 client.
#[utoipa::path(
    get,
    path = "/v1/auth/clients/{client_id}",
    tag = "auth",
    params(("client_id" = String, Path, description = "The client's id")),
    responses(
        (status = 200, description = "The client", body = ClientDto),
        (status = 404, description = "`client_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn describe_client(
    State(auth): State<Auth>,
    ApiPath(client_id): ApiPath<String>,
) -> ApiResult<Json<ClientDto>> {
    Ok(Json(auth.client(&client_id)?.into()))
}

/// Delete an OAuth2 client: its tokens stop working at once.
#[utoipa::path(
    delete,
    path = "/v1/auth/clients/{client_id}",
    tag = "auth",
    params(("client_id" = String, Path, description = "The client's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`client_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_client(
    State(auth): State<Auth>,
    ApiPath(client_id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    auth.delete_client(&client_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Give an OAuth2 client a new secret (answered once); the old one stops working at once.
#[utoipa::path(
    post,
    path = "/v1/auth/clients/{client_id}/secret",
    tag = "auth",
    params(("client_id" = String, Path, description = "The client's id")),
    responses(
        (status = 200, description = "The client and its new secret (shown once)", body = ClientWithSecretDto),
        (status = 404, description = "`client_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn rotate_secret(
    State(auth): State<Auth>,
    ApiPath(client_id): ApiPath<String>,
) -> ApiResult<Json<ClientWithSecretDto>> {
    let (client, client_secret) = auth.rotate_client_secret(&client_id).await?;
    Ok(Json(ClientWithSecretDto {
        client: client.into(),
        client_secret,
    }))
}
