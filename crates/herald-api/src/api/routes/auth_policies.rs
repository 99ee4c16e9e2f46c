//! `/v1/auth/policies`: the authorization policy, replicated through the metadata group.
//! Until one is set the built-in policy applies (`docs/security.md`).

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::extract::ApiJson;
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::auth::access::Access;
use crate::broker::auth::service::Auth;
use crate::domain::auth::PolicyRule;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_policies, put_policies))
}

/// One rule: `role` may do `action` on the resources `resource` matches.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRuleDto {
    /// A built-in role (`admin`, `producer`, `consumer`, `viewer`) or a custom one.
    #[schema(schema_with = crate::api::openapi::rules::name_field_schema)]
    pub role: String,
    /// `kind:name` or `kind:prefix*` (kinds: topic, group, subscription, cluster, auth,
    /// audit), or `*` for everything. `*` may only end a pattern.
    #[schema(
        min_length = 1,
        max_length = 300,
        pattern = "^(\\*|(topic|group|subscription|cluster|auth|audit):([A-Za-z0-9._:/-]+\\*?|\\*))$",
        example = "topic:orders-*"
    )]
    pub resource: String,
    /// `produce`, `consume`, `admin`, `view`, or `*` for any.
    #[schema(pattern = "^(produce|consume|admin|view|\\*)$")]
    pub action: String,
}

/// A whole policy: it replaces the previous one (or the built-in one).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    #[schema(max_items = 10000)]
    pub rules: Vec<PolicyRuleDto>,
}

/// The policy in force.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicyDto {
    /// Sorted, without duplicates.
    pub rules: Vec<PolicyRuleDto>,
    /// True while no policy was ever set: these are the built-in rules.
    pub built_in: bool,
}

fn dto(rule: PolicyRule) -> PolicyRuleDto {
    PolicyRuleDto {
        role: rule.role,
        resource: rule.resource,
        action: rule.action,
    }
}

/// The authorization policy in force.
#[utoipa::path(
    get,
    path = "/v1/auth/policies",
    tag = "auth",
    responses((status = 200, description = "The effective rules (the built-in ones until a policy is set)", body = PolicyDto))
)]
async fn get_policies(State(access): State<Access>) -> Json<PolicyDto> {
    let (rules, built_in) = access.authorizer().effective_rules();
    Json(PolicyDto {
        rules: rules.into_iter().map(dto).collect(),
        built_in,
    })
}

/// Replace the authorization policy on every node; the next request anywhere is checked
/// against it. Rules name their roles' every right: deny by default, and the built-in rules
/// are gone unless the policy repeats them.
#[utoipa::path(
    put,
    path = "/v1/auth/policies",
    tag = "auth",
    request_body = PolicyRequest,
    responses(
        (status = 200, description = "The policy now in force", body = PolicyDto),
        (status = 400, description = "`invalid_request`: an unknown action, a bad resource pattern or role, too many rules", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn put_policies(
    State(auth): State<Auth>,
    State(access): State<Access>,
    ApiJson(request): ApiJson<PolicyRequest>,
) -> ApiResult<Json<PolicyDto>> {
    let rules = request
        .rules
        .into_iter()
        .map(|rule| PolicyRule {
            role: rule.role,
            resource: rule.resource,
            action: rule.action,
        })
        .collect();
    auth.set_policy(rules).await?;
    Ok(get_policies(State(access)).await)
}
