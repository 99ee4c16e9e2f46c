//! Reading the audit log back: `GET /v1/audit`.
//!
//! Pages follow the log's positions (offsets in `__audit`), not the events' own times: an
//! event's `at_ms` is the clock of the node that recorded it, and one node's clock ahead of the
//! others would otherwise carry a time cursor past events written after it. `since` only says
//! where a reader starts (through the topic's time index) and which events it wants.

use crate::broker_core::Core;
use crate::FetchService;
use std::sync::Arc;

use std::time::Duration;

use super::{AuditEvent, AUDIT_TOPIC};
use crate::{BrokerError, BrokerResult, FetchRequest, OffsetSpec};

/// The most events one page answers (a page continued by time may pass it by the events of its
/// last millisecond; see [`AuditPage::next_since`]).
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
    /// Continue at this position of the log (a page's `next_offset`) instead of seeking
    /// `since_ms` in the time index; the page then holds exactly up to `limit` events.
    pub from_offset: Option<u64>,
}

/// A page of events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    pub events: Vec<AuditEvent>,
    /// The `since` of the next page, from the events' own times. A page started by time never
    /// ends inside a millisecond (once it is full, the events of its last millisecond are all
    /// in it). Only as good as the recording nodes' clocks: page by `next_offset`.
    pub next_since: i64,
    /// Where the next page starts: the position right after the last event this page looked
    /// at. Continuing there loses and repeats nothing, whatever the events' times say.
    pub next_offset: u64,
}

/// Reading the audit log (`__audit`), page by page; the node's writer is [`super::AuditLog`].
#[derive(Clone)]
pub struct AuditService {
    core: Arc<Core>,
    fetch: FetchService,
}

impl AuditService {
    pub(crate) fn new(core: Arc<Core>, fetch: FetchService) -> AuditService {
        AuditService { core, fetch }
    }

    /// Events of the audit log from `query.from_offset` (or `query.since_ms`) on, oldest
    /// first (in the order they were written).
    pub async fn audit_events(&self, query: AuditQuery) -> BrokerResult<AuditPage> {
        let start = match query.from_offset {
            Some(offset) => offset,
            None if self.core.topic(AUDIT_TOPIC).is_ok() => {
                self.fetch
                    .offset_for_timestamp(AUDIT_TOPIC, 0, query.since_ms)
                    .await?
            }
            None => 0,
        };
        let mut pager = Pager::new(&query, start);
        if self.core.topic(AUDIT_TOPIC).is_err() {
            return Ok(pager.finish());
        }
        let mut offset = start;
        'reading: loop {
            let request = FetchRequest {
                topic: AUDIT_TOPIC.to_string(),
                partition: 0,
                offset: OffsetSpec::At(offset),
                max_messages: CHUNK,
                max_wait: Duration::ZERO,
            };
            let read = match self.fetch.fetch(request).await {
                Ok(read) => read,
                // Retention removed the start (before the seek, or between it and the read).
                Err(BrokerError::OffsetOutOfRange {
                    log_start_offset, ..
                }) if offset < log_start_offset => {
                    offset = log_start_offset;
                    pager.skip_to(offset);
                    continue;
                }
                // A position past the end (a cursor from before the topic was recreated):
                // nothing there yet.
                Err(BrokerError::OffsetOutOfRange { high_watermark, .. })
                    if offset > high_watermark =>
                {
                    break;
                }
                Err(error) => return Err(error),
            };
            if read.messages.is_empty() || read.next_offset <= offset {
                break;
            }
            offset = read.next_offset;
            for message in read.messages {
                let event = match serde_json::from_slice(message.value.as_bytes()) {
                    Ok(event) => Some(event),
                    Err(error) => {
                        tracing::warn!(offset = message.offset, %error, "an unreadable audit event was skipped");
                        None
                    }
                };
                if !pager.offer(message.offset, event) {
                    break 'reading;
                }
            }
            pager.skip_to(offset);
        }
        Ok(pager.finish())
    }
}

/// Builds a page from the events read in log order; knows when it is full and where the next
/// page starts. Pure, so its rules are tested without a log.
struct Pager {
    limit: usize,
    since_ms: i64,
    principal: Option<String>,
    /// Continued by position: the page ends exactly at `limit`. Otherwise (started by time) it
    /// takes in the rest of its last millisecond, for readers that page by `next_since`.
    by_position: bool,
    events: Vec<AuditEvent>,
    scanned: usize,
    latest_seen: Option<i64>,
    /// Set once a page started by time is full: the millisecond whose remaining events still
    /// belong in it.
    closing_ms: Option<i64>,
    next_offset: u64,
}

impl Pager {
    fn new(query: &AuditQuery, start: u64) -> Pager {
        Pager {
            limit: query.limit.clamp(1, MAX_AUDIT_LIMIT),
            since_ms: query.since_ms,
            principal: query.principal.clone(),
            by_position: query.from_offset.is_some(),
            events: Vec::new(),
            scanned: 0,
            latest_seen: None,
            closing_ms: None,
            next_offset: start,
        }
    }

    /// Takes the event at `offset` (`None`: unreadable, skipped); false once the page is done
    /// (the event was then not taken, or it completed the page).
    fn offer(&mut self, offset: u64, event: Option<AuditEvent>) -> bool {
        let Some(event) = event else {
            self.next_offset = offset + 1;
            return true;
        };
        if let Some(closing) = self.closing_ms {
            if event.at_ms != closing {
                return false;
            }
        }
        self.next_offset = offset + 1;
        self.scanned += 1;
        let at_ms = event.at_ms;
        self.latest_seen = Some(self.latest_seen.map_or(at_ms, |seen| seen.max(at_ms)));
        let matches = at_ms >= self.since_ms
            && self
                .principal
                .as_deref()
                .is_none_or(|principal| event.principal == principal);
        if matches {
            self.events.push(event);
        }
        let full = self.events.len() >= self.limit || self.scanned >= MAX_SCANNED;
        if full && self.by_position {
            return false;
        }
        if full && self.closing_ms.is_none() {
            self.closing_ms = Some(at_ms);
        }
        true
    }

    /// Everything before `offset` was looked at (a compaction gap, or the log's new start).
    fn skip_to(&mut self, offset: u64) {
        if self.closing_ms.is_none() {
            self.next_offset = self.next_offset.max(offset);
        }
    }

    fn finish(self) -> AuditPage {
        let next_since = match self.latest_seen {
            Some(latest) => self.since_ms.max(latest.saturating_add(1)),
            None => self.since_ms,
        };
        AuditPage {
            events: self.events,
            next_since,
            next_offset: self.next_offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_ms: i64, principal: &str) -> AuditEvent {
        AuditEvent {
            at_ms,
            principal: principal.into(),
            roles: None,
            action: "create topic".into(),
            method: "POST".into(),
            path: "/v1/topics".into(),
            resource: "topic:x".into(),
            allowed: true,
            status: 201,
            remote_addr: None,
            request_id: format!("{at_ms}"),
            reason: None,
            node_id: 1,
            count: None,
            since_ms: None,
        }
    }

    fn query(limit: usize, from_offset: Option<u64>) -> AuditQuery {
        AuditQuery {
            since_ms: 0,
            limit,
            principal: None,
            from_offset,
        }
    }

    /// Reads `log` (offset = index) from `start` into one page.
    fn page(log: &[AuditEvent], query: &AuditQuery, start: u64) -> AuditPage {
        let mut pager = Pager::new(query, start);
        for (offset, event) in log.iter().enumerate().skip(start as usize) {
            if !pager.offer(offset as u64, Some(event.clone())) {
                break;
            }
        }
        pager.finish()
    }

    /// An event from a node whose clock is a year ahead sits between ordinary ones: paging by
    /// position reaches every event after it, where paging by time jumps past them.
    #[test]
    fn paging_by_position_is_not_misled_by_an_event_from_the_future() {
        let year_ms = 365 * 24 * 3_600_000;
        let log = vec![
            event(1_000, "a"),
            event(1_000 + year_ms, "skewed"),
            event(1_001, "b"),
            event(1_002, "c"),
        ];
        let mut seen = Vec::new();
        let mut offset = 0;
        for _ in 0..log.len() + 1 {
            let page = page(&log, &query(1, Some(offset)), offset);
            if page.events.is_empty() {
                assert_eq!(page.next_offset, offset);
                break;
            }
            assert_eq!(page.events.len(), 1);
            assert_eq!(page.next_offset, offset + 1);
            offset = page.next_offset;
            seen.extend(page.events);
        }
        assert_eq!(seen, log);
        // By time, the second page's `next_since` is past the year: the rest is skipped.
        let first = page(&log, &query(2, None), 0);
        assert!(first.next_since > 1_000 + year_ms);
        // By position from the first page's end, nothing is.
        assert_eq!(first.next_offset, 2);
        let rest = page(&log, &query(10, Some(2)), 2);
        assert_eq!(rest.events, log[2..].to_vec());
    }

    #[test]
    fn a_page_started_by_time_ends_with_its_last_millisecond() {
        let log = vec![event(5, "a"), event(6, "b"), event(6, "c"), event(7, "d")];
        let page = page(&log, &query(2, None), 0);
        assert_eq!(page.events.len(), 3, "the rest of millisecond 6 comes too");
        assert_eq!(page.next_since, 7);
        assert_eq!(page.next_offset, 3, "the first event not in the page");
    }

    #[test]
    fn filters_and_unreadable_events_move_the_position_on() {
        let log = [event(5, "a"), event(6, "b"), event(7, "a")];
        let mut only_a = query(10, Some(0));
        only_a.principal = Some("a".into());
        let mut pager = Pager::new(&only_a, 0);
        assert!(pager.offer(0, Some(log[0].clone())));
        assert!(pager.offer(1, None));
        assert!(pager.offer(2, Some(log[1].clone())));
        assert!(pager.offer(3, Some(log[2].clone())));
        let page = pager.finish();
        assert_eq!(page.events, vec![log[0].clone(), log[2].clone()]);
        assert_eq!(page.next_offset, 4);
    }
}
