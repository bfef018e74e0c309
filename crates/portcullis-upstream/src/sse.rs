//! The legacy HTTP+SSE transport (protocol 2024-11-05), which rmcp no longer
//! ships, written on rmcp's `Transport` trait.
//!
//! The client opens a GET event stream; the server's first `endpoint` event
//! names the URL to POST messages to; replies arrive as `message` events on
//! the stream. Both the GET and every POST go through [`GuardedHttp`] (each
//! POST as a short exchange, on the server's call lane), so the
//! SSRF guard, the redirect rules and credential handling are the same as
//! for Streamable HTTP. An `endpoint` naming another origin than the stream's
//! is refused before anything is posted to it: a server must not be able to
//! send our credentials elsewhere. A re-sent `endpoint` event updates the
//! POST URL under the same rule. Each `message` event is read by the
//! request it answers (`crate::answers`), as stdio lines are; a request of
//! the server's that cannot be read is refused by its id. A `tools/call`
//! is posted, and its answer handed back, by the direct call path
//! ([`SseMessages`], `connection/direct/sse.rs`).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::header::ACCEPT;
use http::{HeaderMap, HeaderValue, Method};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::SseError;
use sse_stream::Sse;
use thiserror::Error;
use tokio::sync::Semaphore;
use url::Url;

use crate::answers::{Awaited, AwaitedAnswer, Incoming, Reader};
use crate::http::{CallCredential, GuardedHttp, HttpFailure, sse_events};

type Events = Pin<Box<dyn Stream<Item = Result<Sse, SseError>> + Send>>;

/// Largest SSE event accepted from a legacy server.
const MAX_EVENT_SIZE: usize = 16 << 20;

/// Refusals of the server's unreadable requests on their way at once; more
/// are dropped (logged at debug), so a server that streams them cannot make
/// the gateway post without bound.
pub(crate) const MAX_REFUSALS_IN_FLIGHT: usize = 8;

/// How long one refusal may take to post.
const REFUSAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the legacy SSE transport failed.
#[derive(Debug, Error)]
pub(crate) enum LegacySseError {
    /// The guarded request failed (host refused, redirects, 401/403, I/O).
    #[error(transparent)]
    Http(#[from] HttpFailure),
    /// The server answered with an unexpected status.
    #[error("MCP server \"{server}\" answered HTTP {status}")]
    Status { server: String, status: u16 },
    /// The stream ended before naming an endpoint.
    #[error("MCP server \"{0}\" closed its event stream before sending an endpoint event")]
    NoEndpoint(String),
    /// The endpoint is not a URL, or is on another origin.
    #[error("MCP server \"{server}\": {reason}")]
    BadEndpoint { server: String, reason: String },
    /// A message could not be encoded.
    #[error("could not encode a message: {0}")]
    Encode(#[from] serde_json::Error),
}

/// A connected legacy SSE session.
pub(crate) struct LegacySseTransport {
    http: GuardedHttp,
    /// The URL the event stream answered from (after redirects): endpoints
    /// must share its origin.
    stream_url: Url,
    /// Where messages are posted: the latest `endpoint` event's URL.
    post_url: Arc<Mutex<Url>>,
    events: Events,
    reader: Reader,
    refusals: Arc<Semaphore>,
}

impl LegacySseTransport {
    /// Opens the event stream and waits for the `endpoint` event.
    pub(crate) async fn connect(http: GuardedHttp, sse_url: Url) -> Result<Self, LegacySseError> {
        let mut protocol = HeaderMap::new();
        protocol.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let (response, stream_url) = http
            .send(Method::GET, sse_url, protocol, None, None)
            .await?;
        if !response.status().is_success() {
            return Err(LegacySseError::Status {
                server: http.server().to_owned(),
                status: response.status().as_u16(),
            });
        }
        let mut events: Events = sse_events(response, MAX_EVENT_SIZE);
        let post_url = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    break endpoint_url(&http, &stream_url, event.data.as_deref().unwrap_or(""))?;
                }
                // Comments, pings and early messages before the endpoint.
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    return Err(LegacySseError::NoEndpoint(http.server().to_owned()));
                }
            }
        };
        let reader = Reader::new(http.server().to_owned());
        Ok(LegacySseTransport {
            http,
            stream_url,
            post_url: Arc::new(Mutex::new(post_url)),
            events,
            reader,
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT)),
        })
    }
}

impl LegacySseTransport {
    /// The session as the direct call path uses it ([`SseMessages`]).
    pub(crate) fn messages(&self) -> SseMessages {
        SseMessages {
            http: self.http.clone(),
            post_url: self.post_url.clone(),
            awaited: self.reader.awaited.clone(),
        }
    }

    fn post_url(&self) -> Url {
        lock(&self.post_url).clone()
    }
}

/// A legacy SSE session as the direct call path uses it: a request is
/// posted by its call, and its answer (a `message` event) handed to that
/// call by the transport's reader, never reaching rmcp (the direct path's
/// ids are from a range rmcp's never reach). Everything else on the
/// stream stays rmcp's.
#[derive(Clone)]
pub(crate) struct SseMessages {
    http: GuardedHttp,
    post_url: Arc<Mutex<Url>>,
    awaited: Arc<Mutex<Awaited>>,
}

impl SseMessages {
    /// Starts waiting for the answer to request `id` (before it is
    /// posted, so the answer cannot come first); `None` when the
    /// transport is gone.
    pub(crate) fn expect(&self, id: u64) -> Option<AwaitedAnswer> {
        crate::answers::expect(&self.awaited, id)
    }

    /// Posts one serialised message to the session's current endpoint,
    /// with `token` as the call's credential when given.
    pub(crate) async fn post(
        &self,
        body: Vec<u8>,
        token: Option<&str>,
    ) -> Result<(), LegacySseError> {
        let url = lock(&self.post_url).clone();
        post_bytes(&self.http, url, Bytes::from(body), token).await
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resolves an `endpoint` event's data against the stream URL, refusing
/// another origin.
fn endpoint_url(http: &GuardedHttp, stream_url: &Url, data: &str) -> Result<Url, LegacySseError> {
    let bad = |reason: &str| LegacySseError::BadEndpoint {
        server: http.server().to_owned(),
        reason: reason.to_owned(),
    };
    let url = stream_url
        .join(data.trim())
        .map_err(|_| bad("the endpoint event is not a URL"))?;
    if url.origin() != stream_url.origin() {
        return Err(bad("Endpoint origin does not match connection origin"));
    }
    Ok(url)
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = LegacySseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Noted before it is posted, so its answer cannot arrive first.
        self.reader.sent(&item);
        post(self.http.clone(), self.post_url(), item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        // Cancel-safe: the only await is the stream's `next`.
        loop {
            let event = self.events.next().await?.ok()?;
            match event.event.as_deref() {
                None | Some("message") => {
                    let Some(data) = event.data else { continue };
                    match self.reader.read(data.as_bytes()) {
                        Incoming::Message(message) => return Some(message),
                        Incoming::Refuse(answer) => {
                            // Posted on its own task: `receive` may be
                            // dropped at any await.
                            match self.refusals.clone().try_acquire_owned() {
                                Ok(permit) => {
                                    let post = post(self.http.clone(), self.post_url(), answer);
                                    tokio::spawn(async move {
                                        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, post).await;
                                        drop(permit);
                                    });
                                }
                                Err(_) => tracing::debug!(
                                    server = self.http.server(),
                                    "dropped the refusal of an unreadable request: \
                                     {MAX_REFUSALS_IN_FLIGHT} already on their way"
                                ),
                            }
                        }
                        Incoming::Skip => {}
                    }
                }
                Some("endpoint") => {
                    let data = event.data.unwrap_or_default();
                    match endpoint_url(&self.http, &self.stream_url, &data) {
                        Ok(url) => *lock(&self.post_url) = url,
                        // A moved endpoint on another origin ends the session
                        // rather than silently keeping the old one.
                        Err(e) => {
                            tracing::warn!("{e}");
                            return None;
                        }
                    }
                }
                Some(_) => continue,
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the stream closes the GET, which ends the legacy session.
        self.events = Box::pin(futures::stream::empty());
        Ok(())
    }
}

/// Posts one message to the session's endpoint, with the call's credential
/// if it is a request that carries one. 2024-11-05 servers answer 202; the
/// reply comes on the stream. A short exchange, so on the call lane:
/// reqwest's pooled client hands each request between tasks and turns
/// every answer's URI back into a `Url`, most of a POST's cost.
fn post(
    http: GuardedHttp,
    url: Url,
    item: ClientJsonRpcMessage,
) -> impl Future<Output = Result<(), LegacySseError>> + Send + 'static {
    let token = match &item {
        ClientJsonRpcMessage::Request(r) => r
            .request
            .extensions()
            .get::<CallCredential>()
            .map(|c| c.0.clone()),
        _ => None,
    };
    let body = serde_json::to_vec(&item).map(Bytes::from);
    async move { post_bytes(&http, url, body?, token.as_deref()).await }
}

/// Posts `body` (one serialised message) to `url`.
async fn post_bytes(
    http: &GuardedHttp,
    url: Url,
    body: Bytes,
    token: Option<&str>,
) -> Result<(), LegacySseError> {
    let (response, _) = http
        .send_exchange(Method::POST, url, HeaderMap::new(), Some(body), token)
        .await?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(LegacySseError::Status {
            server: http.server().to_owned(),
            status: response.status().as_u16(),
        })
    }
}
