//! `/v1/groups`: consumer groups. Members join, heartbeat, poll and commit; operators list,
//! describe, reset and delete groups.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::groups::{
    CommitRequest, CommittedOffsetsDto, GroupDto, GroupListDto, JoinGroupRequest, MembershipDto,
    PollRequest, PollResponse, ResetOffsetsRequest,
};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::auth::operation::Operation;
use crate::broker::{Broker, GroupGauges};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_groups))
        .routes(routes!(describe_group, delete_group))
        .routes(routes!(join_group))
        .routes(routes!(heartbeat))
        .routes(routes!(poll))
        .routes(routes!(leave_group))
        .routes(routes!(commit_offsets))
        .routes(routes!(reset_offsets))
}

/// Join a consumer group (creating it if needed).
///
/// The group rebalances: every partition of its members' topics is assigned to exactly one
/// member, keeping partitions where they were when it can. Heartbeat (or poll) within
/// `session_timeout_ms`, or the member is removed.
#[utoipa::path(
    post,
    path = "/v1/groups/{group}/members",
    tag = "groups",
    params(("group" = String, Path, description = "Group name")),
    request_body = JoinGroupRequest,
    responses(
        (status = 200, description = "The new member's id, generation and partitions", body = MembershipDto),
        (status = 400, description = "Invalid name, topics or session timeout", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`group_full`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader` or `unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn join_group(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    ApiPath(group): ApiPath<String>,
    ApiJson(request): ApiJson<JoinGroupRequest>,
) -> ApiResult<Json<MembershipDto>> {
    caller
        .authorize(&Operation::JoinGroup {
            group: &group,
            topics: &request.topics,
        })
        .await?;
    let membership = broker
        .groups()
        .join_group(request.into_domain(group, caller.subject()))
        .await?;
    Ok(Json(membership.into()))
}

/// Keep a member alive; answers its current generation and partitions.
#[utoipa::path(
    post,
    path = "/v1/groups/{group}/members/{member}/heartbeat",
    tag = "groups",
    params(
        ("group" = String, Path, description = "Group name"),
        ("member" = String, Path, description = "Member id from the join"),
    ),
    responses(
        (status = 200, description = "The member's generation and partitions", body = MembershipDto),
        (status = 404, description = "`unknown_member`: it left or its session expired; join again", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn heartbeat(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    ApiPath((group, member)): ApiPath<(String, String)>,
) -> ApiResult<Json<MembershipDto>> {
    caller
        .require_member(&broker, &group, &member, false)
        .await?;
    Ok(Json(
        broker
            .groups()
            .group_heartbeat(&group, &member)
            .await?
            .into(),
    ))
}

/// Poll messages from the member's partitions.
///
/// Continues from the request's `cursor` (that of the last answer received), else from the
/// committed offsets, else from where the group's `auto_offset_reset` says; the answer's
/// `cursor` continues after its messages. A lost answer is delivered again, never skipped.
/// A poll is also a heartbeat.
#[utoipa::path(
    post,
    path = "/v1/groups/{group}/members/{member}/poll",
    tag = "groups",
    params(
        ("group" = String, Path, description = "Group name"),
        ("member" = String, Path, description = "Member id from the join"),
    ),
    request_body = PollRequest,
    responses(
        (status = 200, description = "Messages (possibly none), with the generation they were read in", body = PollResponse),
        (status = 400, description = "Invalid limits, or a malformed or oversized cursor", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_member`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`stale_generation`: the request named an older generation", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn poll(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    ApiPath((group, member)): ApiPath<(String, String)>,
    ApiJson(request): ApiJson<PollRequest>,
) -> ApiResult<Json<PollResponse>> {
    caller
        .require_member(&broker, &group, &member, true)
        .await?;
    let decode = request.decode.is_some();
    let request = request.into_domain(group, member)?;
    let result = broker.groups().poll_group(request).await?;
    if decode {
        return Ok(Json(PollResponse::decoded(&broker, result).await));
    }
    Ok(Json(result.into()))
}

/// Leave a group; its partitions go to the other members at once.
#[utoipa::path(
    delete,
    path = "/v1/groups/{group}/members/{member}",
    tag = "groups",
    params(
        ("group" = String, Path, description = "Group name"),
        ("member" = String, Path, description = "Member id from the join"),
    ),
    responses(
        (status = 204, description = "The member left and the group rebalanced"),
        (status = 404, description = "`unknown_member`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn leave_group(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    ApiPath((group, member)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    caller
        .require_member(&broker, &group, &member, false)
        .await?;
    broker.groups().leave_group(&group, &member).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Commit offsets (the next offset to read) of the member's partitions.
///
/// Refused with 409 `stale_generation` when the group rebalanced since the member's
/// generation, and 409 `offset_out_of_range` when an offset is past its partition's high
/// watermark (nothing of the request is stored then). A commit never moves an offset
/// backwards (a late retry does not undo a newer commit); use the reset to go back. With
/// `Prefer: return=representation` (RFC 7240) the answer is 200 with the offsets as stored.
#[utoipa::path(
    post,
    path = "/v1/groups/{group}/offsets",
    tag = "groups",
    params(
        ("group" = String, Path, description = "Group name"),
        ("Prefer" = Option<String>, Header, description = "`return=representation`: answer 200 with the offsets as stored instead of 204"),
    ),
    request_body = CommitRequest,
    responses(
        (status = 200, description = "Committed, on a quorum; the offsets as stored (with `Prefer: return=representation`)", body = CommittedOffsetsDto),
        (status = 204, description = "Committed, on a quorum"),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_member`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`stale_generation`, `partition_not_assigned`, or `offset_out_of_range`: an offset past the partition's `high_watermark` (both bounds in the body)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn commit_offsets(
    State(broker): State<Broker>,
    caller: crate::api::middleware::access::Caller,
    ApiPath(group): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CommitRequest>,
) -> ApiResult<Response> {
    caller
        .require_member(&broker, &group, &request.member_id, true)
        .await?;
    let stored = broker
        .groups()
        .commit_offsets(request.into_domain(group))
        .await?;
    if !prefers_representation(&headers) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let mut response = Json(CommittedOffsetsDto::from(stored)).into_response();
    response.headers_mut().insert(
        "preference-applied",
        HeaderValue::from_static("return=representation"),
    );
    Ok(response)
}

/// Whether a `Prefer` header (RFC 7240: comma-separated preferences, each possibly with
/// `;` parameters, names case-insensitive) asks for `return=representation`.
fn prefers_representation(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::HeaderName::from_static("prefer"))
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|preference| preference.split(';').next())
        .any(|preference| {
            let mut parts = preference.splitn(2, '=');
            let name = parts.next().unwrap_or_default().trim();
            let value = parts.next().unwrap_or_default().trim().trim_matches('"');
            name.eq_ignore_ascii_case("return") && value.eq_ignore_ascii_case("representation")
        })
}

/// Move the offsets of a group without live members: to the earliest or latest offset, a
/// timestamp or an offset (possibly backwards, to reprocess).
#[utoipa::path(
    post,
    path = "/v1/groups/{group}/offsets/reset",
    tag = "groups",
    params(("group" = String, Path, description = "Group name")),
    request_body = ResetOffsetsRequest,
    responses(
        (status = 200, description = "The group with its new offsets", body = GroupDto),
        (status = 400, description = "Invalid target, or no topics to reset", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`topic_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`group_not_empty`: the group has live members", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`no_leader`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn reset_offsets(
    State(broker): State<Broker>,
    ApiPath(group): ApiPath<String>,
    ApiJson(request): ApiJson<ResetOffsetsRequest>,
) -> ApiResult<Json<GroupDto>> {
    let request = request.into_domain(group)?;
    Ok(Json(
        broker.groups().reset_group_offsets(request).await?.into(),
    ))
}

/// Describe a group: members, assignments, committed offsets, high watermarks and lag.
#[utoipa::path(
    get,
    path = "/v1/groups/{group}",
    tag = "groups",
    params(("group" = String, Path, description = "Group name")),
    responses(
        (status = 200, description = "The group", body = GroupDto),
        (status = 404, description = "`group_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn describe_group(
    State(broker): State<Broker>,
    ApiPath(group): ApiPath<String>,
) -> ApiResult<Json<GroupDto>> {
    Ok(Json(broker.groups().describe_group(&group)?.into()))
}

/// Delete a group without live members, with its offsets.
#[utoipa::path(
    delete,
    path = "/v1/groups/{group}",
    tag = "groups",
    params(("group" = String, Path, description = "Group name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`group_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`group_not_empty`", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn delete_group(
    State(broker): State<Broker>,
    ApiPath(group): ApiPath<String>,
) -> ApiResult<StatusCode> {
    broker.groups().delete_group(&group).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List consumer groups.
#[utoipa::path(
    get,
    path = "/v1/groups",
    tag = "groups",
    responses((status = 200, description = "Every group", body = GroupListDto))
)]
async fn list_groups(State(broker): State<Broker>) -> Json<GroupListDto> {
    Json(GroupListDto {
        groups: broker
            .groups()
            .list_groups()
            .into_iter()
            .map(Into::into)
            .collect(),
    })
}

/// The groups' gauges in the Prometheus text format, appended to `/metrics` (see
/// `broker::groups::gauges` for why they are not recorded like the other metrics).
pub(in crate::api) fn render_gauges(gauges: &GroupGauges) -> String {
    let mut text = String::new();
    family(
        &mut text,
        "herald_groups",
        "Consumer groups, including those past groups.max_metric_groups",
    );
    let _ = writeln!(text, "herald_groups {}", gauges.total_groups);
    family(
        &mut text,
        "herald_group_series_omitted",
        "Consumer groups without their own series (past groups.max_metric_groups)",
    );
    let _ = writeln!(
        text,
        "herald_group_series_omitted {}",
        gauges.total_groups.saturating_sub(gauges.listed.len())
    );
    family(
        &mut text,
        "herald_group_members",
        "Live members of a consumer group",
    );
    for group in &gauges.listed {
        let _ = writeln!(
            text,
            "herald_group_members{{group=\"{}\"}} {}",
            label(&group.group),
            group.members
        );
    }
    family(
        &mut text,
        "herald_group_generation",
        "A consumer group's generation",
    );
    for group in &gauges.listed {
        let _ = writeln!(
            text,
            "herald_group_generation{{group=\"{}\"}} {}",
            label(&group.group),
            group.generation
        );
    }
    family(
        &mut text,
        "herald_group_lag",
        "Messages after a group's committed offsets, summed per topic",
    );
    for group in &gauges.listed {
        for (topic, lag) in &group.lag {
            let _ = writeln!(
                text,
                "herald_group_lag{{group=\"{}\",topic=\"{}\"}} {lag}",
                label(&group.group),
                label(topic)
            );
        }
    }
    text
}

fn family(text: &mut String, name: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
}

/// A label value escaped as the text format wants (names are `[A-Za-z0-9._-]` today; this
/// keeps the output valid whatever they become).
pub(in crate::api) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
