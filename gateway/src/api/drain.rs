//! Reading what the app sent before answering it, so an early answer arrives.
//!
//! Some answers come before the request's body is read: a bad token, a body whose declared
//! length is over the limit, a value one byte too large. HTTP/1.1 lets the server answer then,
//! but if it closes the connection with the rest of the body unread, the app's client is still
//! writing: its write fails with a broken pipe, and the kernel's reset can throw away the
//! answer it had already received. The app then sees a transport error instead of Ferry's clear
//! `400` (an honest client must even treat it as "the request may have arrived"). So after the
//! handler answers, whatever it left unread is read and thrown away, up to [`DRAIN_AT_MOST`]
//! bytes within [`DRAIN_FOR`], and only then is the answer sent. Past either bound the
//! connection is closed as before: an app sending that much after an error is not one a
//! gateway should spend more on. (It runs before the token check, so a caller without the
//! token can make the gateway read up to that much; the API is on loopback only.)

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// The most unread body bytes read and thrown away after an answer.
pub const DRAIN_AT_MOST: u64 = 16 * 1024 * 1024;

/// The longest the answer waits for the unread body.
pub const DRAIN_FOR: Duration = Duration::from_secs(5);

/// Runs `answer` on `request` with a body it can read as usual, and reads the rest after.
pub async fn unread_bodies<F, Fut>(request: Request, answer: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    if request.body().is_end_stream() {
        // Bodiless requests (GETs): nothing can be left unread.
        return answer(request).await;
    }
    // A client that sent `Expect: 100-continue` holds its body back until the server asks
    // for it, which reading it does: an answer given before the handler read anything must
    // go at once, without asking for the body (the client is not writing, so it arrives).
    let waits_to_send = request
        .headers()
        .get(axum::http::header::EXPECT)
        .is_some_and(|expect| expect.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let (parts, body) = request.into_parts();
    let slot = Arc::new(Mutex::new(Slot {
        body: Some(body),
        polled: false,
    }));
    let request = Request::from_parts(parts, Body::new(Lent(slot.clone())));
    let response = answer(request).await;
    let (rest, polled) = {
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        (slot.body.take(), slot.polled)
    };
    if let Some(rest) = rest {
        // What is left, not what was declared: a value refused one byte past its limit has
        // most of its body read already. Declared past the bound, it would be cut off anyway,
        // so none of it is read.
        let left = rest.size_hint().lower();
        if !rest.is_end_stream() && left <= DRAIN_AT_MOST && (polled || !waits_to_send) {
            // Bounded either way; what happens past the bounds is hyper closing, as before.
            let _ = tokio::time::timeout(DRAIN_FOR, throw_away(rest, DRAIN_AT_MOST)).await;
        }
    }
    response
}

/// Reads `body` until it ends, breaks, or has given more than `at_most` bytes.
async fn throw_away(mut body: Body, at_most: u64) -> u64 {
    let mut read = 0u64;
    while read <= at_most {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, |data| data.len() as u64);
            }
            Some(Err(_)) | None => break,
        }
    }
    read
}

/// The request's body, and whether the handler asked it for anything.
struct Slot {
    body: Option<Body>,
    polled: bool,
}

/// The body as the handler sees it: the request's own, lent through a slot the middleware
/// keeps, so what the handler leaves unread is still there when it returns.
struct Lent(Arc<Mutex<Slot>>);

impl HttpBody for Lent {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.polled = true;
        match slot.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        let slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.body.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that gives the frames it was made with, one per poll.
    struct Frames(std::collections::VecDeque<Bytes>);

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = axum::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
            Poll::Ready(self.0.pop_front().map(|data| Ok(Frame::data(data))))
        }
    }

    fn chunks(sizes: &[usize]) -> Body {
        Body::new(Frames(
            sizes
                .iter()
                .map(|size| Bytes::from(vec![0u8; *size]))
                .collect(),
        ))
    }

    #[tokio::test]
    async fn the_rest_is_read_up_to_the_bound_and_no_further() {
        assert_eq!(throw_away(chunks(&[10, 20, 30]), 1_000).await, 60);
        // Stops at the first frame that takes it past the bound, not at the body's end.
        assert_eq!(throw_away(chunks(&[10, 20, 30, 40]), 25).await, 30);
        assert_eq!(throw_away(Body::empty(), 25).await, 0);
    }

    #[tokio::test]
    async fn what_the_handler_leaves_unread_stays_in_the_slot() {
        let slot = Arc::new(Mutex::new(Slot {
            body: Some(chunks(&[5, 7])),
            polled: false,
        }));
        let mut lent = Body::new(Lent(slot.clone()));
        let first = std::future::poll_fn(|cx| Pin::new(&mut lent).poll_frame(cx)).await;
        let first = first.and_then(Result::ok).and_then(|f| f.into_data().ok());
        assert_eq!(first.map(|data| data.len()), Some(5));
        drop(lent);
        let (polled, rest) = {
            let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
            (slot.polled, slot.body.take())
        };
        assert!(polled);
        assert_eq!(throw_away(rest.unwrap_or_default(), 1_000).await, 7);
    }
}
