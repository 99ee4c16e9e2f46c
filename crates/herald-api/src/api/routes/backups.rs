//! `/v1/cluster/nodes/{id}/backups`: online backups of one node, taken and listed by the node
//! itself (a backup is a copy of its own disk; another node answers 421 with the address to ask).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::backups::{BackupDto, BackupListDto, TakeBackupDto};
use crate::api::extract::{optional_json_from_bytes, ApiBytes, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::api::AppState;
use crate::broker::Broker;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(take_backup, list_backups))
}

/// Take a backup of this node: a consistent copy of its store (a RocksDB checkpoint: hard links
/// on the data directory's file system, seconds for any size) and its cluster secret, with a
/// manifest, under `storage.backup_dir`. Writes go on while it is taken. The body (optional:
/// none, or `null`, is a backup named by its time) names the backup.
#[utoipa::path(
    post,
    path = "/v1/cluster/nodes/{id}/backups",
    tag = "cluster",
    params(("id" = u64, Path, minimum = 1, maximum = 9223372036854775807_u64, description = "This node's id")),
    request_body(content = Option<TakeBackupDto>, content_type = "application/json"),
    responses(
        (status = 201, description = "The backup was taken", body = BackupDto),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`node_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`backup_exists`, or `backups_disabled`", body = Problem, content_type = "application/problem+json"),
        (status = 421, description = "`not_this_node`: ask the node itself (its address is in the detail)", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn take_backup(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u64>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<(StatusCode, Json<BackupDto>)> {
    let request: TakeBackupDto = optional_json_from_bytes(&body)?;
    let manifest = broker.backups().take(id, request.name).await?;
    Ok((StatusCode::CREATED, Json(manifest.into())))
}

/// This node's backups, oldest first.
#[utoipa::path(
    get,
    path = "/v1/cluster/nodes/{id}/backups",
    tag = "cluster",
    params(("id" = u64, Path, minimum = 1, maximum = 9223372036854775807_u64, description = "This node's id")),
    responses(
        (status = 200, description = "The backups", body = BackupListDto),
        (status = 404, description = "`node_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`backups_disabled`", body = Problem, content_type = "application/problem+json"),
        (status = 421, description = "`not_this_node`: ask the node itself", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn list_backups(
    State(broker): State<Broker>,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<BackupListDto>> {
    let backups = broker.backups().list(id).await?;
    Ok(Json(BackupListDto {
        backups: backups.into_iter().map(Into::into).collect(),
    }))
}
