//! A session-era request answered with plain JSON when its answer needs no
//! stream.
//!
//! rmcp answers every request that carries an `Mcp-Session-Id` (and the
//! `initialize` that opens a session) with an SSE stream: a priming event,
//! a keep-alive timer, a chunked body, even when the only event is the
//! request's response. 2025-11-25 lets the server answer a POSTed request
//! with either, and a client must accept both; a JSON answer is one
//! fixed-length write, which is what a stateless server gives the same
//! client. This layer, in front of rmcp's service on the session path,
//! holds rmcp's stream until its first real event:
//!
//! - the priming event (an `id`/`retry` with empty data) and events
//!   without data are held and skipped;
//! - the JSON-RPC response (or error) to the POSTed request: answered
//!   `200 application/json` with exactly that message as the body, with
//!   the headers rmcp set (`Mcp-Session-Id` on an `initialize`) and a
//!   `Content-Length`; the rest of the stream is dropped (rmcp closes a
//!   request's stream after its response);
//! - anything else (a progress or log notification, a server request for
//!   sampling, elicitation or roots, a keep-alive comment, an event of
//!   another type, the end of the stream, or more than [`MAX_HELD_BYTES`]
//!   held): the stream is answered as rmcp made it, the held bytes first
//!   and then the rest, unchanged.
//!
//! A keep-alive comment ends the hold because it means a keep-alive
//! interval passed with nothing to send: a call that long gains nothing
//! from a JSON answer, while the client (and any proxy) would otherwise see
//! no response headers until the call ends, and the priming event's id,
//! which lets a client resume a broken stream with `Last-Event-ID`, would
//! not reach it. So the hold never outlasts one keep-alive interval, and it
//! waits on nothing but rmcp's own stream: rmcp's timeouts and the server's
//! stream cancellation end it as they end the stream. A client that goes
//! away drops this future and with it rmcp's stream, exactly as dropping
//! the stream's body did before.
//!
//! Only a POST carrying a JSON-RPC request whose `Accept` admits JSON is
//! held (`application/json` named with a quality other than 0); GET
//! streams, POSTed notifications and responses (answered `202`), and every
//! other answer pass untouched.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body::{Body as _, Frame, SizeHint};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::media_type::{essence_is, refused};

/// Most bytes of rmcp's stream held while waiting for its first real
/// event; beyond it the answer is streamed. rmcp writes an event in one
/// piece, so a larger answer is in memory either way; the bound keeps the
/// hold from copying and scanning a very large result a second time.
pub(crate) const MAX_HELD_BYTES: usize = 1024 * 1024;

/// rmcp's service on the session path, its answers to plain requests made
/// plain JSON (see the module docs).
#[derive(Clone)]
pub(crate) struct JsonAnswer<S> {
    inner: S,
}

impl<S> JsonAnswer<S> {
    /// Wraps rmcp's service.
    pub(crate) fn new(inner: S) -> Self {
        JsonAnswer { inner }
    }
}

/// The future of each layer this crate puts in front of rmcp's service
/// (this one, `crate::cut_off`, `crate::direct_call`).
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<S> tower::Service<Request<Body>> for JsonAnswer<S>
where
    S: tower::Service<Request<Body>, Error = Infallible> + Clone + Send + 'static,
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
        let mut inner = self.inner.clone();
        Box::pin(async move {
            if request.method() != Method::POST || !admits_json(request.headers()) {
                return Ok(inner.call(request).await?.into_response());
            }
            let (parts, body) = request.into_parts();
            // The malformed-body layer read the body into memory already;
            // this takes its one piece back without copying.
            let bytes = match axum::body::to_bytes(body, usize::MAX).await {
                Ok(bytes) => bytes,
                Err(error) => {
                    tracing::debug!(%error, "request body not read");
                    return Ok(StatusCode::BAD_REQUEST.into_response());
                }
            };
            let request = Request::from_parts(parts, Body::from(bytes.clone()));
            let response = inner.call(request).await?.into_response();
            if !is_event_stream(&response) {
                return Ok(response);
            }
            Ok(match request_id(&bytes) {
                Some(id) => hold(response, &id).await,
                None => response,
            })
        })
    }
}

/// `Accept` names `application/json` with a quality other than 0 (the
/// malformed-body layer already made sure it names event streams too).
fn admits_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| essence_is(range, "application/json") && !refused(range))
}

/// The id of a JSON-RPC request (`None` for a notification, a response, or
/// anything rmcp will refuse on its own).
pub(crate) fn request_id(body: &[u8]) -> Option<Value> {
    #[derive(Deserialize)]
    struct Head {
        id: Option<Value>,
        method: Option<IgnoredAny>,
    }
    let head: Head = serde_json::from_slice(body).ok()?;
    head.method?;
    head.id.filter(|id| !id.is_null())
}

pub(crate) fn is_event_stream(response: &Response) -> bool {
    response.status() == StatusCode::OK
        && response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| essence_is(value, "text/event-stream"))
}

/// Holds `response`'s stream until its first real event, then answers
/// JSON or falls back to the stream (see the module docs).
async fn hold(response: Response, id: &Value) -> Response {
    let (parts, mut body) = response.into_parts();
    let mut held = BytesMut::new();
    let mut scanned = 0;
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let data = match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    return stream(parts, held.freeze(), Some(Ok(frame)), Some(body));
                }
            },
            Some(Err(error)) => {
                return stream(parts, held.freeze(), Some(Err(error)), Some(body));
            }
            None => return stream(parts, held.freeze(), None, None),
        };
        held.extend_from_slice(&data);
        if held.len() > MAX_HELD_BYTES {
            return stream(parts, held.freeze(), None, Some(body));
        }
        while let Some((event, end)) = next_event(&held[scanned..]) {
            let start = scanned;
            scanned += end;
            match event {
                Event::Skip => continue,
                Event::Data(ranges) if scanned == held.len() => {
                    let held = held.freeze();
                    let event = held.slice(start..scanned);
                    let message = data_of(&event, &ranges);
                    if answers(&message, id) {
                        return json(parts, message);
                    }
                    return stream(parts, held, None, Some(body));
                }
                Event::Data(_) | Event::Stop => {
                    return stream(parts, held.freeze(), None, Some(body));
                }
            }
        }
    }
}

/// The answer as plain JSON: rmcp's headers with the content type and
/// length of `message`.
fn json(mut parts: http::response::Parts, message: Bytes) -> Response {
    let headers = &mut parts.headers;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(message.len()));
    Response::from_parts(parts, Body::from(message))
}

/// The stream as rmcp made it: `held`, then `next` (a frame taken but not
/// data), then the rest of `rest`.
fn stream(
    parts: http::response::Parts,
    held: Bytes,
    next: Option<Result<Frame<Bytes>, axum::Error>>,
    rest: Option<Body>,
) -> Response {
    let held = (!held.is_empty()).then_some(held);
    Response::from_parts(parts, Body::new(Resumed { held, next, rest }))
}

/// A body whose first bytes were read ahead.
struct Resumed {
    held: Option<Bytes>,
    next: Option<Result<Frame<Bytes>, axum::Error>>,
    rest: Option<Body>,
}

impl http_body::Body for Resumed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(Ok(Frame::data(held))));
        }
        if let Some(next) = this.next.take() {
            return Poll::Ready(Some(next));
        }
        match &mut this.rest {
            Some(rest) => {
                let frame = std::task::ready!(Pin::new(rest).poll_frame(cx));
                if frame.is_none() {
                    this.rest = None;
                }
                Poll::Ready(frame)
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none()
            && self.next.is_none()
            && self
                .rest
                .as_ref()
                .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        // The rest is a stream: no length is promised.
        SizeHint::default()
    }
}

/// One SSE event as this layer reads it.
#[derive(Debug, PartialEq)]
pub(crate) enum Event {
    /// No data, or empty data: the priming event, a bare `id` or `retry`.
    Skip,
    /// A message: where its `data` values lie in the event's bytes.
    Data(Vec<(usize, usize)>),
    /// Anything that ends the hold: a keep-alive (an event of comments
    /// only), an `event` type other than `message`, a field rmcp does not
    /// write.
    Stop,
}

/// The first complete event of `buffer` and where it ends (after its blank
/// line), or `None` while it is incomplete. Lines end in LF (rmcp's) or
/// CRLF.
pub(crate) fn next_event(buffer: &[u8]) -> Option<(Event, usize)> {
    let mut at = 0;
    let mut data = Vec::new();
    let mut fields = false;
    let mut stop = false;
    loop {
        let newline = buffer[at..].iter().position(|&b| b == b'\n')?;
        let end = at + newline;
        let line = &buffer[at..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line_start = at;
        at = end + 1;
        if line.is_empty() {
            let event = match (stop, fields) {
                (true, _) | (false, false) => Event::Stop,
                _ if data.iter().all(|&(s, e)| s == e) => Event::Skip,
                _ => Event::Data(data),
            };
            return Some((event, at));
        }
        if line[0] == b':' {
            continue;
        }
        fields = true;
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => (&line[..colon], colon + 1),
            None => (line, line.len()),
        };
        let value_start = match line.get(value) {
            Some(b' ') => value + 1,
            _ => value,
        };
        match name {
            b"data" => data.push((line_start + value_start, line_start + line.len())),
            b"id" | b"retry" => {}
            b"event" => stop |= &line[value_start..] != b"message",
            _ => stop = true,
        }
    }
}

/// The event's data: its one `data` value as it lies, or its values
/// joined by newlines.
pub(crate) fn data_of(event: &Bytes, ranges: &[(usize, usize)]) -> Bytes {
    match ranges {
        [(start, end)] => event.slice(*start..*end),
        _ => {
            let mut joined = BytesMut::new();
            for (n, (start, end)) in ranges.iter().enumerate() {
                if n > 0 {
                    joined.extend_from_slice(b"\n");
                }
                joined.extend_from_slice(&event[*start..*end]);
            }
            joined.freeze()
        }
    }
}

/// `message` is the JSON-RPC response or error to the request `id`.
pub(crate) fn answers(message: &[u8], id: &Value) -> bool {
    // rmcp writes a response as `{"jsonrpc":"2.0","id":ID,"result":…}` (or
    // `"error"`), its id written as serde_json writes the request's: told
    // by that beginning without reading the whole result. Anything else is
    // read in full.
    const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    if let (Some(rest), Ok(id)) = (message.strip_prefix(HEAD), serde_json::to_vec(id))
        && let Some(rest) = rest.strip_prefix(id.as_slice())
        && (rest.starts_with(br#","result":"#) || rest.starts_with(br#","error":"#))
    {
        return true;
    }
    #[derive(Deserialize)]
    struct Reply {
        id: Option<Value>,
        method: Option<IgnoredAny>,
        result: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
    }
    let Ok(reply) = serde_json::from_slice::<Reply>(message) else {
        return false;
    };
    reply.method.is_none()
        && (reply.result.is_some() != reply.error.is_some())
        && reply.id.as_ref() == Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> Option<(Event, usize)> {
        next_event(text.as_bytes())
    }

    #[test]
    fn events_are_read_as_rmcp_writes_them() {
        // The priming event: an id, empty data, a retry.
        assert_eq!(
            event("data: \nid: 0/0\nretry: 3000\n\nrest"),
            Some((Event::Skip, 28))
        );
        assert_eq!(event("id: 1\n\n"), Some((Event::Skip, 7)));
        let text = "data: {\"id\":1}\nid: 0/1\n\n";
        let Some((Event::Data(ranges), end)) = event(text) else {
            panic!("not data")
        };
        assert_eq!(end, text.len());
        assert_eq!(&text[ranges[0].0..ranges[0].1], "{\"id\":1}");
        // A keep-alive comment ends the hold.
        assert_eq!(event(":\n\n"), Some((Event::Stop, 3)));
        assert_eq!(event("event: other\ndata: x\n\n").unwrap().0, Event::Stop);
        assert_eq!(event("weird: x\ndata: x\n\n").unwrap().0, Event::Stop);
        // Comments among fields are ignored; CRLF and no space are read.
        let Some((Event::Data(_), _)) = event(": c\r\nevent: message\r\ndata:x\r\n\r\n") else {
            panic!("not data")
        };
        // Incomplete: wait for more.
        assert_eq!(event("data: {\"id\":1}\n"), None);
        assert_eq!(event(""), None);
    }

    #[test]
    fn several_data_lines_are_joined() {
        let text = Bytes::from_static(b"data: a\ndata: b\n\n");
        let Some((Event::Data(ranges), _)) = next_event(&text) else {
            panic!("not data")
        };
        assert_eq!(data_of(&text, &ranges), Bytes::from_static(b"a\nb"));
    }

    #[test]
    fn only_the_response_to_the_request_answers_it() {
        let id = Value::from(7);
        assert!(answers(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#, &id));
        assert!(answers(
            br#"{"jsonrpc":"2.0","id":7,"error":{"code":1}}"#,
            &id
        ));
        assert!(!answers(br#"{"jsonrpc":"2.0","id":8,"result":{}}"#, &id));
        assert!(!answers(br#"{"jsonrpc":"2.0","id":"7","result":{}}"#, &id));
        assert!(!answers(
            br#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}}"#,
            &id
        ));
        assert!(!answers(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            &id
        ));
        assert!(!answers(b"not json", &id));
        // Keys in another order are read in full.
        assert!(answers(br#"{"result":{},"id":7,"jsonrpc":"2.0"}"#, &id));
        assert!(!answers(br#"{"method":"x","id":7,"jsonrpc":"2.0"}"#, &id));
        // A string id as serde_json writes it, escapes included.
        let id = Value::from("a\"b\u{1}é");
        let written = r#"{"jsonrpc":"2.0","id":"a\"b\u0001é","result":{}}"#;
        assert!(answers(written.as_bytes(), &id));
        assert!(!answers(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#, &id));
    }

    #[test]
    fn requests_are_told_from_other_messages() {
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#),
            Some(Value::from("a"))
        );
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            None
        );
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), None);
        assert_eq!(request_id(b"[]"), None);
    }

    const PRIMING: &str = "data: \nid: 0/0\nretry: 3000\n\n";

    /// rmcp's answer: an event stream of `frames`, with a session header.
    fn sse(frames: &[&str]) -> Response {
        let frames: Vec<Result<Bytes, Infallible>> = frames
            .iter()
            .map(|f| Ok(Bytes::copy_from_slice(f.as_bytes())))
            .collect();
        let mut response = Response::new(Body::from_stream(futures::stream::iter(frames)));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert("mcp-session-id", HeaderValue::from_static("s-1"));
        response
    }

    async fn held(frames: &[&str]) -> (String, HeaderMap, String) {
        let response = hold(sse(frames), &Value::from(7)).await;
        let headers = response.headers().clone();
        let kind = headers[CONTENT_TYPE].to_str().unwrap().to_owned();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (kind, headers, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_response_alone_becomes_the_json_answer() {
        let response = r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#;
        let event = format!("data: {response}\nid: 0/1\n\n");
        let (kind, headers, body) = held(&[PRIMING, &event]).await;
        assert_eq!(kind, "application/json");
        assert_eq!(body, response);
        assert_eq!(headers[CONTENT_LENGTH], response.len().to_string().as_str());
        assert_eq!(headers["mcp-session-id"], "s-1");
    }

    #[tokio::test]
    async fn anything_else_gives_back_the_stream_unchanged() {
        let progress =
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n";
        let result = "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n";
        let other = "data: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n";
        let large = format!(
            "data: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"text\":\"{}\"}}}}\n\n",
            "x".repeat(MAX_HELD_BYTES)
        );
        for frames in [
            // progress first, then the result
            vec![PRIMING, progress, result],
            // a keep-alive before anything
            vec![PRIMING, ":\n\n", result],
            // the stream ends with no event (a server-closed stream)
            vec![PRIMING],
            // another request's response
            vec![PRIMING, other],
            // more than the bound
            vec![PRIMING, large.as_str()],
            // an event split across frames, then something after it
            vec![
                PRIMING,
                "data: {\"jsonrpc\":\"2.0\",",
                "\"id\":7,\"result\":{}}\n\n: x\n\n",
            ],
        ] {
            let (kind, headers, body) = held(&frames).await;
            assert_eq!(kind, "text/event-stream", "{frames:?}");
            assert_eq!(body, frames.concat(), "{frames:?}");
            assert!(!headers.contains_key(CONTENT_LENGTH));
            assert_eq!(headers["mcp-session-id"], "s-1");
        }
        // Split across frames but whole at the end: still the JSON answer.
        let (kind, _, body) = held(&[
            PRIMING,
            "data: {\"jsonrpc\":\"2.0\",",
            "\"id\":7,\"result\":{}}\n\n",
        ])
        .await;
        assert_eq!(kind, "application/json");
        assert_eq!(body, r#"{"jsonrpc":"2.0","id":7,"result":{}}"#);
    }

    #[test]
    fn a_zero_quality_refuses_json() {
        let accept = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(ACCEPT, HeaderValue::from_static(value));
            admits_json(&headers)
        };
        assert!(accept("application/json, text/event-stream"));
        assert!(accept("text/event-stream, Application/JSON; q=0.5"));
        assert!(accept("application/json;q=0.01, text/event-stream"));
        assert!(!accept("application/json;q=0, text/event-stream"));
        assert!(!accept("application/json; Q=0.000, text/event-stream"));
        assert!(!accept("text/event-stream"));
    }
}
