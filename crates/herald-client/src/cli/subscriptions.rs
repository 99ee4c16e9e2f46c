//! `herald subscriptions create|list|describe|delete`: subscription administration.
//!
//! Like `herald topics`: `list` is an aligned table, `create` and `describe` print the server's
//! JSON pretty-printed (`describe` with the counts and the oldest unacked age).

use serde_json::{json, Value};

use super::client::Api;
use super::topics::render_table;

/// Where a new subscription starts reading each partition.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartArg {
    /// Every message still stored.
    Earliest,
    /// Only messages produced after the subscription is created.
    Latest,
}

/// `herald subscriptions ...`.
#[derive(clap::Subcommand, Debug)]
pub enum SubscriptionsCommand {
    /// Create a subscription (or change the settings of an existing one; its topic and start
    /// are fixed). Settings not given take the server's defaults.
    Create {
        /// Subscription name: 1-249 characters of [A-Za-z0-9._-].
        name: String,
        /// The topic it reads.
        #[arg(long)]
        topic: String,
        /// How long a puller holds a message before it is delivered again (100-600000).
        #[arg(long)]
        ack_deadline_ms: Option<u64>,
        /// Backoff after the first failed delivery, doubling per attempt.
        #[arg(long)]
        min_backoff_ms: Option<u64>,
        /// The longest backoff.
        #[arg(long)]
        max_backoff_ms: Option<u64>,
        /// Publish messages past --max-delivery-attempts to this topic.
        #[arg(long, requires = "max_delivery_attempts")]
        dead_letter_topic: Option<String>,
        /// Deliveries before a message goes to the dead-letter topic (1-1000).
        #[arg(long, requires = "dead_letter_topic")]
        max_delivery_attempts: Option<u32>,
        /// Where it starts reading.
        #[arg(long, value_enum)]
        start: Option<StartArg>,
    },
    /// List subscriptions as a table.
    List,
    /// Show one subscription (settings, counts, oldest unacked age) as JSON.
    Describe {
        /// Subscription name.
        name: String,
    },
    /// Delete a subscription and its delivery state.
    Delete {
        /// Subscription name.
        name: String,
    },
    /// Republish a subscription's dead letters to its topic.
    Redrive(super::redrive::RedriveArgs),
}

/// The body of `PUT /v1/subscriptions/{sub}` for `create`'s flags.
fn put_body(command: &SubscriptionsCommand) -> Value {
    let SubscriptionsCommand::Create {
        topic,
        ack_deadline_ms,
        min_backoff_ms,
        max_backoff_ms,
        dead_letter_topic,
        max_delivery_attempts,
        start,
        ..
    } = command
    else {
        return Value::Null;
    };
    let mut body = json!({ "topic": topic });
    if let Some(ms) = ack_deadline_ms {
        body["ack_deadline_ms"] = json!(ms);
    }
    if min_backoff_ms.is_some() || max_backoff_ms.is_some() {
        let mut retry = json!({});
        if let Some(ms) = min_backoff_ms {
            retry["min_backoff_ms"] = json!(ms);
        }
        if let Some(ms) = max_backoff_ms {
            retry["max_backoff_ms"] = json!(ms);
        }
        body["retry_policy"] = retry;
    }
    if let (Some(topic), Some(attempts)) = (dead_letter_topic, max_delivery_attempts) {
        body["dead_letter_policy"] = json!({"topic": topic, "max_delivery_attempts": attempts});
    }
    if let Some(start) = start {
        body["start"] = json!(match start {
            StartArg::Earliest => "earliest",
            StartArg::Latest => "latest",
        });
    }
    body
}

/// One `list` row: name, topic, ack deadline, dead-letter topic (or `-`), start.
fn subscription_row(subscription: &Value) -> Vec<String> {
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    vec![
        text(&subscription["name"]),
        text(&subscription["topic"]),
        text(&subscription["ack_deadline_ms"]),
        text(&subscription["dead_letter_policy"]["topic"]),
        text(&subscription["start"]),
    ]
}

/// Runs one `herald subscriptions` subcommand.
pub async fn run(server: &str, command: SubscriptionsCommand) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    match &command {
        SubscriptionsCommand::Create { name, .. } => {
            let subscription = api.put_subscription(name, &put_body(&command)).await?;
            println!("{}", serde_json::to_string_pretty(&subscription)?);
        }
        SubscriptionsCommand::List => {
            let subscriptions = api.list_subscriptions().await?;
            let rows: Vec<Vec<String>> = subscriptions.iter().map(subscription_row).collect();
            print!(
                "{}",
                render_table(
                    &[
                        "NAME",
                        "TOPIC",
                        "ACK_DEADLINE_MS",
                        "DEAD_LETTER_TOPIC",
                        "START"
                    ],
                    &rows
                )
            );
        }
        SubscriptionsCommand::Describe { name } => {
            let subscription = api.get_subscription(name).await?;
            println!("{}", serde_json::to_string_pretty(&subscription)?);
        }
        SubscriptionsCommand::Delete { name } => {
            api.delete_subscription(name).await?;
            println!("deleted subscription `{name}`");
        }
        SubscriptionsCommand::Redrive(args) => super::redrive::run(server, args.clone()).await?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: SubscriptionsCommand,
    }

    #[test]
    fn create_flags_make_the_put_body() {
        let cli = Cli::try_parse_from([
            "x",
            "create",
            "workers",
            "--topic",
            "jobs",
            "--ack-deadline-ms",
            "5000",
            "--min-backoff-ms",
            "10",
            "--dead-letter-topic",
            "jobs-dlq",
            "--max-delivery-attempts",
            "3",
            "--start",
            "latest",
        ])
        .unwrap();
        assert_eq!(
            put_body(&cli.command),
            json!({
                "topic": "jobs",
                "ack_deadline_ms": 5000,
                "retry_policy": {"min_backoff_ms": 10},
                "dead_letter_policy": {"topic": "jobs-dlq", "max_delivery_attempts": 3},
                "start": "latest",
            })
        );
        let cli = Cli::try_parse_from(["x", "create", "w", "--topic", "t"]).unwrap();
        assert_eq!(put_body(&cli.command), json!({"topic": "t"}));
        // A dead-letter topic needs its attempts, and the other way round.
        assert!(Cli::try_parse_from([
            "x",
            "create",
            "w",
            "--topic",
            "t",
            "--dead-letter-topic",
            "d"
        ])
        .is_err());
    }

    #[test]
    fn list_rows_show_a_missing_dead_letter_topic_as_a_dash() {
        let row = subscription_row(&json!({
            "name": "w", "topic": "t", "ack_deadline_ms": 30000, "start": "earliest"
        }));
        assert_eq!(row, ["w", "t", "30000", "-", "earliest"]);
    }
}
