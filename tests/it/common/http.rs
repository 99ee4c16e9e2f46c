//! Plain HTTP to one node: the test client, GET/POST/PATCH/DELETE that fail the test (with the
//! node's log) on a transport error, reading an answer as JSON, waiting for a status, and the
//! check that an error answer is a well-formed problem+json. Everything that talks to a single
//! node goes through these.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::Value;

use super::{poll, Server, LEADER_DEADLINE};

/// The longest any single HTTP request of a test may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The content type of every error answer (problem details).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Where every HTTP client of the tests starts (so they are all built alike).
pub fn client_builder() -> reqwest::ClientBuilder {
    herald_client::cli::http_client::builder()
}

/// The HTTP client of the tests: no proxy, and no request longer than [`REQUEST_TIMEOUT`].
pub fn client() -> reqwest::Client {
    client_builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

impl Server {
    pub async fn get(&self, path: &str) -> Response {
        self.http_client()
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|err| self.fail(&format!("GET {path}: {err}")))
    }

    pub async fn delete(&self, path: &str) -> Response {
        self.http_client()
            .delete(self.url(path))
            .send()
            .await
            .unwrap_or_else(|err| self.fail(&format!("DELETE {path}: {err}")))
    }

    /// POSTs a JSON value.
    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        self.post_raw(path, "application/json", body.to_string().into_bytes())
            .await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> Response {
        self.http_client()
            .put(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|err| self.fail(&format!("PUT {path}: {err}")))
    }

    pub async fn patch_json(&self, path: &str, body: &Value) -> Response {
        self.http_client()
            .patch(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|err| self.fail(&format!("PATCH {path}: {err}")))
    }

    /// POSTs bytes with the given content type, exactly as given.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<Vec<u8>>,
    ) -> Response {
        self.http_client()
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body.into())
            .send()
            .await
            .unwrap_or_else(|err| self.fail(&format!("POST {path}: {err}")))
    }

    /// Reads a response as (status, JSON); panics with the body when it is not JSON.
    pub async fn json(&self, response: Response) -> (StatusCode, Value) {
        let status = response.status();
        let text = response.text().await.expect("read the response body");
        if text.is_empty() {
            return (status, Value::Null);
        }
        match serde_json::from_str(&text) {
            Ok(value) => (status, value),
            Err(err) => self.fail(&format!("answer {status} is not JSON ({err}): {text}")),
        }
    }

    /// Waits until `GET path` answers `status`.
    pub async fn wait_for_status(&self, path: &str, status: StatusCode) {
        let answered = poll(LEADER_DEADLINE, Duration::from_millis(100), || async {
            let got = self.get(path).await.status();
            if got == status {
                Ok(())
            } else {
                Err(got.to_string())
            }
        })
        .await;
        if let Err(got) = answered {
            self.fail(&format!(
                "GET {path} answered {got}, not {status}, for {LEADER_DEADLINE:?}"
            ));
        }
    }

    /// Asserts that a response is a problem+json with this status and code; returns the body.
    pub async fn expect_problem(
        &self,
        response: Response,
        status: StatusCode,
        code: &str,
    ) -> Value {
        let got = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = response.text().await.unwrap_or_default();
        if got != status {
            self.fail(&format!("expected {status} {code}, got {got}: {text}"));
        }
        if !content_type.starts_with(PROBLEM_JSON) {
            self.fail(&format!(
                "expected content-type {PROBLEM_JSON} for {status} {code}, got {content_type:?}: {text}"
            ));
        }
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| self.fail(&format!("problem is not JSON ({err}): {text}")));
        if body["code"] != code {
            self.fail(&format!("expected code {code:?}, got {body}"));
        }
        if body["status"] != status.as_u16() {
            self.fail(&format!(
                "problem status should be {}, got {body}",
                status.as_u16()
            ));
        }
        for field in ["type", "title", "detail"] {
            if !body[field].is_string() {
                self.fail(&format!("problem lacks a string {field:?}: {body}"));
            }
        }
        body
    }
}
