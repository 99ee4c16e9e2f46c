//! The client's address as the audit log records it: the TCP peer's (from the listener's
//! `ConnectInfo`), or, behind a configured reverse proxy, the one its `X-Forwarded-For` names.

use std::net::IpAddr;

/// The client's address: the peer's, or, when the peer is a trusted proxy, the last address in
/// `X-Forwarded-For` that is not itself a trusted proxy.
pub fn client_address(
    peer: Option<IpAddr>,
    forwarded_for: Option<&str>,
    trusted_proxies: &[IpAddr],
) -> Option<IpAddr> {
    let peer = peer?;
    if !trusted_proxies.contains(&peer) {
        return Some(peer);
    }
    let Some(forwarded_for) = forwarded_for else {
        return Some(peer);
    };
    let hops: Vec<IpAddr> = forwarded_for
        .split(',')
        .map_while(|hop| hop.trim().parse::<IpAddr>().ok())
        .collect();
    // A hop that does not parse ends the believable part: what is left of it was written by
    // whoever the first proxy talked to.
    if hops.len() != forwarded_for.split(',').count() {
        return Some(peer);
    }
    hops.iter()
        .rev()
        .find(|hop| !trusted_proxies.contains(hop))
        .or(hops.first())
        .copied()
        .or(Some(peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
        let proxy: IpAddr = "10.0.0.1".parse().expect("ip");
        let client: IpAddr = "203.0.113.7".parse().expect("ip");
        let stranger: IpAddr = "198.51.100.9".parse().expect("ip");
        let trusted = [proxy];
        // From an untrusted peer the header is ignored.
        assert_eq!(
            client_address(Some(stranger), Some("203.0.113.7"), &trusted),
            Some(stranger)
        );
        // From a trusted proxy, the last hop that is not a trusted proxy.
        assert_eq!(
            client_address(
                Some(proxy),
                Some("1.2.3.4, 203.0.113.7, 10.0.0.1"),
                &trusted
            ),
            Some(client)
        );
        assert_eq!(client_address(Some(proxy), None, &trusted), Some(proxy));
        assert_eq!(
            client_address(Some(proxy), Some("not-an-ip"), &trusted),
            Some(proxy)
        );
        assert_eq!(client_address(None, Some("203.0.113.7"), &trusted), None);
    }
}
