//! A response body made of `Bytes` chunks sent as they are (stored batches straight from the
//! log), with its exact length known up front so it goes out with a `Content-Length`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pub struct ChunksBody {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl ChunksBody {
    pub fn new(chunks: Vec<Bytes>) -> ChunksBody {
        let remaining = chunks.iter().map(|chunk| chunk.len() as u64).sum();
        ChunksBody {
            chunks: chunks
                .into_iter()
                .filter(|chunk| !chunk.is_empty())
                .collect(),
            remaining,
        }
    }
}

impl Body for ChunksBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = self.chunks.pop_front();
        if let Some(chunk) = &next {
            self.remaining -= chunk.len() as u64;
        }
        Poll::Ready(next.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn sends_every_chunk_in_order_with_its_exact_length() {
        let body = ChunksBody::new(vec![
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"cde"),
        ]);
        assert_eq!(body.size_hint().exact(), Some(5));
        let collected = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(&collected[..], b"abcde");
    }
}
