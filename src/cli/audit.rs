//! `herald auth audit`: the audit log (`GET /v1/audit`), one JSON event per line, oldest first.

use std::io::Write;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::client::Api;

/// `herald auth audit [--since MS] [--limit N] [--principal P] [--all]`.
#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// Events at or after this time, in ms since the epoch.
    #[arg(long, default_value_t = 0)]
    pub since: i64,
    /// At most this many events per page (1 to 1000).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Only this principal's events (a token's subject, or `anonymous`).
    #[arg(long)]
    pub principal: Option<String>,
    /// Follow the pages to the end of the log instead of printing one page.
    #[arg(long)]
    pub all: bool,
}

#[derive(Deserialize)]
struct AuditPage {
    events: Vec<Value>,
    next_since: i64,
}

/// The most pages `--all` reads, so a log written faster than it is read still ends.
const MAX_PAGES: usize = 100_000;

pub async fn run(server: &str, args: AuditArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let mut since = args.since;
    let stdout = std::io::stdout();
    for _ in 0..MAX_PAGES {
        let mut url = api.url(&["v1", "audit"]);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("since", &since.to_string());
            query.append_pair("limit", &args.limit.to_string());
            if let Some(principal) = &args.principal {
                query.append_pair("principal", principal);
            }
        }
        let page: AuditPage = api.send_json(api.http().get(url)).await?;
        let mut out = stdout.lock();
        for event in &page.events {
            writeln!(out, "{event}").context("writing to standard output")?;
        }
        out.flush().context("writing to standard output")?;
        if !args.all || page.events.is_empty() || page.next_since <= since {
            break;
        }
        since = page.next_since;
    }
    Ok(())
}
