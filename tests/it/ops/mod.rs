//! What an operator reads and does: health, metrics, dashboards and alerts, traces and logs;
//! upgrades that keep the data (`format_fixtures`).

mod deploy_metrics;
mod format_fixtures;
mod health;
mod operator_metrics;
mod trace_context;
