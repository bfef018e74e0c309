//! A request rmcp's own service answers, cut off when the server closes its
//! streams (the drain's grace ran out).
//!
//! The direct paths (`crate::direct_call`, `crate::session_call`) answer a
//! call still running then with `crate::shutdown::cut_off`'s JSON-RPC
//! error. rmcp's service, which serves every other request (a call asking
//! for log messages, a session not adopted, `resources/read`…), does not:
//! a stateless request's handler stopped by the closing is answered `500`
//! with a plain-text body, and a session's stream ends without the
//! response (its client would try to resume it, on a port that is closed).
//! This layer, in front of rmcp's service, gives such a request the same
//! error as the direct paths:
//!
//! - a POSTed JSON-RPC request whose answer has not begun when the
//!   streams close is answered that error as JSON (`200`), and so is one
//!   rmcp answers `500` after they closed;
//! - an answer that is a stream and ends after the closing without having
//!   carried the response to the request gets that error as its last
//!   event.
//!
//! Everything else (GET streams, notifications, responses, a request
//! rmcp answers before the closing) passes untouched.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body::{Frame, SizeHint};
use rmcp::model::RequestId;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::front::SharedService;
use crate::json_answer::{
    BoxFuture, Event, MAX_HELD_BYTES, answers, data_of, is_event_stream, next_event,
};
use crate::tool_call::{json_response, status_only};

/// rmcp's service (or what wraps it), its answers cut off as the module
/// docs say when `closed` is cancelled.
#[derive(Clone)]
pub(crate) struct CutOff<S> {
    inner: S,
    closed: CancellationToken,
}

impl<S> CutOff<S> {
    /// Wraps `inner`; `closed` is the server's stream-closing token.
    pub(crate) fn new(inner: S, closed: CancellationToken) -> Self {
        CutOff { inner, closed }
    }
}

impl<S> tower::Service<Request<Body>> for CutOff<S>
where
    S: tower::Service<Request<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // rmcp's service is always ready; it is called through a clone.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        self.call_shared(request)
    }
}

impl<S> SharedService for CutOff<S>
where
    S: tower::Service<Request<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse,
    S::Future: Send,
{
    fn call_shared(&self, request: Request<Body>) -> BoxFuture {
        let mut inner = self.inner.clone();
        let closed = self.closed.clone();
        Box::pin(async move {
            if request.method() != Method::POST {
                return Ok(inner.call(request).await?.into_response());
            }
            let (parts, body) = request.into_parts();
            // The malformed-body layer read the body into memory already;
            // this takes its one piece back without copying.
            let bytes = match axum::body::to_bytes(body, usize::MAX).await {
                Ok(bytes) => bytes,
                Err(error) => {
                    tracing::debug!(%error, "request body not read");
                    return Ok(status_only(StatusCode::BAD_REQUEST));
                }
            };
            let id = crate::json_answer::request_id(&bytes);
            let request = Request::from_parts(parts, Body::from(bytes));
            let Some((id, request_id)) = id.and_then(|id| {
                let request_id = serde_json::from_value::<RequestId>(id.clone()).ok()?;
                Some((id, request_id))
            }) else {
                return Ok(inner.call(request).await?.into_response());
            };
            let answered = inner.call(request);
            let response = tokio::select! {
                biased;
                response = answered => response?.into_response(),
                () = closed.cancelled() => return Ok(cut_off(&request_id)),
            };
            if closed.is_cancelled() && response.status() == StatusCode::INTERNAL_SERVER_ERROR {
                return Ok(cut_off(&request_id));
            }
            if !is_event_stream(&response) {
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let watched = Watched {
                body,
                id,
                request_id,
                closed,
                tail: BytesMut::new(),
                state: State::Watching,
            };
            Ok(Response::from_parts(parts, Body::new(watched)))
        })
    }
}

/// The JSON answer of a request cut off.
fn cut_off(id: &RequestId) -> Response {
    json_response(crate::shutdown::cut_off(id), StatusCode::OK)
}

/// Where a watched stream is.
enum State {
    /// Its response has not gone by yet.
    Watching,
    /// It carried its response, or could not be followed (an event larger
    /// than the bound): nothing is added.
    Done,
    /// The error was sent; the stream is over.
    Ended,
}

/// rmcp's stream of a request, followed until its response goes by.
struct Watched {
    body: Body,
    /// The request's id as written, and as rmcp takes it.
    id: Value,
    request_id: RequestId,
    closed: CancellationToken,
    /// The bytes of the event not yet complete.
    tail: BytesMut,
    state: State,
}

impl Watched {
    /// Notes the events `data` completes.
    fn follow(&mut self, data: &Bytes) {
        if !matches!(self.state, State::Watching) {
            return;
        }
        self.tail.extend_from_slice(data);
        let mut scanned = 0;
        while let Some((event, end)) = next_event(&self.tail[scanned..]) {
            let start = scanned;
            scanned += end;
            if let Event::Data(ranges) = event {
                let event = Bytes::copy_from_slice(&self.tail[start..scanned]);
                if answers(&data_of(&event, &ranges), &self.id) {
                    self.state = State::Done;
                    self.tail = BytesMut::new();
                    return;
                }
            }
        }
        let _ = self.tail.split_to(scanned);
        if self.tail.len() > MAX_HELD_BYTES {
            self.state = State::Done;
            self.tail = BytesMut::new();
        }
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if matches!(this.state, State::Ended) {
            return Poll::Ready(None);
        }
        match std::task::ready!(Pin::new(&mut this.body).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    this.follow(&data);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(error)) => Poll::Ready(Some(Err(error))),
            None => {
                if matches!(this.state, State::Watching) && this.closed.is_cancelled() {
                    this.state = State::Ended;
                    let error = crate::shutdown::cut_off(&this.request_id);
                    return Poll::Ready(Some(Ok(Frame::data(crate::sse::event(None, &error)))));
                }
                this.state = State::Ended;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Ended)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a client reads of rmcp's stream `frames` ending after the
    /// streams closed.
    async fn read_after_closing(frames: &[&str]) -> String {
        let frames: Vec<Result<Bytes, Infallible>> = frames
            .iter()
            .map(|f| Ok(Bytes::copy_from_slice(f.as_bytes())))
            .collect();
        let closed = CancellationToken::new();
        closed.cancel();
        let watched = Watched {
            body: Body::from_stream(futures::stream::iter(frames)),
            id: json!(9),
            request_id: RequestId::Number(9),
            closed,
            tail: BytesMut::new(),
            state: State::Watching,
        };
        let bytes = axum::body::to_bytes(Body::new(watched), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_stream_that_carried_its_response_gets_nothing_more() {
        // The response split across writes, after a report.
        let text = read_after_closing(&[
            "data: \nid: 0/0\nretry: 3000\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\nid: 1/0\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":9,\"res",
            "ult\":{\"content\":[]}}\nid: 2/0\n\n",
        ])
        .await;
        assert!(!text.contains("shutting down"), "{text}");
    }

    #[tokio::test]
    async fn a_stream_cut_before_its_response_ends_with_the_error() {
        let text = read_after_closing(&[
            "data: \nid: 0/0\nretry: 3000\n\n",
            // Another request's response is not this one's.
            "data: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\nid: 1/0\n\n",
        ])
        .await;
        let last = text.rsplit("data: ").next().unwrap_or_default();
        let message: Value = serde_json::from_str(last.trim()).unwrap();
        assert_eq!(message["id"], json!(9), "{text}");
        assert_eq!(message["error"]["code"], json!(-32000), "{text}");
    }
}
