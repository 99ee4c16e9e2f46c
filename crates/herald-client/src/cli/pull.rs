//! `herald pull SUB`: leases messages of a subscription, prints each (as `herald consume` does)
//! and acks what it printed.
//!
//! Without `--follow` it makes one pull (waiting up to `--max-wait-ms` for a message). With
//! `--follow` it pulls until interrupted: Ctrl-C stops it between two steps. A batch already
//! pulled is always printed and acked before it stops; a pull still waiting is abandoned, and
//! whatever the server may have leased to it at that instant is never seen here, so it comes
//! back to another puller after the ack deadline. When stdout goes away (`| head`), the
//! messages of the batch not printed are nacked with no delay, so they are delivered again at
//! once instead of after the deadline.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use super::client::Api;
use super::consume::{is_transient, write_message};
use super::subscriptions_api::Pulled;
use super::OutputFormat;

/// How many times in a row a pull is retried after a transient failure.
const MAX_RETRIES: u32 = 5;

/// `herald pull SUB`.
#[derive(clap::Args, Debug)]
pub struct PullArgs {
    /// Subscription to pull from.
    pub subscription: String,
    /// The most messages one pull leases (1-1000).
    #[arg(long, default_value_t = 10)]
    pub max_messages: u32,
    /// How long one pull waits on the server for a message (0-60000).
    #[arg(long, default_value_t = 1_000)]
    pub max_wait_ms: u64,
    /// Do not ack: the messages come back after the subscription's ack deadline.
    #[arg(long)]
    pub no_ack: bool,
    /// Keep pulling until interrupted (Ctrl-C).
    #[arg(long)]
    pub follow: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,
}

/// What printing a batch came to.
enum Printed {
    All,
    /// Stdout went away after this many messages.
    Closed(usize),
}

fn print_batch(
    out: &mut impl Write,
    pulled: &[Pulled],
    format: OutputFormat,
) -> anyhow::Result<Printed> {
    for (index, delivery) in pulled.iter().enumerate() {
        let written = write_message(out, &delivery.message, format).and_then(|()| {
            // Flushed message by message: an ack must follow only what really went out.
            out.flush()
        });
        match written {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                return Ok(Printed::Closed(index))
            }
            Err(error) => return Err(error).context("could not write to stdout"),
        }
    }
    Ok(Printed::All)
}

/// Runs `herald pull`.
pub async fn run(server: &str, args: PullArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    let mut out = std::io::stdout();
    let mut failures = 0u32;
    loop {
        let answer = tokio::select! {
            biased;
            _ = &mut interrupted => return Ok(()),
            answer = api.pull(&args.subscription, args.max_messages, args.max_wait_ms) => answer,
        };
        let pulled = match answer {
            Ok(pulled) => pulled,
            Err(error) if args.follow && is_transient(&error) && failures < MAX_RETRIES => {
                failures += 1;
                let backoff = Duration::from_millis(200 << failures.min(5));
                eprintln!("{error:#}; retrying in {backoff:?}");
                tokio::select! {
                    _ = &mut interrupted => return Ok(()),
                    _ = tokio::time::sleep(backoff) => continue,
                }
            }
            Err(error) => return Err(error),
        };
        failures = 0;
        let printed = print_batch(&mut out, &pulled, args.format)?;
        let shown = match printed {
            Printed::All => pulled.len(),
            Printed::Closed(count) => count,
        };
        if !args.no_ack && shown > 0 {
            let ids: Vec<&str> = pulled[..shown].iter().map(|p| p.ack_id.as_str()).collect();
            let answer = api.ack(&args.subscription, &ids).await?;
            if !answer.expired.is_empty() {
                eprintln!(
                    "{} message(s) were acked after their lease expired: they will be delivered again",
                    answer.expired.len()
                );
            }
        }
        if let Printed::Closed(count) = printed {
            let ids: Vec<&str> = pulled[count..].iter().map(|p| p.ack_id.as_str()).collect();
            if !ids.is_empty() {
                api.nack(&args.subscription, &ids, Some(0)).await?;
            }
            return Ok(());
        }
        if !args.follow {
            return Ok(());
        }
    }
}
