//! `herald request TOPIC`: publish one request and print its reply; `herald reply`: answer a
//! request by its `herald-reply-to` and `herald-correlation-id` headers.
//!
//! A value is sent as JSON when it parses as JSON, otherwise as a JSON string (like `herald
//! produce`), or as raw bytes with `--bytes`. The reply is printed the same way back: its
//! JSON value on one line, or its raw bytes.

use std::io::Write;

use anyhow::Context;
use base64::Engine;
use serde_json::{Map, Value};

use super::client::Api;

/// `herald request TOPIC`.
#[derive(clap::Args, Debug)]
pub struct RequestArgs {
    /// Topic to publish the request to.
    pub topic: String,
    /// The request's value: JSON, or any other text (sent as a JSON string).
    #[arg(long)]
    pub value: String,
    /// The request's key.
    #[arg(long, short = 'k')]
    pub key: Option<String>,
    /// A header as name=value, repeatable.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// How long to wait for the reply (1-60000 ms).
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Send the value as raw bytes (value_b64).
    #[arg(long)]
    pub bytes: bool,
    /// Print the whole answer (value, headers, correlation id, where the request was written)
    /// as JSON instead of the reply's value.
    #[arg(long)]
    pub json: bool,
}

/// `herald reply`.
#[derive(clap::Args, Debug)]
pub struct ReplyArgs {
    /// The request's `herald-reply-to` header.
    #[arg(long)]
    pub reply_to: String,
    /// The request's `herald-correlation-id` header.
    #[arg(long)]
    pub correlation_id: String,
    /// The reply's value: JSON, or any other text (sent as a JSON string).
    #[arg(long)]
    pub value: String,
    /// A header as name=value, repeatable.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Send the value as raw bytes (value_b64).
    #[arg(long)]
    pub bytes: bool,
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .ok_or_else(|| format!("expected NAME=VALUE, got '{text}'"))
}

/// The value and headers fields of a message body.
fn message_fields(value: &str, bytes: bool, headers: &[(String, String)]) -> Map<String, Value> {
    let mut message = Map::new();
    if bytes {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
        message.insert("value_b64".into(), Value::String(encoded));
    } else {
        let json = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        message.insert("value".into(), json);
    }
    if !headers.is_empty() {
        let headers = headers
            .iter()
            .map(|(name, value)| (name.clone(), Value::String(value.clone())))
            .collect();
        message.insert("headers".into(), Value::Object(headers));
    }
    message
}

/// Publishes the request, waits for the reply and prints it.
pub async fn run_request(server: &str, args: RequestArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let mut body = message_fields(&args.value, args.bytes, &args.headers);
    if let Some(key) = &args.key {
        body.insert("key".into(), Value::String(key.clone()));
    }
    let mut url = api.url(&["v1", "topics", &args.topic, "requests"]);
    url.query_pairs_mut()
        .append_pair("timeout_ms", &args.timeout_ms.to_string());
    let answer: Value = api
        .send_json(api.http().post(url).json(&Value::Object(body)))
        .await?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{answer}")?;
    } else if let Some(encoded) = answer.get("value_b64").and_then(Value::as_str) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .context("the reply's value_b64 is not base64")?;
        stdout.write_all(&bytes)?;
    } else {
        writeln!(stdout, "{}", answer.get("value").unwrap_or(&Value::Null))?;
    }
    Ok(())
}

/// Posts the reply.
pub async fn run_reply(server: &str, args: ReplyArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let mut body = message_fields(&args.value, args.bytes, &args.headers);
    body.insert("reply_to".into(), Value::String(args.reply_to));
    body.insert("correlation_id".into(), Value::String(args.correlation_id));
    api.send(
        api.http()
            .post(api.url(&["v1", "replies"]))
            .json(&Value::Object(body)),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_json_when_they_parse_and_strings_otherwise() {
        let fields = message_fields(r#"{"a":1}"#, false, &[]);
        assert_eq!(fields["value"], serde_json::json!({"a": 1}));
        let fields = message_fields("hello there", false, &[("h".into(), "v".into())]);
        assert_eq!(fields["value"], "hello there");
        assert_eq!(fields["headers"], serde_json::json!({"h": "v"}));
        let fields = message_fields("hi", true, &[]);
        assert_eq!(fields["value_b64"], "aGk=");
        assert!(parse_header("novalue").is_err());
    }
}
