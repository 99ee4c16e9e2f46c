//! `herald schemas`: the schema registry (`/schema-registry`, docs/schemas.md) from the command
//! line: register a schema from a file, list subjects, show a version, check compatibility
//! before registering, delete. Answers are printed as the registry's JSON, one value per line.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::{json, Value};

use super::client::Api;

/// The registry's routes, under the node's base URL.
const REGISTRY: &str = "schema-registry";

#[derive(clap::Subcommand, Debug)]
pub enum SchemasCommand {
    /// Registers a schema (read from a file, or `-` for stdin) under a subject; prints its id.
    Register {
        subject: String,
        /// The schema's file: Avro JSON, a `.proto` file or a JSON Schema.
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// AVRO, PROTOBUF or JSON [default: from the file name: .avsc/.avro AVRO, .proto
        /// PROTOBUF, .json JSON, else AVRO].
        #[arg(long = "type")]
        schema_type: Option<String>,
        /// A reference to another subject's version, as NAME=SUBJECT:VERSION (repeatable).
        #[arg(long = "reference", value_parser = parse_reference)]
        references: Vec<Value>,
    },
    /// Lists subjects.
    List {
        /// Soft-deleted subjects too.
        #[arg(long)]
        deleted: bool,
    },
    /// Prints one version of a subject (the latest by default), with its id and schema.
    Get {
        subject: String,
        #[arg(long, default_value = "latest")]
        version: String,
    },
    /// Checks whether a schema could be registered under a subject; prints the verdict and
    /// what breaks. Exits non-zero when it is incompatible.
    Check {
        subject: String,
        #[arg(long, short = 'f')]
        file: PathBuf,
        #[arg(long = "type")]
        schema_type: Option<String>,
        /// Check against this version only [default: what the subject's level names].
        #[arg(long)]
        version: Option<String>,
        #[arg(long = "reference", value_parser = parse_reference)]
        references: Vec<Value>,
    },
    /// Deletes a subject (or one version): soft first, then with --permanent for good.
    Delete {
        subject: String,
        #[arg(long)]
        version: Option<String>,
        #[arg(long)]
        permanent: bool,
    },
}

/// `NAME=SUBJECT:VERSION` as a reference object.
fn parse_reference(text: &str) -> Result<Value, String> {
    let (name, rest) = text
        .split_once('=')
        .ok_or("a reference is NAME=SUBJECT:VERSION")?;
    let (subject, version) = rest
        .rsplit_once(':')
        .ok_or("a reference is NAME=SUBJECT:VERSION")?;
    let version: u32 = version
        .parse()
        .map_err(|_| format!("'{version}' is not a version number"))?;
    Ok(json!({"name": name, "subject": subject, "version": version}))
}

/// The type a schema file's name suggests.
fn type_of(file: &std::path::Path, given: Option<String>) -> String {
    if let Some(given) = given {
        return given.to_ascii_uppercase();
    }
    match file.extension().and_then(|extension| extension.to_str()) {
        Some("proto") => "PROTOBUF",
        Some("json") => "JSON",
        _ => "AVRO",
    }
    .to_string()
}

fn schema_body(
    file: &std::path::Path,
    schema_type: Option<String>,
    references: Vec<Value>,
) -> anyhow::Result<Value> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("could not read the schema from stdin")?
    } else {
        std::fs::read_to_string(file)
            .with_context(|| format!("could not read the schema file {}", file.display()))?
    };
    Ok(json!({
        "schema": text,
        "schemaType": type_of(file, schema_type),
        "references": references,
    }))
}

pub async fn run(server: &str, command: SchemasCommand) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let answer: Value = match command {
        SchemasCommand::Register {
            subject,
            file,
            schema_type,
            references,
        } => {
            let body = schema_body(&file, schema_type, references)?;
            let url = api.url(&[REGISTRY, "subjects", &subject, "versions"]);
            api.send_json(api.http().post(url).json(&body)).await?
        }
        SchemasCommand::List { deleted } => {
            let mut url = api.url(&[REGISTRY, "subjects"]);
            if deleted {
                url.set_query(Some("deleted=true"));
            }
            api.send_json(api.http().get(url)).await?
        }
        SchemasCommand::Get { subject, version } => {
            let url = api.url(&[REGISTRY, "subjects", &subject, "versions", &version]);
            api.send_json(api.http().get(url)).await?
        }
        SchemasCommand::Check {
            subject,
            file,
            schema_type,
            version,
            references,
        } => {
            let body = schema_body(&file, schema_type, references)?;
            let mut segments = vec![REGISTRY, "compatibility", "subjects", &subject, "versions"];
            if let Some(version) = &version {
                segments.push(version);
            }
            let mut url = api.url(&segments);
            url.set_query(Some("verbose=true"));
            let verdict: Value = api.send_json(api.http().post(url).json(&body)).await?;
            println!("{verdict}");
            if verdict["is_compatible"] != Value::Bool(true) {
                anyhow::bail!("the schema is not compatible with subject '{subject}'");
            }
            return Ok(());
        }
        SchemasCommand::Delete {
            subject,
            version,
            permanent,
        } => {
            let mut segments = vec![REGISTRY, "subjects", &subject];
            if let Some(version) = &version {
                segments.extend(["versions", version.as_str()]);
            }
            let mut url = api.url(&segments);
            if permanent {
                url.set_query(Some("permanent=true"));
            }
            api.send_json(api.http().delete(url)).await?
        }
    };
    println!("{answer}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_types_are_read_from_the_command_line() {
        assert_eq!(
            parse_reference("com.acme.Address=address-value:2").unwrap(),
            json!({"name": "com.acme.Address", "subject": "address-value", "version": 2})
        );
        assert!(parse_reference("no-equals").is_err());
        assert!(parse_reference("a=b:latest").is_err());
        assert_eq!(
            type_of(std::path::Path::new("order.proto"), None),
            "PROTOBUF"
        );
        assert_eq!(type_of(std::path::Path::new("order.json"), None), "JSON");
        assert_eq!(type_of(std::path::Path::new("order.avsc"), None), "AVRO");
        assert_eq!(
            type_of(std::path::Path::new("x"), Some("json".into())),
            "JSON"
        );
    }
}
