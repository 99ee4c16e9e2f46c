//! What an operator reads: health, metrics, dashboards and alerts, traces and logs.

mod deploy_metrics;
mod health;
mod operator_metrics;
mod trace_context;
