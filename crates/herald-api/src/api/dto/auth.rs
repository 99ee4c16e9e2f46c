//! Auth DTOs: OAuth2 clients (`/v1/auth/clients`), the token endpoint's answers (RFC 6749), the
//! JWKS and the OpenID discovery document.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::broker::auth::keys::Jwk;
use crate::broker::auth::service::ClientInfo;

/// `POST /v1/auth/clients`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"client_id": "billing", "roles": ["producer"]}))]
pub struct CreateClientRequest {
    /// The client's id (topic name rules).
    #[schema(schema_with = crate::api::openapi::rules::name_field_schema)]
    pub client_id: String,
    /// Built-in roles `admin`, `producer`, `consumer`, `viewer`, or custom ones the policy names.
    #[schema(schema_with = crate::api::openapi::rules::role_list_schema)]
    pub roles: Vec<String>,
}

/// A client as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = Client)]
pub struct ClientDto {
    pub client_id: String,
    pub roles: Vec<String>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// When the current secret was set (milliseconds since the epoch).
    pub secret_rotated_at: i64,
}

impl From<ClientInfo> for ClientDto {
    fn from(info: ClientInfo) -> Self {
        ClientDto {
            client_id: info.client_id,
            roles: info.roles,
            created_at: info.created_at_ms,
            secret_rotated_at: info.secret_rotated_at_ms,
        }
    }
}

/// A client with its secret: shown once, when the client is created or its secret rotated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = ClientWithSecret)]
pub struct ClientWithSecretDto {
    #[serde(flatten)]
    pub client: ClientDto,
    /// The secret. It is not stored (only its hash) and cannot be shown again.
    pub client_secret: String,
}

/// `GET /v1/auth/clients`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ClientList {
    pub clients: Vec<ClientDto>,
}

/// RFC 6749 § 4.4.2: the client-credentials form, or RFC 8693's token-exchange form
/// (`application/x-www-form-urlencoded`). Documents the body; the handler reads the form itself.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
pub struct TokenRequestForm {
    /// `client_credentials`, or `urn:ietf:params:oauth:grant-type:token-exchange` to renew a
    /// token.
    #[schema(pattern = "^(client_credentials|urn:ietf:params:oauth:grant-type:token-exchange)$")]
    pub grant_type: String,
    /// With `client_secret`, instead of HTTP Basic.
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// Ignored: a token carries its client's roles.
    pub scope: Option<String>,
    /// Token exchange: the token to renew.
    pub subject_token: Option<String>,
    /// Token exchange: `urn:ietf:params:oauth:token-type:access_token`.
    pub subject_token_type: Option<String>,
    /// Token exchange: absent or `urn:ietf:params:oauth:token-type:access_token`.
    pub requested_token_type: Option<String>,
}

/// RFC 6749 § 5.1: a successful token response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct TokenResponse {
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds the token lasts.
    pub expires_in: u64,
    /// RFC 8693: `urn:ietf:params:oauth:token-type:access_token`, in the answer to a token
    /// exchange only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_token_type: Option<&'static str>,
}

/// RFC 6749 § 5.2: an error of the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct OAuthError {
    /// `invalid_request`, `invalid_client`, `invalid_grant`, `unsupported_grant_type` or
    /// `temporarily_unavailable`.
    pub error: &'static str,
    pub error_description: String,
}

/// RFC 7517: the keys that validate Herald's tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct JwkSet {
    #[schema(value_type = Vec<Object>)]
    pub keys: Vec<Jwk>,
}

/// OpenID Connect Discovery: where the token endpoint and keys are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct OpenIdConfiguration {
    pub issuer: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    pub grant_types_supported: Vec<&'static str>,
    pub token_endpoint_auth_methods_supported: Vec<&'static str>,
    pub id_token_signing_alg_values_supported: Vec<&'static str>,
    pub response_types_supported: Vec<&'static str>,
    pub subject_types_supported: Vec<&'static str>,
}
