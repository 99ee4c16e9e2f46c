//! Property tests of the frame decoder against arbitrary bytes: it never panics, never
//! buffers more than what arrived plus a read chunk (whatever length a prefix claims), reads
//! valid frames back exactly, and a stream cut or split anywhere is refused or waits for more,
//! never misparsed.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::executor::block_on;
use futures::FutureExt;
use parking_lot::Mutex;
use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};

use crate::frame::{
    write_frame, Frame, FrameError, FrameKind, FrameReader, INITIAL_BUFFER_BYTES, READ_CHUNK_BYTES,
};

const KINDS: [FrameKind; 7] = [
    FrameKind::Request,
    FrameKind::AnswerOk,
    FrameKind::AnswerError,
    FrameKind::Hello,
    FrameKind::HelloAck,
    FrameKind::HelloRefused,
    FrameKind::Cancel,
];

fn frame_strategy() -> impl Strategy<Value = Frame> {
    (
        0..KINDS.len(),
        any::<u64>(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(|(kind, request_id, service, body)| {
            Frame::new(KINDS[kind], request_id, service, Bytes::from(body))
        })
}

fn encode(frames: &[Frame]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for frame in frames {
        block_on(write_frame(&mut bytes, frame)).expect("writing to a Vec cannot fail");
    }
    bytes
}

fn same(read: &Frame, sent: &Frame) -> bool {
    (read.kind, read.request_id, read.service, &read.body)
        == (sent.kind, sent.request_id, sent.service, &sent.body)
}

/// A byte stream fed by the test: `Pending` while it has nothing and is not closed.
#[derive(Clone, Default)]
struct Feed {
    state: Arc<Mutex<(VecDeque<u8>, bool)>>,
}

impl Feed {
    fn push(&self, bytes: &[u8]) {
        self.state.lock().0.extend(bytes);
    }

    fn close(&self) {
        self.state.lock().1 = true;
    }
}

impl AsyncRead for Feed {
    fn poll_read(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // Only ever polled through `now_or_never`, which needs no wake-up.
        let mut state = self.state.lock();
        if state.0.is_empty() {
            return if state.1 {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            };
        }
        let count = buffer.remaining().min(state.0.len());
        let bytes: Vec<u8> = state.0.drain(..count).collect();
        buffer.put_slice(&bytes);
        Poll::Ready(Ok(()))
    }
}

/// Reads every frame available now; stops at `Pending`, at the end, or at an error.
fn read_available(
    reader: &mut FrameReader<Feed>,
    into: &mut Vec<Frame>,
) -> Option<Result<(), FrameError>> {
    loop {
        match reader.read_frame().now_or_never() {
            None => return None,
            Some(Ok(Some(frame))) => into.push(frame),
            Some(Ok(None)) => return Some(Ok(())),
            Some(Err(error)) => return Some(Err(error)),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_nor_outgrow_what_arrived(
        // Any length, lengths that fit the input, and lengths within the frame limit that the
        // input does not hold (the ones a careless reader would allocate up front).
        claimed in prop_oneof![any::<u32>(), 0u32..5000, 0u32..(64 << 20)],
        tail in proptest::collection::vec(any::<u8>(), 0..4096),
        max_frame_bytes in prop_oneof![Just(64usize << 20), 14usize..4096],
    ) {
        let mut bytes = claimed.to_be_bytes().to_vec();
        bytes.extend_from_slice(&tail);
        let mut reader = FrameReader::new(&bytes[..], max_frame_bytes);
        let mut first = None;
        loop {
            let outcome = block_on(reader.read_frame());
            if let Ok(Some(frame)) = &outcome {
                prop_assert!(frame.encoded_len() <= max_frame_bytes);
            }
            let more = matches!(outcome, Ok(Some(_)));
            first.get_or_insert(outcome);
            if !more {
                break;
            }
        }
        // The first prefix alone decides whether a frame can start.
        let claimed_total = 4 + claimed as usize;
        match first {
            Some(Err(FrameError::Malformed(_))) => {
                let unknown_kind = bytes.get(4).is_some_and(|kind| *kind > 6);
                prop_assert!(claimed < 10 || unknown_kind);
            }
            Some(Err(FrameError::TooLarge { size, .. })) => {
                prop_assert!(claimed >= 10 && claimed_total > max_frame_bytes);
                prop_assert_eq!(size, claimed_total);
            }
            Some(Err(FrameError::Truncated)) => prop_assert!(claimed_total > bytes.len()),
            Some(Ok(Some(_))) => prop_assert!(claimed >= 10 && claimed_total <= bytes.len()),
            other => prop_assert!(false, "the first read gave {other:?}"),
        }
        let bound = 2 * (bytes.len() + READ_CHUNK_BYTES) + INITIAL_BUFFER_BYTES;
        prop_assert!(
            reader.buffer_capacity() <= bound,
            "{} bytes buffered for {} received (a prefix claiming {claimed})",
            reader.buffer_capacity(),
            bytes.len()
        );
    }

    #[test]
    fn valid_frames_round_trip(frames in proptest::collection::vec(frame_strategy(), 0..20)) {
        let bytes = encode(&frames);
        let mut reader = FrameReader::new(&bytes[..], 1 << 20);
        for sent in &frames {
            let read = block_on(reader.read_frame()).unwrap().unwrap();
            prop_assert!(same(&read, sent), "{read:?} != {sent:?}");
        }
        prop_assert!(block_on(reader.read_frame()).unwrap().is_none());
    }

    #[test]
    fn a_stream_cut_anywhere_is_refused_after_the_whole_frames_before_it(
        frames in proptest::collection::vec(frame_strategy(), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encode(&frames);
        let cut = cut.index(bytes.len() + 1);
        let mut reader = FrameReader::new(&bytes[..cut], 1 << 20);
        let mut read = Vec::new();
        let end = loop {
            match block_on(reader.read_frame()) {
                Ok(Some(frame)) => read.push(frame),
                other => break other,
            }
        };
        // The frames that lie wholly before the cut, and nothing else.
        let mut whole = 0;
        let mut offset = 0;
        for frame in &frames {
            if offset + frame.encoded_len() > cut {
                break;
            }
            offset += frame.encoded_len();
            whole += 1;
        }
        prop_assert_eq!(read.len(), whole);
        for (read, sent) in read.iter().zip(&frames) {
            prop_assert!(same(read, sent));
        }
        if offset == cut {
            prop_assert!(matches!(end, Ok(None)), "{end:?}");
        } else {
            prop_assert!(matches!(end, Err(FrameError::Truncated)), "{end:?}");
        }
    }

    #[test]
    fn a_stream_arriving_in_pieces_waits_for_more_and_reads_the_same_frames(
        frames in proptest::collection::vec(frame_strategy(), 1..8),
        splits in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let bytes = encode(&frames);
        let mut points: Vec<usize> = splits.iter().map(|split| split.index(bytes.len() + 1)).collect();
        points.push(0);
        points.push(bytes.len());
        points.sort_unstable();
        let feed = Feed::default();
        let mut reader = FrameReader::new(feed.clone(), 1 << 20);
        let mut read = Vec::new();
        for piece in points.windows(2) {
            feed.push(&bytes[piece[0]..piece[1]]);
            // Never an error or an end while the stream is open: it waits for more.
            prop_assert!(read_available(&mut reader, &mut read).is_none());
        }
        feed.close();
        prop_assert!(matches!(read_available(&mut reader, &mut read), Some(Ok(()))));
        prop_assert_eq!(read.len(), frames.len());
        for (read, sent) in read.iter().zip(&frames) {
            prop_assert!(same(read, sent));
        }
    }
}
