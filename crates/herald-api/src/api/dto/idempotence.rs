//! The idempotency parts of a produce request: the `Idempotency-Key` header and the idempotent
//! producer fields of a JSON body, checked before the broker sees them.

use axum::http::HeaderMap;

use crate::api::problem::ApiError;
use crate::broker::ProducerFields;

/// The `Idempotency-Key` header as text: at most one, and readable as ASCII. What a key may
/// hold (1 to 255 printable characters) is checked once, for every transport, by
/// [`crate::api::routes::produce_call::ProduceTo::keyed`].
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid_request(
            "send at most one Idempotency-Key header",
        ));
    }
    let key = value.to_str().map_err(|_| {
        ApiError::invalid_request("the Idempotency-Key header must be printable ASCII")
    })?;
    Ok(Some(key.to_string()))
}

/// The idempotent producer fields: all three or none, each in its range.
pub fn producer_fields(
    producer_id: Option<i64>,
    producer_epoch: Option<i64>,
    sequence: Option<i64>,
) -> Result<Option<ProducerFields>, ApiError> {
    let (producer_id, producer_epoch, sequence) = match (producer_id, producer_epoch, sequence) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(sequence)) => (id, epoch, sequence),
        _ => {
            return Err(ApiError::invalid_request(
                "producer_id, producer_epoch and sequence go together: send all three or none",
            ))
        }
    };
    if producer_id < 0 {
        return Err(ApiError::invalid_request(format!(
            "producer_id must be 0 or more, got {producer_id}"
        )));
    }
    let producer_epoch = i16::try_from(producer_epoch)
        .ok()
        .filter(|epoch| *epoch >= 0)
        .ok_or_else(|| {
            ApiError::invalid_request(format!(
                "producer_epoch must be between 0 and {}, got {producer_epoch}",
                i16::MAX
            ))
        })?;
    let sequence = i32::try_from(sequence)
        .ok()
        .filter(|sequence| *sequence >= 0)
        .ok_or_else(|| {
            ApiError::invalid_request(format!(
                "sequence must be between 0 and {}, got {sequence}",
                i32::MAX
            ))
        })?;
    Ok(Some(ProducerFields {
        producer_id,
        producer_epoch,
        sequence,
    }))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn idempotency_key_header_is_read_once_and_as_ascii() {
        let mut headers = HeaderMap::new();
        assert_eq!(idempotency_key(&headers).expect("none"), None);
        headers.insert("idempotency-key", HeaderValue::from_static("order-17"));
        assert_eq!(
            idempotency_key(&headers).expect("valid"),
            Some("order-17".to_string())
        );
        headers.append("idempotency-key", HeaderValue::from_static("again"));
        assert!(idempotency_key(&headers).is_err(), "two keys");
        let mut headers = HeaderMap::new();
        headers.insert(
            "idempotency-key",
            HeaderValue::from_bytes(b"caf\xc3\xa9").expect("a header value"),
        );
        let error = idempotency_key(&headers).expect_err("not ASCII");
        assert_eq!(error.code.as_str(), "invalid_request");
    }
}
