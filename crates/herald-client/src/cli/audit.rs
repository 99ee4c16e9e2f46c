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
    next_offset: u64,
}

/// The most pages `--all` reads, so a log written faster than it is read still ends.
const MAX_PAGES: usize = 100_000;

/// Pages after the first continue at the previous page's `next_offset` (a position in the
/// log), never at a time: an event's time is its node's clock, and one node's clock ahead must
/// not make `--all` stop early or skip events.
pub async fn run(server: &str, args: AuditArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let mut offset: Option<u64> = None;
    let stdout = std::io::stdout();
    for _ in 0..MAX_PAGES {
        let mut url = api.url(&["v1", "audit"]);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("since", &args.since.to_string());
            query.append_pair("limit", &args.limit.to_string());
            if let Some(principal) = &args.principal {
                query.append_pair("principal", principal);
            }
            if let Some(offset) = offset {
                query.append_pair("from_offset", &offset.to_string());
            }
        }
        let page: AuditPage = api.send_json(api.http().get(url)).await?;
        let mut out = stdout.lock();
        for event in &page.events {
            writeln!(out, "{event}").context("writing to standard output")?;
        }
        out.flush().context("writing to standard output")?;
        // A page that looked at nothing new is the end of the log (an empty page that moved
        // on passed events of other principals or times: the log goes on).
        let moved = offset.is_none_or(|offset| page.next_offset > offset);
        if !args.all || !moved {
            break;
        }
        offset = Some(page.next_offset);
    }
    Ok(())
}
