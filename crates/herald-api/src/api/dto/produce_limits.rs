//! The produce body's count limits, enforced while the JSON is read rather than after.
//!
//! A body within `max_body_bytes` can still hold a million tiny messages (`{"value":0},` is 12
//! bytes) or a million empty headers (`"":"",` is 6): decoded, each costs far more memory than
//! its bytes, so counting after decoding lets a 16 MiB request allocate hundreds of MiB. These
//! visitors stop at [`MAX_MESSAGES_PER_REQUEST`] messages and [`MAX_HEADERS_PER_MESSAGE`]
//! headers: past the cap the parse fails (400) without decoding the rest.

use std::fmt;

use serde::de::{Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;

use crate::broker::{MAX_HEADERS_PER_MESSAGE, MAX_MESSAGES_PER_REQUEST};

/// Reads the `messages` array, at most [`MAX_MESSAGES_PER_REQUEST`] of them: one more is
/// skipped without being decoded, and refused.
pub fn deserialize_messages<'de, D, M>(deserializer: D) -> Result<Vec<M>, D::Error>
where
    D: Deserializer<'de>,
    M: serde::Deserialize<'de>,
{
    struct MessagesVisitor<M>(std::marker::PhantomData<M>);

    impl<'de, M: serde::Deserialize<'de>> Visitor<'de> for MessagesVisitor<M> {
        type Value = Vec<M>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            write!(
                formatter,
                "an array of at most {MAX_MESSAGES_PER_REQUEST} messages"
            )
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut messages = Vec::new();
            while messages.len() < MAX_MESSAGES_PER_REQUEST {
                match seq.next_element()? {
                    Some(message) => messages.push(message),
                    None => return Ok(messages),
                }
            }
            if seq.next_element::<IgnoredAny>()?.is_some() {
                return Err(A::Error::custom(format!(
                    "messages holds more than {MAX_MESSAGES_PER_REQUEST} messages, the most one produce request carries; send them in several requests"
                )));
            }
            Ok(messages)
        }
    }

    deserializer.deserialize_seq(MessagesVisitor(std::marker::PhantomData))
}

/// Reads `{"name": "value", ...}` into pairs, in the order the client wrote them, at most
/// [`MAX_HEADERS_PER_MESSAGE`] of them; `null` is no headers. Header values must be strings.
pub fn deserialize_bounded_headers<'de, D>(
    deserializer: D,
) -> Result<Vec<(String, String)>, D::Error>
where
    D: Deserializer<'de>,
{
    struct HeadersVisitor;

    impl<'de> Visitor<'de> for HeadersVisitor {
        type Value = Vec<(String, String)>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            write!(
                formatter,
                "an object of at most {MAX_HEADERS_PER_MESSAGE} string header values"
            )
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut headers = Vec::new();
            while let Some(name) = map.next_key::<String>()? {
                if headers.len() == MAX_HEADERS_PER_MESSAGE {
                    return Err(A::Error::custom(format!(
                        "a message carries at most {MAX_HEADERS_PER_MESSAGE} headers"
                    )));
                }
                let value = map.next_value::<String>()?;
                headers.push((name, value));
            }
            Ok(headers)
        }
    }

    deserializer.deserialize_any(HeadersVisitor)
}

/// The OpenAPI schema of a message's `headers`: an object of string values (or `null`), with
/// at most [`MAX_HEADERS_PER_MESSAGE`] properties, for `#[schema(schema_with = ...)]`.
pub fn headers_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let string = || ObjectBuilder::new().schema_type(Type::String).build();
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .description(Some(format!(
            "String header values, at most {MAX_HEADERS_PER_MESSAGE}."
        )))
        .additional_properties(Some(utoipa::openapi::RefOr::T(string().into())))
        .property_names(Some(string()))
        .max_properties(Some(MAX_HEADERS_PER_MESSAGE))
        .into()
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use serde::Deserialize;

    use super::super::produce::ProduceRequest;
    use super::*;

    /// A reader that counts the bytes the parser took from it.
    struct Counting<'a> {
        bytes: &'a [u8],
        read: Arc<AtomicUsize>,
    }

    impl Read for Counting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let read = self.bytes.read(buf)?;
            self.read.fetch_add(read, Ordering::Relaxed);
            Ok(read)
        }
    }

    /// Parses `body` as a produce request from a reader; the result and how many bytes were
    /// read (serde_json reads byte by byte, so that is where it stopped).
    fn parse_counting(body: &[u8]) -> (Result<ProduceRequest, serde_json::Error>, usize) {
        let read = Arc::new(AtomicUsize::new(0));
        let reader = Counting {
            bytes: body,
            read: read.clone(),
        };
        let mut deserializer = serde_json::Deserializer::from_reader(reader);
        let parsed = ProduceRequest::deserialize(&mut deserializer);
        (parsed, read.load(Ordering::Relaxed))
    }

    fn messages_body(count: usize) -> String {
        let mut body = String::from(r#"{"messages":["#);
        for index in 0..count {
            if index > 0 {
                body.push(',');
            }
            body.push_str(r#"{"value":0}"#);
        }
        body.push_str("]}");
        body
    }

    /// The document declares the caps the decoder enforces (the derive takes literals).
    #[test]
    fn the_openapi_document_declares_the_caps() {
        let document = serde_json::to_value(crate::api::openapi()).expect("document as JSON");
        let schemas = &document["components"]["schemas"];
        let messages = &schemas["ProduceRequest"]["properties"]["messages"];
        assert_eq!(messages["maxItems"], MAX_MESSAGES_PER_REQUEST);
        assert_eq!(messages["minItems"], 1);
        let headers = &schemas["ProduceMessage"]["properties"]["headers"];
        assert_eq!(headers["maxProperties"], MAX_HEADERS_PER_MESSAGE);
    }

    #[test]
    fn the_cap_itself_is_accepted() {
        let body = messages_body(MAX_MESSAGES_PER_REQUEST);
        let (parsed, _) = parse_counting(body.as_bytes());
        assert_eq!(
            parsed.expect("at the cap").messages.len(),
            MAX_MESSAGES_PER_REQUEST
        );
    }

    /// A body of 300,000 messages is refused after reading the first 100,001 of them: the
    /// rest is never read, so what the parse allocates is bounded by the cap, not the body.
    #[test]
    fn reading_stops_at_the_message_cap() {
        let message = r#"{"value":0},"#.len();
        let body = messages_body(3 * MAX_MESSAGES_PER_REQUEST);
        let (parsed, read) = parse_counting(body.as_bytes());
        let error = parsed.expect_err("over the cap").to_string();
        assert!(error.contains("more than 100000 messages"), "{error}");
        // The messages up to the first over the cap, and the separator after it.
        let through_one_more =
            r#"{"messages":["#.len() + (MAX_MESSAGES_PER_REQUEST + 1) * message + 1;
        assert!(
            read <= through_one_more,
            "read {read} bytes of {}, more than the {through_one_more} up to the first message over the cap",
            body.len()
        );
    }

    #[test]
    fn one_message_over_the_cap_is_refused() {
        let body = messages_body(MAX_MESSAGES_PER_REQUEST + 1);
        let (parsed, _) = parse_counting(body.as_bytes());
        assert!(parsed.is_err());
    }

    fn headers_body(count: usize) -> String {
        let headers: Vec<String> = (0..count)
            .map(|index| format!(r#""h{index}":"""#))
            .collect();
        format!(
            r#"{{"messages":[{{"value":1,"headers":{{{}}}}}]}}"#,
            headers.join(",")
        )
    }

    #[test]
    fn headers_up_to_the_cap_are_kept_in_order() {
        let body = headers_body(MAX_HEADERS_PER_MESSAGE);
        let (parsed, _) = parse_counting(body.as_bytes());
        let request = parsed.expect("at the cap");
        let headers = &request.messages[0].headers;
        assert_eq!(headers.len(), MAX_HEADERS_PER_MESSAGE);
        assert_eq!(headers[0], ("h0".to_string(), String::new()));
        assert_eq!(headers[999].0, "h999");
    }

    /// A million empty headers are refused at the 1001st: the rest is never read.
    #[test]
    fn reading_stops_at_the_header_cap() {
        let body = format!(
            r#"{{"messages":[{{"value":1,"headers":{{{}}}}}]}}"#,
            vec![r#""":"""#; 1_000_000].join(",")
        );
        let (parsed, read) = parse_counting(body.as_bytes());
        let error = parsed.expect_err("over the cap").to_string();
        assert!(error.contains("at most 1000 headers"), "{error}");
        assert!(read < 64 * 1024, "read {read} bytes of {}", body.len());
    }
}
