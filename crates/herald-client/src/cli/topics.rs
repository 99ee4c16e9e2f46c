//! `herald topics create|list|describe|delete`: topic administration (`export` and `import`
//! have files of their own).
//!
//! Output is for people: `list` is an aligned table, `describe` the server's JSON pretty-printed
//! (it is already the most complete and precise description of a topic).

use serde_json::{Map, Value};

use super::client::{Api, CreateTopic, TopicInfo};
use super::TopicsCommand;

/// Parses a `--config key=value` option. A value that reads as an integer is sent as a JSON
/// number (`retention_ms=-1`), anything else as a string (`cleanup_policy=compact,delete`).
pub fn parse_config_entry(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected key=value, got `{text}`"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("empty config key in `{text}`"));
    }
    let value = value.trim();
    let value = match value.parse::<i64>() {
        Ok(number) => Value::from(number),
        Err(_) => Value::String(value.to_string()),
    };
    Ok((key.to_string(), value))
}

/// Formats rows as columns separated by two spaces, each as wide as its widest cell.
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One `list` row: name, partitions, replication factor, messages currently kept.
fn topic_row(topic: &TopicInfo) -> Vec<String> {
    let messages: u64 = topic
        .partitions
        .iter()
        .map(|p| p.high_watermark.saturating_sub(p.log_start_offset))
        .sum();
    vec![
        topic.name.clone(),
        topic.partitions.len().to_string(),
        topic.replication_factor.to_string(),
        messages.to_string(),
    ]
}

/// Runs one `herald topics` subcommand.
pub async fn run(server: &str, command: TopicsCommand) -> anyhow::Result<()> {
    let command = match command {
        TopicsCommand::Export(args) => return super::export::run(server, args).await,
        TopicsCommand::Import(args) => return super::import::run(server, args).await,
        other => other,
    };
    let api = Api::new(server)?;
    match command {
        TopicsCommand::Create {
            name,
            partitions,
            replication_factor,
            config,
        } => {
            let spec = CreateTopic {
                name,
                partitions,
                replication_factor,
                config: config.into_iter().collect::<Map<String, Value>>(),
            };
            let topic = api.create_topic(&spec).await?;
            println!(
                "created topic `{}` with {} partition(s), replication factor {}",
                topic.name,
                topic.partitions.len(),
                topic.replication_factor
            );
        }
        TopicsCommand::List => {
            let mut topics = api.list_topics().await?;
            topics.sort_by(|a, b| a.name.cmp(&b.name));
            let rows: Vec<Vec<String>> = topics.iter().map(topic_row).collect();
            print!(
                "{}",
                render_table(&["NAME", "PARTITIONS", "REPLICATION", "MESSAGES"], &rows)
            );
        }
        TopicsCommand::Describe { name } => {
            let topic = api.get_topic_json(&name).await?;
            println!("{}", serde_json::to_string_pretty(&topic)?);
        }
        TopicsCommand::Delete { name } => {
            api.delete_topic(&name).await?;
            println!("deleted topic `{name}`");
        }
        TopicsCommand::Export(_) | TopicsCommand::Import(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::client::PartitionInfo;

    #[test]
    fn config_entries_parse_numbers_and_strings() {
        assert_eq!(
            parse_config_entry("retention_ms=-1"),
            Ok(("retention_ms".into(), Value::from(-1)))
        );
        assert_eq!(
            parse_config_entry("cleanup_policy=compact,delete"),
            Ok(("cleanup_policy".into(), Value::from("compact,delete")))
        );
        assert!(parse_config_entry("novalue").is_err());
        assert!(parse_config_entry("=3").is_err());
    }

    #[test]
    fn tables_are_aligned() {
        let rows = vec![
            vec!["orders".to_string(), "12".to_string()],
            vec!["a".into(), "1".into()],
        ];
        assert_eq!(
            render_table(&["NAME", "P"], &rows),
            "NAME    P\norders  12\na       1\n"
        );
    }

    #[test]
    fn rows_count_kept_messages() {
        let topic = TopicInfo {
            name: "t".into(),
            partitions: vec![
                PartitionInfo {
                    partition: 0,
                    log_start_offset: 5,
                    high_watermark: 15,
                    ..Default::default()
                },
                PartitionInfo {
                    partition: 1,
                    high_watermark: 3,
                    ..Default::default()
                },
            ],
            replication_factor: 3,
            config: Value::Null,
        };
        assert_eq!(topic_row(&topic), vec!["t", "2", "3", "13"]);
    }
}
