//! Request metrics: `herald_http_requests_total` and `herald_http_request_duration_seconds`,
//! labelled by method, route and status.
//!
//! The route label is the matched route pattern (`/v1/topics/{topic}`), never the raw path, so
//! the number of series stays bounded whatever clients send. Axum only knows the pattern after
//! routing, inside the router, so the route guard copies it onto the response
//! ([`remember_route`]), where the envelope's [`RequestTimer`] (outside the router, so it also
//! sees 404s and rejected bodies) reads it.

use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::response::Response;
use metrics::{Counter, Histogram};

use crate::telemetry::handles::HandleCache;

pub const REQUESTS_TOTAL: &str = "herald_http_requests_total";
pub const REQUEST_DURATION_SECONDS: &str = "herald_http_request_duration_seconds";

/// The route label of requests no route matched.
const UNMATCHED: &str = "unmatched";

/// The matched route pattern and the method of a request, read inside the router (the
/// route guard) and put on its response by [`remember_route`].
pub(crate) fn route_of(request: &Request) -> Option<(MatchedPath, Method)> {
    let matched = request.extensions().get::<MatchedPath>().cloned()?;
    Some((matched, request.method().clone()))
}

/// Puts what [`route_of`] read on the response, where the outer layers find it (the request's
/// span is named by both, see `trace::response_span`).
pub(crate) fn remember_route(response: &mut Response, route: Option<(MatchedPath, Method)>) {
    if let Some((matched, method)) = route {
        response.extensions_mut().insert(matched);
        response.extensions_mut().insert(method);
    }
}

/// Counts and times one request, from the outer layer.
pub(crate) struct RequestTimer {
    /// Index in [`METHOD_LABELS`].
    method: usize,
    started: Instant,
}

impl RequestTimer {
    pub(crate) fn start(request: &Request) -> RequestTimer {
        RequestTimer {
            method: method_index(request.method()),
            started: Instant::now(),
        }
    }

    pub(crate) fn elapsed(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Records the request, labelled by the route its response carries.
    pub(crate) fn record(&self, response: &Response) {
        static HANDLES: LazyLock<HandleCache<(Counter, Histogram)>> =
            LazyLock::new(HandleCache::new);
        let route = response
            .extensions()
            .get::<MatchedPath>()
            .map_or(UNMATCHED, MatchedPath::as_str);
        let status = response.status().as_u16();
        let method = METHOD_LABELS[self.method];
        let method_and_status = ((self.method as u64) << 16) | u64::from(status);
        let (requests, duration) = HANDLES.get(route, method_and_status, || {
            let labels = [
                ("method", method.to_string()),
                ("route", route.to_string()),
                ("status", status.to_string()),
            ];
            (
                metrics::counter!(REQUESTS_TOTAL, &labels),
                metrics::histogram!(REQUEST_DURATION_SECONDS, &labels),
            )
        });
        requests.increment(1);
        duration.record(self.started.elapsed().as_secs_f64());
    }
}

/// The method labels: the standard methods by name, anything else as `other` (methods are
/// client-chosen strings).
const METHOD_LABELS: [&str; 8] = [
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "other",
];

/// The index of `method`'s label in [`METHOD_LABELS`].
fn method_index(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::POST => 1,
        Method::PUT => 2,
        Method::PATCH => 3,
        Method::DELETE => 4,
        Method::HEAD => 5,
        Method::OPTIONS => 6,
        _ => 7,
    }
}
