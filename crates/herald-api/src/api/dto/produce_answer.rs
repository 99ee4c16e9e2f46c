//! The answer of `POST /v1/topics/{topic}/messages`: one entry per message, in request order,
//! with its offset, or (a 207 partial answer) the problem of its partition's failed share.

use std::collections::HashMap;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::problem::{ApiError, Problem};
use crate::broker::{ProduceAnswer, ProducedOffset};

/// Where one produced message landed, or why it was not written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = ProducedOffset)]
pub struct ProducedOffsetDto {
    pub partition: u32,
    /// `null` with `acks=none`, and for a message with an `error`.
    pub offset: Option<u64>,
    /// Only in a 207 answer, on each message of a partition whose share failed while other
    /// partitions' were written: why (the problem the whole request would have answered).
    /// Retry exactly these messages; for `timeout` (the outcome is unknown), with an
    /// `Idempotency-Key` so the retry cannot write them twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// Answer of `POST /v1/topics/{topic}/messages`: one offset per message, in request order;
/// with status 207 when some messages have an `error` instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"offsets": [{"partition": 0, "offset": 17}]}))]
pub struct ProduceResponse {
    pub offsets: Vec<ProducedOffsetDto>,
    /// Present (`true`) when an idempotent request had been written before and nothing was
    /// written now: the offsets are the first answer's (`null` for a producer's duplicate
    /// older than the batches the partition remembers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

impl From<Vec<ProducedOffset>> for ProduceResponse {
    fn from(offsets: Vec<ProducedOffset>) -> Self {
        ProduceResponse {
            offsets: offsets
                .into_iter()
                .map(|produced| ProducedOffsetDto {
                    partition: produced.partition,
                    offset: produced.offset,
                    error: None,
                })
                .collect(),
            duplicate: false,
        }
    }
}

impl From<ProduceAnswer> for ProduceResponse {
    fn from(answer: ProduceAnswer) -> Self {
        // One problem per failed partition, rendered once (an internal one is logged once).
        let problems: HashMap<u32, Problem> = answer
            .failed
            .into_iter()
            .map(|failed| (failed.partition, ApiError::from(failed.error).problem()))
            .collect();
        let mut response = ProduceResponse {
            duplicate: answer.duplicate,
            ..ProduceResponse::from(answer.offsets)
        };
        for entry in &mut response.offsets {
            entry.error = problems.get(&entry.partition).cloned();
        }
        response
    }
}

impl ProduceResponse {
    /// Whether some messages were not written (a 207 answer).
    pub fn is_partial(&self) -> bool {
        self.offsets.iter().any(|entry| entry.error.is_some())
    }
}

/// 200, or 207 Multi-Status when some messages have an error; then with `Retry-After` when a
/// failed partition's problem asks for one.
impl IntoResponse for ProduceResponse {
    fn into_response(self) -> Response {
        if !self.is_partial() {
            return axum::Json(self).into_response();
        }
        let retry_after = self
            .offsets
            .iter()
            .filter_map(|entry| entry.error.as_ref())
            .filter_map(|problem| problem.code.retry_after_seconds())
            .max();
        let mut response = (StatusCode::MULTI_STATUS, axum::Json(self)).into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{BrokerError, FailedShare};

    #[test]
    fn duplicate_shows_only_when_true() {
        let answer = ProduceResponse::from(ProduceAnswer {
            offsets: vec![ProducedOffset {
                partition: 0,
                offset: Some(3),
            }],
            duplicate: true,
            failed: Vec::new(),
        });
        assert_eq!(
            serde_json::to_value(answer).expect("json"),
            serde_json::json!({"offsets": [{"partition": 0, "offset": 3}], "duplicate": true})
        );
    }

    #[test]
    fn offsets_answer_keeps_null() {
        let answer = ProduceResponse::from(vec![
            ProducedOffset {
                partition: 1,
                offset: Some(7),
            },
            ProducedOffset {
                partition: 0,
                offset: None,
            },
        ]);
        assert_eq!(
            serde_json::to_value(answer).expect("json"),
            serde_json::json!({"offsets": [{"partition": 1, "offset": 7}, {"partition": 0, "offset": null}]})
        );
    }

    fn partial_answer() -> ProduceAnswer {
        ProduceAnswer {
            offsets: vec![
                ProducedOffset {
                    partition: 0,
                    offset: Some(7),
                },
                ProducedOffset {
                    partition: 1,
                    offset: None,
                },
                ProducedOffset {
                    partition: 1,
                    offset: None,
                },
            ],
            duplicate: false,
            failed: vec![FailedShare {
                partition: 1,
                error: BrokerError::Overloaded("partition 1 is full".into()),
            }],
        }
    }

    #[test]
    fn a_failed_partition_gives_each_of_its_messages_the_problem() {
        let response = ProduceResponse::from(partial_answer());
        assert!(response.is_partial());
        let json = serde_json::to_value(&response).expect("json");
        assert_eq!(
            json["offsets"][0],
            serde_json::json!({"partition": 0, "offset": 7})
        );
        for entry in [&json["offsets"][1], &json["offsets"][2]] {
            assert_eq!(entry["offset"], serde_json::Value::Null);
            assert_eq!(entry["error"]["code"], "overloaded");
            assert_eq!(entry["error"]["status"], 503);
            assert_eq!(entry["error"]["type"], "urn:herald:problem:overloaded");
            assert_eq!(entry["error"]["title"], "Overloaded");
            assert_eq!(entry["error"]["detail"], "overloaded: partition 1 is full");
        }
    }

    #[tokio::test]
    async fn a_partial_answer_is_207_with_retry_after() {
        let response = ProduceResponse::from(partial_answer()).into_response();
        assert_eq!(response.status(), StatusCode::MULTI_STATUS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let whole = ProduceResponse::from(vec![ProducedOffset {
            partition: 0,
            offset: Some(1),
        }])
        .into_response();
        assert_eq!(whole.status(), StatusCode::OK);
        assert!(whole.headers().get(header::RETRY_AFTER).is_none());
    }
}
