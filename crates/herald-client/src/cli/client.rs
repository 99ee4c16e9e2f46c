//! A small typed client for the parts of Herald's v1 HTTP API the CLI and the benchmarks use.
//!
//! The CLI commands are thin: everything they know about HTTP lives here, so error handling is
//! uniform. A failed request becomes a [`ProblemError`] carrying the server's RFC 9457
//! problem+json (`code`, `detail`), which is what a user needs to see to fix the call, and which
//! callers can downcast to react to a specific `code` (e.g. `topic_exists`).

use std::fmt;
use std::time::Duration;

use anyhow::Context;
use reqwest::{Method, Response, StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long to wait for a TCP connection before giving up with a clear error, rather than hanging
/// on a wrong `--server`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A failed API call: the HTTP status plus whatever problem+json the server sent.
#[derive(Debug, Clone)]
pub struct ProblemError {
    /// `GET`, `POST`, ...: part of the message so the user knows which call failed.
    pub method: Method,
    /// The request path (without the server), e.g. `/v1/topics/orders`.
    pub path: String,
    pub status: StatusCode,
    /// The stable snake_case error code, when the server sent problem+json.
    pub code: Option<String>,
    pub title: Option<String>,
    pub detail: Option<String>,
    /// The whole body as JSON (`Value::Null` if it was not JSON); extension members such as the
    /// bounds of `offset_out_of_range` are read from here.
    pub body: Value,
}

impl ProblemError {
    /// Builds the error from a non-2xx response, consuming its body.
    pub async fn from_response(method: Method, response: Response) -> Self {
        let status = response.status();
        let path = response.url().path().to_string();
        let text = response.text().await.unwrap_or_default();
        Self::from_parts(method, path, status, &text)
    }

    /// The pure part of [`from_response`](Self::from_response): parses a problem+json body if
    /// there is one, and otherwise keeps (a prefix of) the plain text as the detail.
    pub fn from_parts(method: Method, path: String, status: StatusCode, text: &str) -> Self {
        let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_string);
        let (code, title, mut detail) = (field("code"), field("title"), field("detail"));
        if body.is_null() && !text.trim().is_empty() {
            detail = Some(text.trim().chars().take(500).collect());
        }
        ProblemError {
            method,
            path,
            status,
            code,
            title,
            detail,
            body,
        }
    }

    /// The problem's `code`, or `""` when the server sent none.
    pub fn code(&self) -> &str {
        self.code.as_deref().unwrap_or("")
    }
}

impl fmt::Display for ProblemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} failed: HTTP {}",
            self.method, self.path, self.status
        )?;
        if let Some(code) = &self.code {
            write!(f, " ({code})")?;
        }
        match (&self.detail, &self.title) {
            (Some(detail), _) => write!(f, ": {detail}"),
            (None, Some(title)) => write!(f, ": {title}"),
            (None, None) => Ok(()),
        }
    }
}

impl std::error::Error for ProblemError {}

/// The `acks` query parameter of a produce request.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// Acknowledged once a quorum of replicas has the messages.
    #[default]
    All,
    /// Acknowledged once the partition leader has them.
    Leader,
    /// Not acknowledged at all (offsets come back as `null`).
    None,
}

impl Acks {
    pub fn as_str(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::Leader => "leader",
            Acks::None => "none",
        }
    }
}

/// Where to start reading a partition: the `offset` query parameter of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    At(u64),
}

impl OffsetSpec {
    /// The query-string form: `earliest`, `latest` or the number.
    pub fn to_query(self) -> String {
        match self {
            OffsetSpec::Earliest => "earliest".to_string(),
            OffsetSpec::Latest => "latest".to_string(),
            OffsetSpec::At(n) => n.to_string(),
        }
    }
}

impl std::str::FromStr for OffsetSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "earliest" | "beginning" => Ok(OffsetSpec::Earliest),
            "latest" | "end" => Ok(OffsetSpec::Latest),
            other => other.parse::<u64>().map(OffsetSpec::At).map_err(|_| {
                format!("expected `earliest`, `latest` or an offset number, got `{other}`")
            }),
        }
    }
}

/// One partition as `GET /v1/topics/{topic}` describes it. Lenient (`default`) so a server that
/// adds or omits a field does not break the CLI.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default)]
pub struct PartitionInfo {
    pub partition: u32,
    pub leader: Option<Value>,
    pub replicas: Vec<Value>,
    pub in_sync: Vec<Value>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

/// A topic as the API returns it.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub replication_factor: u16,
    pub config: Value,
}

/// The body of `POST /v1/topics`.
#[derive(Debug, Clone, Serialize)]
pub struct CreateTopic {
    pub name: String,
    pub partitions: u32,
    /// None: the cluster's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u16>,
    pub config: serde_json::Map<String, Value>,
}

/// One `{"partition","offset"}` of a produce answer; `offset` is `null` with `acks=none`, and
/// for a message that was not written, which then has an `error` (a 207 partial answer).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ProducedOffset {
    pub partition: u32,
    pub offset: Option<u64>,
    /// The problem (`type`, `title`, `status`, `detail`, `code`) of the message's partition,
    /// when its share was not written.
    #[serde(default)]
    pub error: Option<Value>,
}

impl ProducedOffset {
    /// `code: detail` of the entry's error, when it has one.
    pub fn error_text(&self) -> Option<String> {
        let error = self.error.as_ref()?;
        let field = |name: &str| error.get(name).and_then(Value::as_str).unwrap_or("");
        Some(format!("{}: {}", field("code"), field("detail")))
    }
}

/// The answer to a produce request.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ProduceResponse {
    #[serde(default)]
    pub offsets: Vec<ProducedOffset>,
}

/// The answer to a batch produce (`application/vnd.herald.batch`).
#[derive(Debug, Clone, Deserialize)]
pub struct BatchProduceResponse {
    pub partition: u32,
    pub base_offset: Option<u64>,
    pub record_count: u32,
    /// An idempotent producer's batch whose sequences were written before: nothing was
    /// written now.
    #[serde(default)]
    pub duplicate: bool,
}

/// The answer to a partition read. Messages stay raw JSON: the CLI prints them as the server sent
/// them.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchResponse {
    #[serde(default)]
    pub messages: Vec<Value>,
    pub next_offset: u64,
    #[serde(default)]
    pub high_watermark: u64,
    #[serde(default)]
    pub log_start_offset: u64,
}

/// The HTTP version an [`Api`] speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpProtocol {
    /// HTTP/1.1: one request at a time per connection (the CLI's default).
    Http1,
    /// HTTP/2 from the first byte: h2c with prior knowledge on `http://` (a Herald node
    /// answers it on its plaintext port), `h2` by ALPN on `https://`.
    Http2,
}

/// A connection to one Herald server.
///
/// Each `Api` built owns its own `reqwest::Client`, hence its own keep-alive connection pool
/// (clones share it): the benchmark builds one per worker to give every worker its own
/// HTTP/1.1 connection, and clones one for workers that share an HTTP/2 connection.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: Url,
    /// The bearer token every request carries (the CLI's `--token` or client credentials).
    tokens: Option<std::sync::Arc<super::credentials::TokenSource>>,
    /// The CA certificates trusted for `https://` (`--ca-cert`), for the WebSocket too.
    ca_certs: Option<std::sync::Arc<Vec<u8>>>,
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base.as_str())
            .field("authenticated", &self.tokens.is_some())
            .finish()
    }
}

impl Api {
    /// A client for `server` (e.g. `http://127.0.0.1:8080` or `https://herald:8443`), with the
    /// process's credentials and trusted CAs (`credentials::configure`).
    pub fn new(server: &str) -> anyhow::Result<Self> {
        Self::with_protocol(server, HttpProtocol::Http1)
    }

    /// A client for `server` speaking `protocol`. Clones share one connection pool: with
    /// HTTP/2 that is one connection, their requests multiplexed on it as streams.
    pub fn with_protocol(server: &str, protocol: HttpProtocol) -> anyhow::Result<Self> {
        let base = parse_server(server)?;
        let settings = super::credentials::settings();
        let builder = super::http_client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .no_proxy();
        let builder = match protocol {
            HttpProtocol::Http1 => builder.http1_only(),
            HttpProtocol::Http2 => builder.http2_prior_knowledge(),
        };
        let http =
            super::credentials::trust(builder, settings.ca_certs.as_deref().map(Vec::as_slice))?
                .build()
                .context("could not build the HTTP client")?;
        Ok(Api {
            http,
            base,
            tokens: settings.tokens,
            ca_certs: settings.ca_certs,
        })
    }

    /// The `Authorization` header value requests carry now, if the CLI authenticates.
    pub async fn authorization(&self) -> anyhow::Result<Option<String>> {
        match &self.tokens {
            Some(tokens) => Ok(Some(format!("Bearer {}", tokens.bearer().await?))),
            None => Ok(None),
        }
    }

    /// `request` with the `Authorization` header, for callers (the benchmark) that send
    /// requests themselves rather than through [`send`](Self::send). Without credentials, or
    /// when no token can be had (the request is then refused by the server, which says why),
    /// the request is unchanged.
    pub async fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.authorization().await {
            Ok(Some(authorization)) => {
                request.header(reqwest::header::AUTHORIZATION, authorization)
            }
            Ok(None) => request,
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "no token for the request");
                request
            }
        }
    }

    /// The CA certificates (PEM) trusted for `https://`, when `--ca-cert` named them.
    pub fn ca_certs(&self) -> Option<&[u8]> {
        self.ca_certs.as_deref().map(Vec::as_slice)
    }

    /// The underlying HTTP client, for callers (the benchmark) that send prebuilt bodies.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The URL of an API path given as segments; each segment is percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends a request and turns a non-2xx answer into a [`ProblemError`], and a transport failure
    /// into an error naming the server.
    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Response> {
        let mut request = request.build().context("could not build the request")?;
        if let Some(authorization) = self.authorization().await? {
            let value = reqwest::header::HeaderValue::from_str(&authorization)
                .context("the token is not a valid header value")?;
            request
                .headers_mut()
                .insert(reqwest::header::AUTHORIZATION, value);
        }
        let method = request.method().clone();
        let shown = format!("{} {}", method, request.url());
        let response = self
            .http
            .execute(request)
            .await
            .with_context(|| format!("{shown}: could not reach the server {}", self.base))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(ProblemError::from_response(method, response).await.into())
        }
    }

    pub(crate) async fn send_json<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let response = self.send(request).await?;
        let path = response.url().path().to_string();
        response
            .json::<T>()
            .await
            .with_context(|| format!("{path}: the server's answer is not the expected JSON"))
    }

    /// `POST /v1/topics`.
    pub async fn create_topic(&self, spec: &CreateTopic) -> anyhow::Result<TopicInfo> {
        self.send_json(self.http.post(self.url(&["v1", "topics"])).json(spec))
            .await
    }

    /// `GET /v1/topics`, page by page (`TOPICS_PAGE` per request), so a cluster with tens of
    /// thousands of topics is listed in bounded answers.
    pub async fn list_topics(&self) -> anyhow::Result<Vec<TopicInfo>> {
        #[derive(Deserialize)]
        struct Topics {
            topics: Vec<TopicInfo>,
            #[serde(default)]
            next_page_token: Option<String>,
        }
        const TOPICS_PAGE: &str = "1000";
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = self.url(&["v1", "topics"]);
            url.query_pairs_mut().append_pair("limit", TOPICS_PAGE);
            if let Some(token) = &token {
                url.query_pairs_mut().append_pair("page_token", token);
            }
            let page: Topics = self.send_json(self.http.get(url)).await?;
            all.extend(page.topics);
            match page.next_page_token {
                Some(next) if Some(&next) != token.as_ref() => token = Some(next),
                _ => return Ok(all),
            }
        }
    }

    /// `GET /v1/topics/{topic}` as the raw JSON the server sent (for `describe`).
    pub async fn get_topic_json(&self, topic: &str) -> anyhow::Result<Value> {
        self.send_json(self.http.get(self.url(&["v1", "topics", topic])))
            .await
    }

    /// `GET /v1/topics/{topic}`.
    pub async fn get_topic(&self, topic: &str) -> anyhow::Result<TopicInfo> {
        self.send_json(self.http.get(self.url(&["v1", "topics", topic])))
            .await
    }

    /// `DELETE /v1/topics/{topic}`.
    pub async fn delete_topic(&self, topic: &str) -> anyhow::Result<()> {
        self.send(self.http.delete(self.url(&["v1", "topics", topic])))
            .await?;
        Ok(())
    }

    /// The URL of `POST /v1/topics/{topic}/messages?acks=...`.
    pub fn produce_url(&self, topic: &str, acks: Acks) -> Url {
        let mut url = self.url(&["v1", "topics", topic, "messages"]);
        url.query_pairs_mut().append_pair("acks", acks.as_str());
        url
    }

    /// Where a batch in the stored layout is produced to one partition.
    pub fn produce_batch_url(&self, topic: &str, partition: u32, acks: Acks) -> Url {
        let partition = partition.to_string();
        let mut url = self.url(&["v1", "topics", topic, "partitions", &partition, "messages"]);
        url.query_pairs_mut().append_pair("acks", acks.as_str());
        url
    }

    /// Produces one batch in the stored layout to `partition`.
    pub async fn produce_batch(
        &self,
        topic: &str,
        partition: u32,
        acks: Acks,
        batch: bytes::Bytes,
    ) -> anyhow::Result<BatchProduceResponse> {
        let request = self
            .http
            .post(self.produce_batch_url(topic, partition, acks))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/vnd.herald.batch",
            )
            .body(batch);
        self.send_json(request).await
    }

    /// Produces a JSON batch (`body` is `{"messages":[...]}`).
    pub async fn produce(
        &self,
        topic: &str,
        acks: Acks,
        body: &Value,
    ) -> anyhow::Result<ProduceResponse> {
        self.send_json(self.http.post(self.produce_url(topic, acks)).json(body))
            .await
    }

    /// The URL of a partition read.
    pub fn fetch_url(
        &self,
        topic: &str,
        partition: u32,
        offset: OffsetSpec,
        max_messages: u32,
        max_wait_ms: u64,
    ) -> Url {
        let partition = partition.to_string();
        let mut url = self.url(&["v1", "topics", topic, "partitions", &partition, "messages"]);
        url.query_pairs_mut()
            .append_pair("offset", &offset.to_query())
            .append_pair("max_messages", &max_messages.to_string())
            .append_pair("max_wait_ms", &max_wait_ms.to_string());
        url
    }

    /// `GET /v1/topics/{topic}/partitions/{partition}/messages`.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: OffsetSpec,
        max_messages: u32,
        max_wait_ms: u64,
    ) -> anyhow::Result<FetchResponse> {
        let url = self.fetch_url(topic, partition, offset, max_messages, max_wait_ms);
        // A long poll legitimately takes `max_wait_ms`; give the server that plus slack.
        let timeout = Duration::from_millis(max_wait_ms) + Duration::from_secs(30);
        self.send_json(self.http.get(url).timeout(timeout)).await
    }

    /// A partition read whose values in the Confluent wire format come back decoded as JSON
    /// (`decode=json`, docs/schemas.md).
    pub async fn fetch_decoded(
        &self,
        topic: &str,
        partition: u32,
        offset: OffsetSpec,
        max_messages: u32,
    ) -> anyhow::Result<FetchResponse> {
        let mut url = self.fetch_url(topic, partition, offset, max_messages, 0);
        url.query_pairs_mut().append_pair("decode", "json");
        self.send_json(self.http.get(url).timeout(Duration::from_secs(30)))
            .await
    }
}

/// Parses `--server` (`http://` or `https://`), accepting a bare `host:port` as
/// `http://host:port`.
pub fn parse_server(server: &str) -> anyhow::Result<Url> {
    let text = server.trim();
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let url = Url::parse(&with_scheme).with_context(|| {
        format!("`{server}` is not a valid server URL (e.g. http://127.0.0.1:8080)")
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => anyhow::bail!(
            "server URL `{server}` uses `{other}`; this client speaks http:// and https://"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_json_is_shown_with_code_and_detail() {
        let body = r#"{"type":"about:blank","title":"Not Found","status":404,
            "detail":"topic `x` does not exist","code":"topic_not_found"}"#;
        let problem = ProblemError::from_parts(
            Method::GET,
            "/v1/topics/x".into(),
            StatusCode::NOT_FOUND,
            body,
        );
        assert_eq!(problem.code(), "topic_not_found");
        assert_eq!(
            problem.to_string(),
            "GET /v1/topics/x failed: HTTP 404 Not Found (topic_not_found): topic `x` does not exist"
        );
    }

    #[test]
    fn plain_text_errors_keep_the_text() {
        let problem = ProblemError::from_parts(
            Method::POST,
            "/v1/topics".into(),
            StatusCode::BAD_GATEWAY,
            "upstream down\n",
        );
        assert_eq!(problem.code(), "");
        assert!(
            problem.to_string().ends_with(": upstream down"),
            "{problem}"
        );
    }

    #[test]
    fn offset_specs_parse() {
        assert_eq!("earliest".parse::<OffsetSpec>(), Ok(OffsetSpec::Earliest));
        assert_eq!("latest".parse::<OffsetSpec>(), Ok(OffsetSpec::Latest));
        assert_eq!("42".parse::<OffsetSpec>(), Ok(OffsetSpec::At(42)));
        assert!("-1".parse::<OffsetSpec>().is_err());
        assert!("soon".parse::<OffsetSpec>().is_err());
        assert_eq!(OffsetSpec::At(7).to_query(), "7");
    }

    #[test]
    fn server_urls_are_normalised() {
        assert_eq!(
            parse_server("localhost:8080").unwrap().as_str(),
            "http://localhost:8080/"
        );
        assert!(parse_server("https://example.com").is_ok());
        assert!(parse_server("ftp://example.com").is_err());
        let api = Api::new("http://127.0.0.1:8080/").unwrap();
        assert_eq!(
            api.url(&["v1", "topics", "a.b"]).as_str(),
            "http://127.0.0.1:8080/v1/topics/a.b"
        );
        let url = api.fetch_url("t", 3, OffsetSpec::Earliest, 10, 0);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/v1/topics/t/partitions/3/messages?offset=earliest&max_messages=10&max_wait_ms=0"
        );
        assert_eq!(
            api.produce_url("t", Acks::Leader).as_str(),
            "http://127.0.0.1:8080/v1/topics/t/messages?acks=leader"
        );
    }
}
