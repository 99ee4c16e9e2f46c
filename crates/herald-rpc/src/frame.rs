//! The wire format: length-prefixed frames.
//!
//! `u32 BE length of the rest | u8 kind | u64 BE request id | u8 service | body`
//!
//! A fixed binary header rather than a serde encoding: the transport never looks into bodies,
//! and the reader must learn a frame's size from its first four bytes so it can refuse an
//! oversized one before buffering anything of it. Frames are read whole into one buffer and
//! the body is split off as `Bytes`, so a body is copied from the socket once and never again.
//!
//! Kinds, and what their body holds:
//!
//! | kind | byte | sent by | body |
//! |---|---|---|---|
//! | request | 0 | client | the service's request |
//! | answer-ok | 1 | server | the service's answer to the request of the same id |
//! | answer-error | 2 | server | the handler's error, as text |
//! | hello | 3 | client, first frame | magic `HRLD`, `u16` version, `u64` from node, `u64` to node, `u8` lane, 32-byte nonce |
//! | hello-ack | 4 | server | `u64` its node id, `u32` the lane's concurrent requests limit |
//! | hello-refused | 5 | server, then it closes | the reason, as text |
//! | cancel | 6 | client | empty |
//! | challenge | 7 | server, after a hello, when nodes prove the cluster secret | 32-byte nonce, 32-byte server proof |
//! | proof | 8 | client, after a challenge | 32-byte client proof (empty: the client has no secret) |
//!
//! A cancel names, by its request id, a request the client gave up on (its caller timed out
//! or went away): the server aborts that request's handler, frees its slot, and answers
//! nothing; a cancel for a request already answered (they cross) is ignored. Its service byte
//! repeats the request's and is not used. Ids of requests and cancels are the client's, unique
//! per connection. The lane (0 control, 1 client) selects the limits of the connection (see
//! `lane`). Without mutual TLS, the hello is followed by a challenge and a proof
//! (`hello_auth`) before the hello-ack.
//!
//! The hello's version is the transport's protocol version, not a release's feature level
//! (that is the wire version the services report, `herald_domain::wire_version`). Its rules,
//! so that nodes of two releases connect during a rolling upgrade:
//!
//! - every hello, of any version, starts with the magic and the `u16` version, so a server can
//!   always read which version a client offers;
//! - a node speaks a range of versions ([`ProtocolVersions`]): its server accepts a hello of
//!   any of them, and its client offers the newest;
//! - a server refuses a version outside its range with a hello-refused whose text ends in
//!   `(this node speaks N)` or `(this node speaks A to B)` (what releases before ranges
//!   answered has the first form); a client refused that way dials again with the newest
//!   version both speak, if there is one ([`ProtocolVersions::retry_after`]);
//! - a release that changes the hello layout raises the newest version and keeps the older
//!   layout among the versions it accepts for at least one release, so N+1 and N connect both
//!   ways. Versions 1 and 2 (no nonce) are no longer spoken; 3 is this release's only one.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Lane, ServiceId};

const LENGTH_BYTES: usize = 4;
/// Kind, request id and service: the part of the header the length prefix counts.
const HEADER_REST_BYTES: usize = 1 + 8 + 1;
pub(crate) const HEADER_BYTES: usize = LENGTH_BYTES + HEADER_REST_BYTES;

/// Largest frame accepted before the handshake completes: room for a hello or a refusal, so
/// a stranger's garbage cannot make a node buffer anything big.
pub(crate) const HANDSHAKE_MAX_FRAME_BYTES: usize = 4096;

/// How much the read buffer grows at most per read beyond what already arrived: a frame's
/// buffer grows with the bytes that actually come, never to the size its prefix claims.
pub(crate) const READ_CHUNK_BYTES: usize = 64 * 1024;
/// What a reader's buffer starts with.
pub(crate) const INITIAL_BUFFER_BYTES: usize = 8 * 1024;

const MAGIC: [u8; 4] = *b"HRLD";
/// Random bytes of a hello's (and a challenge's) nonce.
pub(crate) const NONCE_BYTES: usize = 32;
const HELLO_BYTES: usize = 4 + 2 + 8 + 8 + 1 + NONCE_BYTES;
const HELLO_ACK_BYTES: usize = 8 + 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    Request = 0,
    AnswerOk = 1,
    AnswerError = 2,
    Hello = 3,
    HelloAck = 4,
    HelloRefused = 5,
    Cancel = 6,
    Challenge = 7,
    Proof = 8,
}

impl FrameKind {
    fn from_byte(byte: u8) -> Option<FrameKind> {
        match byte {
            0 => Some(FrameKind::Request),
            1 => Some(FrameKind::AnswerOk),
            2 => Some(FrameKind::AnswerError),
            3 => Some(FrameKind::Hello),
            4 => Some(FrameKind::HelloAck),
            5 => Some(FrameKind::HelloRefused),
            6 => Some(FrameKind::Cancel),
            7 => Some(FrameKind::Challenge),
            8 => Some(FrameKind::Proof),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub(crate) kind: FrameKind,
    pub(crate) request_id: u64,
    pub(crate) service: ServiceId,
    pub(crate) body: Bytes,
}

impl Frame {
    pub(crate) fn new(kind: FrameKind, request_id: u64, service: ServiceId, body: Bytes) -> Frame {
        Frame {
            kind,
            request_id,
            service,
            body,
        }
    }

    /// Header plus body: what `max_frame_bytes` limits.
    pub(crate) fn encoded_len(&self) -> usize {
        HEADER_BYTES + self.body.len()
    }

    /// Senders check [`Frame::encoded_len`] against the frame limit (at most `u32::MAX`) first.
    fn header(&self) -> [u8; HEADER_BYTES] {
        let rest = HEADER_REST_BYTES + self.body.len();
        debug_assert!(
            u32::try_from(rest).is_ok(),
            "frame length checked by the sender"
        );
        let mut header = [0u8; HEADER_BYTES];
        let mut cursor = &mut header[..];
        cursor.put_u32(u32::try_from(rest).unwrap_or(u32::MAX));
        cursor.put_u8(self.kind as u8);
        cursor.put_u64(self.request_id);
        cursor.put_u8(self.service);
        header
    }
}

/// Writes the header, then the body as a separate write: through a `BufWriter`, a body at
/// least as large as its buffer goes straight to the socket instead of being copied into it.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    sink: &mut W,
    frame: &Frame,
) -> std::io::Result<()> {
    sink.write_all(&frame.header()).await?;
    if !frame.body.is_empty() {
        sink.write_all(&frame.body).await?;
    }
    Ok(())
}

#[derive(Debug, Error)]
pub(crate) enum FrameError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("a frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("the connection closed in the middle of a frame")]
    Truncated,
}

impl FrameError {
    /// True when the peer broke the protocol, as opposed to the connection merely ending.
    pub(crate) fn is_protocol_violation(&self) -> bool {
        matches!(self, FrameError::TooLarge { .. } | FrameError::Malformed(_))
    }
}

/// Reads whole frames from a byte stream.
pub(crate) struct FrameReader<R> {
    source: R,
    buffer: BytesMut,
    max_frame_bytes: usize,
    received: metrics::Counter,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub(crate) fn new(source: R, max_frame_bytes: usize) -> FrameReader<R> {
        FrameReader {
            source,
            buffer: BytesMut::with_capacity(INITIAL_BUFFER_BYTES),
            max_frame_bytes,
            received: metrics::counter!(super::RECEIVED_BYTES_TOTAL),
        }
    }

    pub(crate) fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.max_frame_bytes = max_frame_bytes;
    }

    /// The next frame, or `None` when the stream ended cleanly between frames.
    ///
    /// Cancel-safe (bytes read so far stay in the buffer), so it can race a shutdown signal.
    pub(crate) async fn read_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            if let Some(frame) = self.parse()? {
                return Ok(Some(frame));
            }
            if self.source.read_buf(&mut self.buffer).await? == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// Splits the first frame off the buffer if it is complete; otherwise makes room to read.
    fn parse(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.buffer.len() < LENGTH_BYTES {
            self.buffer.reserve(READ_CHUNK_BYTES);
            return Ok(None);
        }
        let mut prefix = [0u8; LENGTH_BYTES];
        prefix.copy_from_slice(&self.buffer[..LENGTH_BYTES]);
        let rest = u32::from_be_bytes(prefix) as usize;
        if rest < HEADER_REST_BYTES {
            return Err(FrameError::Malformed(format!(
                "a length of {rest} cannot hold a frame header"
            )));
        }
        let total = LENGTH_BYTES + rest;
        if total > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                size: total,
                max: self.max_frame_bytes,
            });
        }
        if self.buffer.len() < total {
            let missing = total - self.buffer.len();
            self.buffer
                .reserve(missing.min(READ_CHUNK_BYTES.max(self.buffer.len())));
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(total);
        frame.advance(LENGTH_BYTES);
        let kind_byte = frame.get_u8();
        let kind = FrameKind::from_byte(kind_byte)
            .ok_or_else(|| FrameError::Malformed(format!("unknown frame kind {kind_byte}")))?;
        let request_id = frame.get_u64();
        let service = frame.get_u8();
        self.received.increment(total as u64);
        Ok(Some(Frame::new(kind, request_id, service, frame.freeze())))
    }

    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.buffer.capacity()
    }
}

/// The hello versions a node speaks, oldest to newest (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolVersions {
    pub oldest: u16,
    pub newest: u16,
}

impl ProtocolVersions {
    /// This release's: version 3 (magic, version, from, to, lane, nonce), as the release before
    /// it, which accepted exactly 3.
    pub const CURRENT: ProtocolVersions = ProtocolVersions {
        oldest: 3,
        newest: 3,
    };

    pub fn speaks(self, version: u16) -> bool {
        (self.oldest..=self.newest).contains(&version)
    }

    /// What a refused client tries next: after offering `offered` to a server whose refusal
    /// said `refusal`, the newest version both speak, if it is older than the one offered.
    /// `None`: no version in common (or the refusal was not about the version).
    pub fn retry_after(self, offered: u16, refusal: &str) -> Option<u16> {
        let server = ProtocolVersions::refused_by(refusal)?;
        let common = self.newest.min(server.newest);
        (common < offered && self.speaks(common) && server.speaks(common)).then_some(common)
    }

    /// The versions a server's refusal of a version says it speaks.
    fn refused_by(refusal: &str) -> Option<ProtocolVersions> {
        let (_, speaks) = refusal.rsplit_once(SPEAKS)?;
        let speaks = speaks.strip_suffix(')')?;
        let (oldest, newest) = speaks.split_once(" to ").unwrap_or((speaks, speaks));
        let versions = ProtocolVersions {
            oldest: oldest.trim().parse().ok()?,
            newest: newest.trim().parse().ok()?,
        };
        (versions.oldest <= versions.newest).then_some(versions)
    }

    /// The refusal of a hello of `offered`, saying which versions this node speaks.
    fn refusal(self, offered: u16) -> String {
        let speaks = if self.oldest == self.newest {
            self.newest.to_string()
        } else {
            format!("{} to {}", self.oldest, self.newest)
        };
        format!("unsupported protocol version {offered} {SPEAKS}{speaks})")
    }
}

/// What a version refusal says before the versions the server speaks.
const SPEAKS: &str = "(this node speaks ";

/// A client's first frame: the protocol version it speaks on this connection, who it is,
/// which node it expects to reach, which lane the connection is, and a fresh random nonce
/// (what the proofs of the cluster secret cover).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) version: u16,
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) lane: Lane,
    pub(crate) nonce: [u8; NONCE_BYTES],
}

/// Why a server refuses a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HelloError {
    /// Not a Herald hello, or a broken one.
    Malformed(String),
    /// A version this node does not speak; the text says which ones it does.
    Version(String),
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::Malformed(reason) | HelloError::Version(reason) => {
                formatter.write_str(reason)
            }
        }
    }
}

impl Hello {
    pub(crate) fn into_frame(self) -> Frame {
        let mut body = BytesMut::with_capacity(HELLO_BYTES);
        body.put_slice(&MAGIC);
        body.put_u16(self.version);
        body.put_u64(self.from);
        body.put_u64(self.to);
        body.put_u8(self.lane as u8);
        body.put_slice(&self.nonce);
        Frame::new(FrameKind::Hello, 0, 0, body.freeze())
    }

    /// The hello in a hello frame's body, if its version is one of `versions`.
    pub(crate) fn decode(mut body: &[u8], versions: ProtocolVersions) -> Result<Hello, HelloError> {
        if body.len() < MAGIC.len() + 2 || body[..MAGIC.len()] != MAGIC {
            return Err(HelloError::Malformed(
                "not a Herald RPC hello (bad magic)".to_string(),
            ));
        }
        body.advance(MAGIC.len());
        let version = body.get_u16();
        if !versions.speaks(version) {
            return Err(HelloError::Version(versions.refusal(version)));
        }
        // Every version spoken so far has this layout.
        if body.len() != HELLO_BYTES - MAGIC.len() - 2 {
            return Err(HelloError::Malformed(format!(
                "malformed hello of {} bytes",
                body.len() + 6
            )));
        }
        let from = body.get_u64();
        let to = body.get_u64();
        let lane_byte = body.get_u8();
        let lane = Lane::from_byte(lane_byte)
            .ok_or_else(|| HelloError::Malformed(format!("unknown lane {lane_byte}")))?;
        let mut nonce = [0u8; NONCE_BYTES];
        body.copy_to_slice(&mut nonce);
        Ok(Hello {
            version,
            from,
            to,
            lane,
            nonce,
        })
    }
}

/// The server's acceptance: its node id and how many requests it runs at once on this
/// connection (the client keeps its outstanding calls within it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HelloAck {
    pub(crate) node_id: u64,
    pub(crate) max_concurrent_requests: u32,
}

impl HelloAck {
    pub(crate) fn into_frame(self) -> Frame {
        let mut body = BytesMut::with_capacity(HELLO_ACK_BYTES);
        body.put_u64(self.node_id);
        body.put_u32(self.max_concurrent_requests);
        Frame::new(FrameKind::HelloAck, 0, 0, body.freeze())
    }

    pub(crate) fn decode(mut body: &[u8]) -> Result<HelloAck, String> {
        if body.len() != HELLO_ACK_BYTES {
            return Err(format!("malformed hello-ack of {} bytes", body.len()));
        }
        Ok(HelloAck {
            node_id: body.get_u64(),
            max_concurrent_requests: body.get_u32(),
        })
    }
}

/// The frame that cancels the client's request `request_id` of `service`.
pub(crate) fn cancel(request_id: u64, service: ServiceId) -> Frame {
    Frame::new(FrameKind::Cancel, request_id, service, Bytes::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(frame: &Frame) -> Vec<u8> {
        let mut bytes = frame.header().to_vec();
        bytes.extend_from_slice(&frame.body);
        bytes
    }

    #[tokio::test]
    async fn frames_round_trip_back_to_back() {
        let first = Frame::new(FrameKind::Request, 7, 3, Bytes::from_static(b"hello"));
        let second = Frame::new(FrameKind::AnswerError, u64::MAX, 255, Bytes::new());
        let mut bytes = encode(&first);
        bytes.extend(encode(&second));
        let mut reader = FrameReader::new(&bytes[..], 1024);

        let read = reader.read_frame().await.unwrap().unwrap();
        assert_eq!(
            (read.kind, read.request_id, read.service),
            (FrameKind::Request, 7, 3)
        );
        assert_eq!(read.body, Bytes::from_static(b"hello"));
        let read = reader.read_frame().await.unwrap().unwrap();
        assert_eq!(
            (read.kind, read.request_id, read.service),
            (FrameKind::AnswerError, u64::MAX, 255)
        );
        assert!(read.body.is_empty());
        assert!(reader.read_frame().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_large_frame_arriving_in_pieces_is_read_whole() {
        let body = Bytes::from((0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let frame = Frame::new(FrameKind::AnswerOk, 1, 1, body.clone());
        let (mut sender, receiver) = tokio::io::duplex(1000);
        let writing = tokio::spawn(async move { write_frame(&mut sender, &frame).await });
        let mut reader = FrameReader::new(receiver, 1 << 20);
        let read = reader.read_frame().await.unwrap().unwrap();
        assert_eq!(read.body, body);
        writing.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_reading_the_body() {
        let mut bytes = u32::MAX.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 32]);
        let mut reader = FrameReader::new(&bytes[..], 1 << 20);
        let error = reader.read_frame().await.unwrap_err();
        assert!(matches!(error, FrameError::TooLarge { .. }), "{error}");
        assert!(error.is_protocol_violation());
    }

    #[tokio::test]
    async fn a_claimed_length_is_not_allocated_up_front() {
        // Within the limit, but only 100 bytes of the claimed 60 MiB ever arrive.
        let mut bytes = (60u32 << 20).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 100]);
        let mut reader = FrameReader::new(&bytes[..], 64 << 20);
        let error = reader.read_frame().await.unwrap_err();
        assert!(matches!(error, FrameError::Truncated), "{error}");
        assert!(
            reader.buffer_capacity() < 1 << 20,
            "{}",
            reader.buffer_capacity()
        );
    }

    #[tokio::test]
    async fn garbage_is_an_error_not_a_panic() {
        for garbage in [
            &[0u8, 0, 0, 3, 1, 2, 3][..],
            &[0, 0, 0, 10, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            let mut reader = FrameReader::new(garbage, 1024);
            let error = reader.read_frame().await.unwrap_err();
            assert!(error.is_protocol_violation(), "{error}");
        }
    }

    #[test]
    fn hello_round_trips_and_refuses_strangers() {
        let hello = Hello {
            version: 3,
            from: 1,
            to: 2,
            lane: Lane::Client,
            nonce: [7; NONCE_BYTES],
        };
        let current = ProtocolVersions::CURRENT;
        let frame = hello.into_frame();
        assert_eq!(frame.kind, FrameKind::Hello);
        assert_eq!(Hello::decode(&frame.body, current), Ok(hello));

        assert!(matches!(
            Hello::decode(b"GET / HTTP/1.1", current),
            Err(HelloError::Malformed(reason)) if reason.contains("magic")
        ));
        let mut other_version = frame.body.to_vec();
        other_version[5] = 9;
        assert_eq!(
            Hello::decode(&other_version, current),
            Err(HelloError::Version(
                "unsupported protocol version 9 (this node speaks 3)".into()
            ))
        );
        assert!(Hello::decode(&frame.body[..10], current).is_err());
        let mut other_lane = frame.body.to_vec();
        other_lane[22] = 7;
        assert!(Hello::decode(&other_lane, current)
            .unwrap_err()
            .to_string()
            .contains("lane"));
        let ack = HelloAck {
            node_id: 42,
            max_concurrent_requests: 16,
        };
        assert_eq!(HelloAck::decode(&ack.into_frame().body), Ok(ack));
        assert!(HelloAck::decode(&42u64.to_be_bytes()).is_err());
    }

    #[test]
    fn the_hello_of_this_release_is_the_hello_of_protocol_3() {
        // What a node of the release before wire versions sends and accepts, byte for byte:
        // changing it would cut this release off from that one during an upgrade.
        let hello = Hello {
            version: ProtocolVersions::CURRENT.newest,
            from: 1,
            to: 0x0102,
            lane: Lane::Control,
            nonce: [0xaa; NONCE_BYTES],
        };
        let mut expected = b"HRLD".to_vec();
        expected.extend_from_slice(&[0, 3]);
        expected.extend_from_slice(&1u64.to_be_bytes());
        expected.extend_from_slice(&0x0102u64.to_be_bytes());
        expected.push(0);
        expected.extend_from_slice(&[0xaa; NONCE_BYTES]);
        assert_eq!(&hello.into_frame().body[..], &expected[..]);
    }

    #[test]
    fn a_refused_client_retries_with_the_newest_version_both_speak() {
        let newer = ProtocolVersions {
            oldest: 3,
            newest: 4,
        };
        // The refusal of a node of the release before ranges (it speaks exactly 3).
        let old_refusal = "unsupported protocol version 4 (this node speaks 3)";
        assert_eq!(newer.retry_after(4, old_refusal), Some(3));
        // Ranges, as this release refuses.
        let refusal = ProtocolVersions {
            oldest: 2,
            newest: 3,
        }
        .refusal(4);
        assert_eq!(
            refusal,
            "unsupported protocol version 4 (this node speaks 2 to 3)"
        );
        assert_eq!(newer.retry_after(4, &refusal), Some(3));
        // Nothing older in common, nothing to retry, or not a version refusal at all.
        let far = ProtocolVersions {
            oldest: 5,
            newest: 6,
        };
        assert_eq!(far.retry_after(6, old_refusal), None);
        assert_eq!(ProtocolVersions::CURRENT.retry_after(3, old_refusal), None);
        assert_eq!(newer.retry_after(4, "node 3 is starting"), None);
        assert_eq!(newer.retry_after(4, "(this node speaks 9 to 2)"), None);
    }
}
