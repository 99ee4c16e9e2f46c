//! `herald subscriptions redrive SUB`: republish a subscription's dead letters to its topic
//! (`POST /v1/subscriptions/{sub}/redrive`), and with `--wait` follow the job to its end.

use std::io::Write;
use std::time::Duration;

use serde_json::{Map, Value};

use super::client::Api;

/// How often `--wait` asks for the job's progress.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// `herald subscriptions redrive SUB`.
#[derive(clap::Args, Debug, Clone)]
pub struct RedriveArgs {
    /// Subscription name.
    pub subscription: String,
    /// First dead-letter offset to redrive, in each dead-letter partition (default: its log
    /// start).
    #[arg(long)]
    pub from_offset: Option<u64>,
    /// Last dead-letter offset to redrive (inclusive), in each dead-letter partition (default:
    /// its end when the redrive starts).
    #[arg(long)]
    pub to_offset: Option<u64>,
    /// Most messages republished per second (1-10000; the server's default is 100).
    #[arg(long)]
    pub max_per_second: Option<u32>,
    /// Wait for the redrive to end, printing its progress on stderr; exits with an error when
    /// it fails or is cancelled.
    #[arg(long)]
    pub wait: bool,
}

/// The request body of the arguments: only what was given.
fn request_body(args: &RedriveArgs) -> Value {
    let mut body = Map::new();
    if let Some(from) = args.from_offset {
        body.insert("from_offset".into(), from.into());
    }
    if let Some(to) = args.to_offset {
        body.insert("to_offset".into(), to.into());
    }
    if let Some(rate) = args.max_per_second {
        body.insert("max_per_second".into(), rate.into());
    }
    Value::Object(body)
}

/// Starts the redrive and prints the job as JSON (the finished job with `--wait`).
pub async fn run(server: &str, args: RedriveArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let path = ["v1", "subscriptions", args.subscription.as_str(), "redrive"];
    let mut job: Value = api
        .send_json(api.http().post(api.url(&path)).json(&request_body(&args)))
        .await?;
    if args.wait {
        let mut stderr = std::io::stderr();
        loop {
            if job["state"] != "running" {
                break;
            }
            let _ = writeln!(
                stderr,
                "redrive {}: {} redriven, {} skipped of {} offsets",
                job["id"], job["redriven"], job["skipped"], job["total"]
            );
            tokio::time::sleep(WAIT_POLL).await;
            job = api.send_json(api.http().get(api.url(&path))).await?;
        }
    }
    writeln!(std::io::stdout().lock(), "{job}")?;
    match job["state"].as_str() {
        Some("failed") if args.wait => anyhow::bail!(
            "redrive {} failed: {}",
            job["id"],
            job["reason"].as_str().unwrap_or("no reason given")
        ),
        Some("cancelled") if args.wait => anyhow::bail!("redrive {} was cancelled", job["id"]),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_carries_only_what_was_given() {
        let mut args = RedriveArgs {
            subscription: "s".into(),
            from_offset: None,
            to_offset: Some(9),
            max_per_second: None,
            wait: false,
        };
        assert_eq!(request_body(&args), serde_json::json!({"to_offset": 9}));
        args.from_offset = Some(2);
        args.max_per_second = Some(50);
        assert_eq!(
            request_body(&args),
            serde_json::json!({"from_offset": 2, "to_offset": 9, "max_per_second": 50})
        );
    }
}
