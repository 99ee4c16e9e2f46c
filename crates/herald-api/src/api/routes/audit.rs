//! `GET /v1/audit`: the audit log (see `audit_layer` for what is recorded).

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::audit::{AuditPageDto, AuditQueryParams};
use crate::api::extract::ApiQuery;
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(audit_events))
}

/// Audit events from a time on, oldest first: administrative changes, failed authentications
/// and denied requests, with who, what, where from and the request id.
///
/// Page with `next_offset` (as `from_offset`): by position in the log, so no event's time (its
/// recording node's clock) can make a reader skip others.
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "audit",
    params(AuditQueryParams),
    responses(
        (status = 200, description = "Events from `since` on (possibly none)", body = AuditPageDto),
        (status = 400, description = "`invalid_request`: a bad since, limit, principal or from_offset", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` (with Retry-After) or `unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "`timeout`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn audit_events(
    State(broker): State<Broker>,
    ApiQuery(query): ApiQuery<AuditQueryParams>,
) -> ApiResult<Json<AuditPageDto>> {
    let query = query.into_domain()?;
    Ok(Json(broker.audit().audit_events(query).await?.into()))
}
