//! One signature per token: ECDSA signatures are malleable, `(r, s)` and `(r, n - s)` both
//! verify, so anyone holding a token could mint a second, different string that is just as
//! valid. Whatever tells tokens apart by their text (the verified-token cache, a client's own
//! de-duplication, a revocation list keyed by digest) would take the twin for another token.
//!
//! The built-in issuer therefore signs only "low-s" signatures (`s <= n/2`, the form Bitcoin and
//! Ethereum settled on) and accepts no other: each of its tokens has exactly one valid text.
//! (Tokens of external issuers are not held to it: providers sign with libraries that do not
//! normalise `s`, and refusing half their tokens would break them; see `docs/security.md`.)

/// The order of the P-256 group, big-endian.
const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// `floor(n / 2)` for P-256: the largest low `s`.
const P256_HALF_ORDER: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0x80, 0x00, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xde, 0x73, 0x7d, 0x56, 0xd3, 0x8b, 0xcf, 0x42, 0x79, 0xdc, 0xe5, 0x61, 0x7e, 0x31, 0x92, 0xa8,
];

/// Whether a fixed-width ES256 signature (`r || s`, 64 bytes) has a low `s`. Anything else
/// (another length) is not one.
pub fn is_low_s_p256(signature: &[u8]) -> bool {
    signature.len() == 64 && signature[32..] <= P256_HALF_ORDER[..]
}

/// Replaces a high `s` by `n - s` (the same signature's other form); a low one is kept.
/// Signatures that are not 64 bytes are left alone (they do not verify anyway).
pub fn normalize_p256(signature: &mut [u8]) {
    if signature.len() != 64 || is_low_s_p256(signature) {
        return;
    }
    let s = &mut signature[32..];
    let mut borrow = 0u16;
    for index in (0..32).rev() {
        let difference = u16::from(P256_ORDER[index])
            .wrapping_sub(u16::from(s[index]))
            .wrapping_sub(borrow);
        s[index] = difference as u8;
        borrow = (difference >> 15) & 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature_with_s(s: [u8; 32]) -> Vec<u8> {
        let mut signature = vec![7u8; 32];
        signature.extend_from_slice(&s);
        signature
    }

    #[test]
    fn the_half_order_is_the_largest_low_s() {
        assert!(is_low_s_p256(&signature_with_s(P256_HALF_ORDER)));
        let mut above = P256_HALF_ORDER;
        above[31] += 1;
        assert!(!is_low_s_p256(&signature_with_s(above)));
        assert!(is_low_s_p256(&signature_with_s([0; 32])));
        assert!(!is_low_s_p256(&[0u8; 63]));
    }

    #[test]
    fn normalizing_takes_n_minus_a_high_s_and_keeps_a_low_one() {
        // n - 1 (high) becomes 1.
        let mut n_minus_one = P256_ORDER;
        n_minus_one[31] -= 1;
        let mut signature = signature_with_s(n_minus_one);
        normalize_p256(&mut signature);
        let mut one = [0u8; 32];
        one[31] = 1;
        assert_eq!(&signature[32..], &one[..]);
        assert_eq!(&signature[..32], &[7u8; 32][..], "r is kept");
        // Just above the half order: n - (n/2 + 1) = n/2 (n is odd), with borrows across bytes.
        let mut above = P256_HALF_ORDER;
        above[31] += 1;
        let mut signature = signature_with_s(above);
        normalize_p256(&mut signature);
        assert_eq!(&signature[32..], &P256_HALF_ORDER[..]);
        // A low s is left as it is.
        let mut signature = signature_with_s(one);
        normalize_p256(&mut signature);
        assert_eq!(&signature[32..], &one[..]);
    }
}
