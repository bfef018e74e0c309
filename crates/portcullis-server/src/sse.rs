//! Server-sent events written as rmcp writes them, for the answers made in
//! front of it (`crate::session_call`, `crate::direct_call`): the same
//! event framing, keep-alive comment and response headers, so a client
//! sees the same bytes whichever path answered.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderValue;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};

/// The comment rmcp sends after a keep-alive interval without an event.
pub(crate) const KEEP_ALIVE: &[u8] = b":\n\n";

/// An SSE event carrying `message`, after the `id` line if any.
pub(crate) fn event(id: Option<&str>, message: &[u8]) -> Bytes {
    let id = id.unwrap_or_default();
    let mut event = Vec::with_capacity(id.len() + message.len() + 8);
    event.extend_from_slice(id.as_bytes());
    push_event(&mut event, message);
    Bytes::from(event)
}

/// Appends an SSE event carrying `message` (no id) to `events`.
pub(crate) fn push_event(events: &mut Vec<u8>, message: &[u8]) {
    events.extend_from_slice(b"data: ");
    events.extend_from_slice(message);
    events.extend_from_slice(b"\n\n");
}

/// `body` answered `200 text/event-stream` with rmcp's stream headers.
pub(crate) fn response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
