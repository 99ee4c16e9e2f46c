//! URLs a node fetches security material from (an external issuer's keys and discovery).

use http::Uri;

/// Parses an `http(s)://host...` URL.
pub fn parse_http_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|error| format!("'{text}' is not a URL: {error}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(uri),
        _ => Err(format!("'{text}' is not an http(s) URL with a host")),
    }
}

/// Checks a URL keys are fetched from: https, or plain http on loopback (a local provider, a
/// sidecar) or where `allow_http` says so, since keys fetched without TLS can be swapped by
/// anyone on the path.
pub fn check_key_url(text: &str, allow_http: bool) -> Result<(), String> {
    let url = parse_http_url(text)?;
    if url.scheme_str() == Some("https") || allow_http {
        return Ok(());
    }
    let host = url.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(format!(
            "'{text}' is plain http on a host that is not loopback; use https (or allow_http = true)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_over_https_or_from_loopback() {
        check_key_url("https://sso.example.com/certs", false).unwrap();
        check_key_url("http://127.0.0.1:8081/jwks", false).unwrap();
        check_key_url("http://[::1]:8081/jwks", false).unwrap();
        check_key_url("http://localhost/jwks", false).unwrap();
        assert!(check_key_url("http://sso.example.com/certs", false).is_err());
        check_key_url("http://sso.example.com/certs", true).unwrap();
        assert!(check_key_url("ftp://sso.example.com/certs", true).is_err());
        assert!(check_key_url("/certs", true).is_err());
    }
}
