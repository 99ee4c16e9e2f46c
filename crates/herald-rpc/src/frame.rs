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
//! (`hello_auth`) before the hello-ack. Versions 1 and 2 (no nonce) are refused.

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
const PROTOCOL_VERSION: u16 = 3;
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

/// A client's first frame: who it is, which node it expects to reach, which lane the
/// connection is, and a fresh random nonce (what the proofs of the cluster secret cover).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) lane: Lane,
    pub(crate) nonce: [u8; NONCE_BYTES],
}

impl Hello {
    pub(crate) fn into_frame(self) -> Frame {
        let mut body = BytesMut::with_capacity(HELLO_BYTES);
        body.put_slice(&MAGIC);
        body.put_u16(PROTOCOL_VERSION);
        body.put_u64(self.from);
        body.put_u64(self.to);
        body.put_u8(self.lane as u8);
        body.put_slice(&self.nonce);
        Frame::new(FrameKind::Hello, 0, 0, body.freeze())
    }

    /// The hello in a hello frame's body; the error is the reason to refuse it.
    pub(crate) fn decode(mut body: &[u8]) -> Result<Hello, String> {
        if body.len() < MAGIC.len() + 2 || body[..MAGIC.len()] != MAGIC {
            return Err("not a Herald RPC hello (bad magic)".to_string());
        }
        body.advance(MAGIC.len());
        let version = body.get_u16();
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "unsupported protocol version {version} (this node speaks {PROTOCOL_VERSION})"
            ));
        }
        if body.len() != HELLO_BYTES - MAGIC.len() - 2 {
            return Err(format!("malformed hello of {} bytes", body.len() + 6));
        }
        let from = body.get_u64();
        let to = body.get_u64();
        let lane_byte = body.get_u8();
        let lane = Lane::from_byte(lane_byte).ok_or_else(|| format!("unknown lane {lane_byte}"))?;
        let mut nonce = [0u8; NONCE_BYTES];
        body.copy_to_slice(&mut nonce);
        Ok(Hello {
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
            from: 1,
            to: 2,
            lane: Lane::Client,
            nonce: [7; NONCE_BYTES],
        };
        let frame = hello.into_frame();
        assert_eq!(frame.kind, FrameKind::Hello);
        assert_eq!(Hello::decode(&frame.body), Ok(hello));

        assert!(Hello::decode(b"GET / HTTP/1.1")
            .unwrap_err()
            .contains("magic"));
        let mut other_version = frame.body.to_vec();
        other_version[5] = 9;
        assert!(Hello::decode(&other_version)
            .unwrap_err()
            .contains("version"));
        assert!(Hello::decode(&frame.body[..10]).is_err());
        let mut other_lane = frame.body.to_vec();
        other_lane[22] = 7;
        assert!(Hello::decode(&other_lane).unwrap_err().contains("lane"));
        let ack = HelloAck {
            node_id: 42,
            max_concurrent_requests: 16,
        };
        assert_eq!(HelloAck::decode(&ack.into_frame().body), Ok(ack));
        assert!(HelloAck::decode(&42u64.to_be_bytes()).is_err());
    }
}
