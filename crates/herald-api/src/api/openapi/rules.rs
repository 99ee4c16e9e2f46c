//! Rules of the OpenAPI document that hold for every operation, applied once to the generated
//! document instead of being repeated (and forgotten) in each handler's annotation.
//!
//! The document must declare what the server enforces, so a generated SDK validates what the
//! server validates and a schema fuzzer finds no difference (`.ci/schemathesis`):
//! - a path parameter named `topic`, `group` or `member` has the name rules of
//!   `domain::names` as a pattern (a topic may not be internal: `__`);
//! - every operation with parameters or a body may answer 400, with a JSON body 413 and 415;
//! - every operation but liveness, readiness and metrics may answer 429 `quota_exceeded` (the
//!   client's quotas, `api::middleware::quota`), 503 `overloaded` (the in-flight cap) and 504 `timeout`
//!   (the request deadline), from `api::middleware::limits`.

use utoipa::openapi::path::{Operation, Parameter, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{Content, OpenApi, RefOr, Response, ResponseBuilder};

use crate::api::problem::PROBLEM_JSON;
use crate::broker::MAX_IDEMPOTENCY_KEY_LEN;
use crate::domain::names::MAX_NAME_LEN;

/// A name of `domain::names`: 1 to 249 characters of `[A-Za-z0-9._-]`, not `.` or `..`.
pub const NAME_PATTERN: &str = concat!(
    "^(",
    "[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}",
    "|\\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,247}",
    "|\\.\\.[A-Za-z0-9._-]{1,247}",
    ")$"
);

/// A name that is not internal: [`NAME_PATTERN`] without a leading `__`.
pub const PUBLIC_NAME_PATTERN: &str = concat!(
    "^(",
    "[A-Za-z0-9-][A-Za-z0-9._-]{0,248}",
    "|_",
    "|_[A-Za-z0-9.-][A-Za-z0-9._-]{0,247}",
    "|\\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,247}",
    "|\\.\\.[A-Za-z0-9._-]{1,247}",
    ")$"
);

/// Paths that answer about the node itself and are never refused or cut short.
const NODE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Applies every rule to a generated document.
pub fn apply(document: &mut OpenApi) {
    for (path, item) in document.paths.paths.iter_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations {
            if let Some(operation) = operation.as_mut() {
                constrain_parameters(operation);
                add_common_responses(operation, NODE_PATHS.contains(&path.as_str()));
            }
        }
    }
    crate::api::openapi::security::apply(document);
}

fn name_schema(pattern: &str, what: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_LEN))
        .pattern(Some(pattern))
        .description(Some(what))
        .into()
}

/// The schema of a name field that may not be internal (a topic to create), for
/// `#[schema(schema_with = ...)]`.
pub fn public_name_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_LEN))
        .pattern(Some(PUBLIC_NAME_PATTERN))
        .into()
}

/// [`public_name_schema`] or `null` (an optional name).
pub fn optional_public_name_schema() -> Schema {
    utoipa::openapi::schema::OneOfBuilder::new()
        .item(public_name_schema())
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .into()
}

/// A list of 1 to `max_items` topic names a client reads (a group member's topics): none may
/// be internal.
pub fn public_name_list_schema(max_items: usize) -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(RefOr::T(public_name_schema()))
        .min_items(Some(1))
        .max_items(Some(max_items))
        .build()
}

/// [`public_name_list_schema`] for a group member's topics (1 to 100). `schema_with` drops
/// the field's doc comment, so the description is given here.
pub fn member_topics_schema() -> utoipa::openapi::schema::Array {
    let mut schema = public_name_list_schema(100);
    schema.description = Some("The topics to read (1 to 100).".to_string());
    schema
}

/// Topic names a reset names (none: every topic the group has offsets for).
pub fn optional_topic_list_schema() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(RefOr::T(public_name_schema()))
        .description(Some(
            "The topics whose partitions move; default every topic the group has offsets for.",
        ))
        .build()
}

/// A subscription's topic: a public name, fixed at creation.
pub fn subscription_topic_schema() -> Schema {
    let Schema::Object(mut schema) = public_name_schema() else {
        unreachable!("public_name_schema builds an object schema")
    };
    schema.description = Some("The topic to read; fixed at creation.".to_string());
    Schema::Object(schema)
}

/// A list of names (a client's roles), at most `MAX_ROLES_PER_CLIENT`.
pub fn role_list_schema() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(RefOr::T(name_field_schema()))
        .max_items(Some(crate::domain::auth::MAX_ROLES_PER_CLIENT))
        .build()
}

/// The schema of a name field (a topic or group to read), for `#[schema(schema_with = ...)]`.
pub fn name_field_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_LEN))
        .pattern(Some(NAME_PATTERN))
        .into()
}

fn constrain_parameters(operation: &mut Operation) {
    let Some(parameters) = operation.parameters.as_mut() else {
        return;
    };
    for parameter in parameters.iter_mut() {
        let RefOr::T(parameter) = parameter else {
            continue;
        };
        if matches!(parameter.parameter_in, ParameterIn::Query) && parameter.name == "offset" {
            let schema = ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(format!(
                    "^(earliest|latest|\\+?0*{})$",
                    decimal_at_most(u64::MAX)
                )))
                .description(Some(
                    "A non-negative offset, `earliest` (the default) or `latest`",
                ));
            set_schema(parameter, schema.into());
            continue;
        }
        if matches!(parameter.parameter_in, ParameterIn::Header)
            && parameter.name == "Idempotency-Key"
        {
            // HTTP trims a header value's surrounding spaces, so the key cannot have any.
            let schema = ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(format!(
                    "^[!-~]([ -~]{{0,{}}}[!-~])?$",
                    MAX_IDEMPOTENCY_KEY_LEN - 2
                )));
            set_schema(parameter, schema.into());
            continue;
        }
        if !matches!(parameter.parameter_in, ParameterIn::Path) {
            continue;
        }
        let schema = match parameter.name.as_str() {
            // Internal topics are neither read nor written through topic routes (the audit log
            // is read at `GET /v1/audit`), so every route's topic is a public name.
            "topic" => name_schema(
                PUBLIC_NAME_PATTERN,
                "A topic name: 1-249 characters of [A-Za-z0-9._-], not '.' or '..', not starting with '__' (internal)",
            ),
            "group" => name_schema(
                NAME_PATTERN,
                "A group name: 1-249 characters of [A-Za-z0-9._-], not '.' or '..'",
            ),
            _ => continue,
        };
        set_schema(parameter, schema);
    }
}

/// A regular expression matching the decimal numbers from 0 to `max` written without leading
/// zeros: what `u64::from_str` takes (after an optional `+` and leading zeros).
fn decimal_at_most(max: u64) -> String {
    let digits: Vec<u32> = max
        .to_string()
        .chars()
        .filter_map(|digit| digit.to_digit(10))
        .collect();
    let length = digits.len();
    let mut alternatives = vec!["0".to_string()];
    if length > 1 {
        alternatives.push(format!("[1-9][0-9]{{0,{}}}", length - 2));
    }
    for (index, digit) in digits.iter().enumerate() {
        let low = if index == 0 { 1 } else { 0 };
        if *digit > low {
            let prefix: String = digits[..index].iter().map(u32::to_string).collect();
            let rest = length - index - 1;
            alternatives.push(format!("{prefix}[{low}-{}][0-9]{{{rest}}}", digit - 1));
        }
    }
    alternatives.push(max.to_string());
    format!("({})", alternatives.join("|"))
}

fn set_schema(parameter: &mut Parameter, schema: RefOr<Schema>) {
    parameter.schema = Some(schema);
}

fn add_common_responses(operation: &mut Operation, node_path: bool) {
    let takes_input = operation
        .parameters
        .as_ref()
        .is_some_and(|parameters| !parameters.is_empty());
    let json_body = operation
        .request_body
        .as_ref()
        .is_some_and(|body| match body {
            RefOr::T(body) => body
                .content
                .keys()
                .any(|media_type| media_type.contains("json")),
            RefOr::Ref(_) => false,
        });
    let has_body = operation.request_body.is_some();
    let responses = &mut operation.responses.responses;
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status.to_string())
            .or_insert_with(|| problem_response(description));
    };
    if takes_input || has_body {
        add(
            "400",
            "`invalid_request`: a parameter or the body is malformed or out of range",
        );
    }
    if has_body {
        add(
            "413",
            "`payload_too_large`: the body is over the server's limit",
        );
    }
    if json_body {
        add(
            "415",
            "`unsupported_media_type`: the body is not `application/json`",
        );
    }
    if !node_path {
        add(
            "429",
            "`quota_exceeded`: the client is over one of its quotas (with `Retry-After`); nothing was done",
        );
        add(
            "503",
            "`overloaded`: the node has its maximum of requests in flight (with `Retry-After`); nothing was done",
        );
        add(
            "504",
            "`timeout`: the request passed the server's deadline; a change it asked for may or may not have been made",
        );
    }
}

pub(crate) fn problem_response(description: &str) -> RefOr<Response> {
    let problem: RefOr<Schema> = RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Problem"));
    ResponseBuilder::new()
        .description(description)
        .content(PROBLEM_JSON, Content::new(Some(problem)))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::names::{is_internal, validate_name};

    fn matches(pattern: &str, name: &str) -> bool {
        regex::Regex::new(pattern)
            .expect("the pattern compiles")
            .is_match(name)
    }

    #[test]
    fn the_name_patterns_accept_exactly_what_the_server_accepts() {
        let mut names: Vec<String> = [
            "",
            ".",
            "..",
            "...",
            ".a",
            "..a",
            "a",
            "_",
            "__",
            "__x",
            "_x",
            "-",
            "a.b",
            "a..b",
            "orders",
            "Orders.v2",
            "my_topic-1",
            "a b",
            "a/b",
            "é",
            "_.",
            "._",
            "__.",
            ".__",
        ]
        .iter()
        .map(|name| name.to_string())
        .collect();
        names.push("a".repeat(MAX_NAME_LEN));
        names.push("a".repeat(MAX_NAME_LEN + 1));
        names.push(format!("..{}", "a".repeat(MAX_NAME_LEN - 2)));
        names.push(format!("_{}", "a".repeat(MAX_NAME_LEN - 1)));
        for name in &names {
            let valid = validate_name("name", name).is_ok();
            assert_eq!(matches(NAME_PATTERN, name), valid, "{name:?}");
            assert_eq!(
                matches(PUBLIC_NAME_PATTERN, name),
                valid && !is_internal(name),
                "{name:?}"
            );
        }
    }

    #[test]
    fn the_offset_pattern_accepts_exactly_the_u64_the_server_parses() {
        let pattern = format!("^(\\+?0*{})$", decimal_at_most(u64::MAX));
        for text in [
            "0",
            "7",
            "10",
            "42",
            "+42",
            "0042",
            "999",
            "18446744073709551615",
            "18446744073709551616",
            "18446744073709551699",
            "99999999999999999999",
            "100000000000000000000",
            "-1",
            "",
            "1e3",
            "12a",
            " 1",
            "18446744073709551614",
            "17999999999999999999",
            "18446744073709551605",
            "09",
        ] {
            assert_eq!(
                matches(&pattern, text),
                text.parse::<u64>().is_ok(),
                "{text:?}"
            );
        }
        for max in [0u64, 5, 10, 99, 100, 255, 1000, 65535] {
            let pattern = regex::Regex::new(&format!("^{}$", decimal_at_most(max))).expect("regex");
            for number in 0..=max.saturating_mul(2).max(20) {
                assert_eq!(
                    pattern.is_match(&number.to_string()),
                    number <= max,
                    "{number} <= {max}"
                );
            }
        }
    }

    #[test]
    fn every_operation_documents_the_limits_answers() {
        let document = crate::api::openapi();
        for (path, item) in &document.paths.paths {
            for operation in [&item.get, &item.post, &item.patch, &item.delete, &item.put]
                .into_iter()
                .flatten()
            {
                let statuses = &operation.responses.responses;
                if NODE_PATHS.contains(&path.as_str()) {
                    continue;
                }
                assert!(statuses.contains_key("503"), "{path}");
                assert!(statuses.contains_key("504"), "{path}");
                if operation.request_body.is_some() {
                    assert!(statuses.contains_key("413"), "{path}");
                }
            }
        }
    }
}
