//! What an operator reads and does: health, metrics, dashboards and alerts, traces and logs;
//! upgrades that keep the data (`format_fixtures`); the logical backup (`export_import`).

mod backup_restore;
mod deploy_metrics;
mod export_import;
mod format_fixtures;
mod health;
mod operator_metrics;
mod trace_context;
