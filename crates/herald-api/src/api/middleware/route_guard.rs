//! The route guard: the one layer inside the router, around every matched route's handler.
//! It remembers the matched route for the envelope's metrics and span, turns a handler's panic
//! into a 500 answer (the node keeps serving), and admits the request: authentication and
//! rights (`access`), then the client's quotas (`quota`), inside it so the client is known.
//!
//! One layer for all of it, for the reason the envelope gives: a `from_fn` layer per concern
//! boxes and clones per request.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;

use crate::api::middleware::{access, metrics_layer, quota};
use crate::api::problem::ApiError;
use crate::broker::auth::access::Access;
use crate::broker::quota::Quotas;

/// What the guard checks; none of it in tests of routes alone.
#[derive(Clone, Default)]
pub(crate) struct RouteGuard {
    pub(crate) access: Option<Access>,
    pub(crate) quotas: Option<Quotas>,
}

/// The route layer (`axum::Router::route_layer` with `from_fn_with_state`).
pub(crate) async fn guard(
    State(guard): State<RouteGuard>,
    request: Request,
    next: Next,
) -> Response {
    let route = metrics_layer::route_of(&request);
    let mut response = match AssertUnwindSafe(guard.admitted(request, next))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(payload) => panic_response(payload),
    };
    metrics_layer::remember_route(&mut response, route);
    response
}

impl RouteGuard {
    async fn admitted(&self, request: Request, next: Next) -> Response {
        let (request, principal) = match &self.access {
            Some(access) => match access::admit(access, request).await {
                Ok(admitted) => admitted,
                Err(refusal) => return refusal,
            },
            None => (request, None),
        };
        let response = match &self.quotas {
            Some(quotas) => match quota::admit(quotas, request) {
                Ok((request, Some(admission))) => {
                    admission.answer(quotas.clone(), next.run(request).await)
                }
                Ok((request, None)) => next.run(request).await,
                Err(refusal) => refusal.into_response(),
            },
            None => next.run(request).await,
        };
        match principal {
            Some(principal) => access::with_principal(response, principal),
            None => response,
        }
    }
}

/// A handler panicked: answer a bare 500 and keep the node serving.
fn panic_response(payload: Box<dyn Any + Send + 'static>) -> Response {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    ApiError::internal(format!("handler panicked: {message}")).into_response()
}
