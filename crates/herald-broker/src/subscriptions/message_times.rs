//! Per-message delay and expiry (`deliver_at`, `expires_at`): stored with the message as two
//! reserved headers, so the log format does not change and a consumer sees them. A client may
//! set the headers itself; the broker refuses a produce whose value is not an epoch-ms integer,
//! so every stored value parses.

use herald_domain::batch::RecordView;

/// Not delivered by a subscription before this (epoch ms).
pub const DELIVER_AT_HEADER: &str = "herald-deliver-at";
/// Dead-lettered (or dropped) instead of delivered once this passed (epoch ms).
pub const EXPIRES_AT_HEADER: &str = "herald-expires-at";

/// Sets the headers for the produce body's `deliver_at` / `expires_at` fields, replacing
/// headers of the same name (the field is what the client meant).
pub fn stamp(
    headers: &mut Vec<(String, String)>,
    deliver_at: Option<u64>,
    expires_at: Option<u64>,
) {
    for (name, value) in [
        (DELIVER_AT_HEADER, deliver_at),
        (EXPIRES_AT_HEADER, expires_at),
    ] {
        if let Some(value) = value {
            headers.retain(|(header, _)| header != name);
            headers.push((name.to_string(), value.to_string()));
        }
    }
}

/// Refuses a message whose reserved time headers are not decimal epoch ms (0 to 2^63-1).
pub fn check(headers: &[(String, String)]) -> Result<(), String> {
    check_pairs(
        headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
    )
}

/// [`check`] of headers read in place (a producer's stored-layout batch).
pub fn check_pairs<'h>(headers: impl Iterator<Item = (&'h str, &'h str)>) -> Result<(), String> {
    for (name, value) in headers {
        if (name == DELIVER_AT_HEADER || name == EXPIRES_AT_HEADER) && parse(value).is_none() {
            return Err(format!(
                "header '{name}' must be milliseconds since the epoch as a decimal integer >= 0, got '{value}'"
            ));
        }
    }
    Ok(())
}

/// [`times`] of a record read in place (no copy of its headers).
pub fn times_of(record: &RecordView<'_>) -> (Option<i64>, Option<i64>) {
    (
        record.header(DELIVER_AT_HEADER).and_then(parse),
        record.header(EXPIRES_AT_HEADER).and_then(parse),
    )
}

/// The message's `(deliver_at, expires_at)`; a value that does not parse counts as absent
/// (produce refuses those, so only data written otherwise could have one).
pub fn times(headers: &[(String, String)]) -> (Option<i64>, Option<i64>) {
    let mut deliver_at = None;
    let mut expires_at = None;
    for (name, value) in headers {
        if name == DELIVER_AT_HEADER {
            deliver_at = parse(value);
        } else if name == EXPIRES_AT_HEADER {
            expires_at = parse(value);
        }
    }
    (deliver_at, expires_at)
}

fn parse(value: &str) -> Option<i64> {
    if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    value.parse::<i64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn only_decimal_epoch_ms_is_accepted() {
        assert!(check(&headers(&[(DELIVER_AT_HEADER, "1700000000000")])).is_ok());
        assert!(check(&headers(&[("other", "x")])).is_ok());
        for bad in ["", "-1", "+1", "1.5", "1e3", " 1", "99999999999999999999"] {
            assert!(
                check(&headers(&[(EXPIRES_AT_HEADER, bad)])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn fields_replace_headers_and_parse_back() {
        let mut stamped = headers(&[(DELIVER_AT_HEADER, "1"), ("a", "b")]);
        stamp(&mut stamped, Some(5), Some(9));
        assert_eq!(times(&stamped), (Some(5), Some(9)));
        assert_eq!(stamped.len(), 3);
    }
}
