//! The `publish` frame, JSON or binary: the same produce preparation and broker call as
//! `POST /v1/topics/{topic}/messages` (`api::routes::produce_call`).

use super::frames::{PublishFrame, ServerFrame};
use crate::api::dto::produce::ProduceRequest;
use crate::api::problem::ApiError;
use crate::api::routes::produce_call::ProduceTo;
use crate::broker::Broker;
use crate::domain::record::RecordValue;

/// `publish`: the same checks, in the same order, and the same broker call as
/// `POST /v1/topics/{topic}/messages`. `values` are a binary frame's, one per message, instead
/// of the messages' own.
pub async fn publish_frame(
    broker: &Broker,
    frame: PublishFrame,
    values: Option<Vec<RecordValue>>,
) -> Result<ServerFrame, ApiError> {
    let produce = ProduceTo::new(frame.topic)?.keyed(frame.idempotency_key)?;
    let request = ProduceRequest {
        messages: frame.messages,
        producer_id: frame.producer_id,
        producer_epoch: frame.producer_epoch,
        sequence: frame.sequence,
    };
    let decoded = match values {
        None => request.into_domain()?,
        Some(values) => request.into_domain_with_values(values)?,
    };
    let response = produce.with(decoded, frame.acks).send(broker).await?;
    Ok(ServerFrame::Published {
        id: frame.id,
        offsets: response.offsets,
        duplicate: response.duplicate,
    })
}
