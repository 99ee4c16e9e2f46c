//! Server-sent event streams read as a browser's `EventSource` would: line by line, comments
//! dropped, each read with a deadline.

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

/// How long a test waits for the next event before it fails.
pub const EVENT_DEADLINE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn message(&self) -> Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }
}

/// An open event stream, parsed line by line as the SSE spec says (comments dropped).
pub struct EventStream {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

pub fn stream_client() -> reqwest::Client {
    // No overall timeout: the stream is endless; each read has its own deadline.
    herald_client::cli::http_client::builder()
        .no_proxy()
        .build()
        .expect("build the HTTP client")
}

pub async fn open(
    base_url: &str,
    path_and_query: &str,
    last_event_id: Option<&str>,
) -> EventStream {
    let mut request = stream_client().get(format!("{base_url}{path_and_query}"));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = tokio::time::timeout(EVENT_DEADLINE, request.send())
        .await
        .expect("the stream answers in time")
        .expect("the stream request");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    EventStream {
        body: response.bytes_stream().boxed(),
        buffer: String::new(),
    }
}

impl EventStream {
    /// The stream of a response that answered 200 (the caller checked it).
    pub fn of(response: reqwest::Response) -> EventStream {
        EventStream {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event, or `None` when the stream ended. Panics past the deadline.
    pub async fn next(&mut self) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
        loop {
            if let Some(event) = take_event(&mut self.buffer) {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .expect("an event within the deadline");
            match chunk {
                Some(Ok(bytes)) => self
                    .buffer
                    .push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                Some(Err(error)) => panic!("stream read failed: {error}"),
                None => return None,
            }
        }
    }

    /// Reads until a `: keepalive` comment arrives; fails on any event before it.
    pub async fn keepalive(&mut self) {
        let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
        while !self.buffer.contains(": keepalive\n") {
            assert!(
                !self.buffer.contains("data:"),
                "an event while idle: {:?}",
                self.buffer
            );
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .expect("a keepalive within the deadline");
            match chunk {
                Some(Ok(bytes)) => self
                    .buffer
                    .push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                other => panic!("the stream ended while idle: {other:?}"),
            }
        }
    }

    /// The next `count` message events.
    pub async fn messages(&mut self, count: usize) -> Vec<SseEvent> {
        let mut events = Vec::with_capacity(count);
        while events.len() < count {
            let event = self.next().await.expect("the stream goes on");
            assert_eq!(event.event, "message", "{event:?}");
            events.push(event);
        }
        events
    }
}

/// Takes the first complete event out of `buffer`, if there is one: blocks of comments only
/// (keep-alives) are dropped, multi-line data is joined with newlines.
pub fn take_event(buffer: &mut String) -> Option<SseEvent> {
    while let Some(end) = buffer.find("\n\n") {
        let block: String = buffer.drain(..end + 2).collect();
        let mut event = SseEvent {
            event: "message".into(),
            id: None,
            data: String::new(),
        };
        let mut has_data = false;
        for line in block.lines() {
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => event.event = value.to_string(),
                "id" => event.id = Some(value.to_string()),
                "data" => {
                    if has_data {
                        event.data.push('\n');
                    }
                    event.data.push_str(value);
                    has_data = true;
                }
                _ => {}
            }
        }
        if has_data {
            return Some(event);
        }
    }
    None
}
