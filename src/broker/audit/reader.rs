//! Reading the audit log back: `GET /v1/audit`.

use std::time::Duration;

use super::{AuditEvent, AUDIT_TOPIC};
use crate::broker::{Broker, BrokerError, BrokerResult, FetchRequest, OffsetSpec};

/// The most events one page answers (a page may pass it by the events of its last
/// millisecond; see [`AuditPage::next_since`]).
pub const MAX_AUDIT_LIMIT: usize = 1_000;
/// The most events one page looks at, matching or not, so a filter that matches nothing in a
/// long log answers in bounded time (and says where to continue).
const MAX_SCANNED: usize = 100_000;
/// Events read per fetch.
const CHUNK: usize = 1_000;

/// Which events to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditQuery {
    /// Events at or after this time (ms since the epoch).
    pub since_ms: i64,
    /// At most this many (1 to [`MAX_AUDIT_LIMIT`]).
    pub limit: usize,
    /// Only this principal's.
    pub principal: Option<String>,
}

/// A page of events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    pub events: Vec<AuditEvent>,
    /// The `since` of the next page. A page never ends inside a millisecond: once it is full,
    /// the events of its last millisecond are all in it, so paging by time loses none.
    pub next_since: i64,
}

impl Broker {
    /// Events of the audit log from `query.since_ms` on, oldest first (in the order they were
    /// written).
    pub async fn audit_events(&self, query: AuditQuery) -> BrokerResult<AuditPage> {
        let mut page = AuditPage {
            events: Vec::new(),
            next_since: query.since_ms,
        };
        if self.topic(AUDIT_TOPIC).is_err() {
            return Ok(page);
        }
        let limit = query.limit.clamp(1, MAX_AUDIT_LIMIT);
        let mut offset = self
            .offset_for_timestamp(AUDIT_TOPIC, 0, query.since_ms)
            .await?;
        let mut scanned = 0usize;
        let mut latest_seen: Option<i64> = None;
        // Set once the page is full: the millisecond whose remaining events still belong in it.
        let mut closing_ms: Option<i64> = None;
        'reading: loop {
            let request = FetchRequest {
                topic: AUDIT_TOPIC.to_string(),
                partition: 0,
                offset: OffsetSpec::At(offset),
                max_messages: CHUNK,
                max_wait: Duration::ZERO,
            };
            let read = match self.fetch(request).await {
                Ok(read) => read,
                // Retention removed the start between the seek and the read.
                Err(BrokerError::OffsetOutOfRange {
                    log_start_offset, ..
                }) if offset < log_start_offset => {
                    offset = log_start_offset;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if read.messages.is_empty() || read.next_offset <= offset {
                break;
            }
            offset = read.next_offset;
            for message in read.messages {
                let event: AuditEvent = match serde_json::from_slice(message.value.as_bytes()) {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(offset = message.offset, %error, "an unreadable audit event was skipped");
                        continue;
                    }
                };
                if let Some(closing) = closing_ms {
                    if event.at_ms != closing {
                        break 'reading;
                    }
                }
                scanned += 1;
                latest_seen = Some(latest_seen.map_or(event.at_ms, |at| at.max(event.at_ms)));
                let at_ms = event.at_ms;
                let matches = event.at_ms >= query.since_ms
                    && query
                        .principal
                        .as_deref()
                        .is_none_or(|principal| event.principal == principal);
                if matches {
                    page.events.push(event);
                }
                if closing_ms.is_none() && (page.events.len() >= limit || scanned >= MAX_SCANNED) {
                    closing_ms = Some(at_ms);
                }
            }
        }
        if let Some(latest) = latest_seen {
            page.next_since = page.next_since.max(latest.saturating_add(1));
        }
        Ok(page)
    }
}
