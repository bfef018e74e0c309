//! The call lane: the HTTP/1.1 exchanges of the direct call path and of
//! the legacy SSE transport's POSTs, with each connection driven by the
//! request that uses it.
//!
//! Why: reqwest's pooled client (hyper-util's) runs every connection on a
//! task of its own and spawns one more per request to put the connection
//! back once its body is read, so a call crosses between tasks four times
//! (request, response head, body, return to the pool), and at one client
//! each crossing may wake the runtime's other worker. Here the call polls
//! its connection itself while it waits for the answer and reads its
//! body: one task, no spawn, no hand-off. Measured on loopback: see
//! `docs/performance-history.md`, "The direct HTTP call's connection
//! driven by the call".
//!
//! A caller may stop reading an answer before its end (an event stream once
//! its answer came). What has arrived of the rest is read then, without
//! waiting, and whatever is still on its way when the connection is next
//! wanted ([`Unread`]); a connection whose answer has not ended by then is
//! closed, so no call waits on a stream a server holds open. A finished
//! idle connection is taken before one with its answer's end unread.
//!
//! What is kept, exactly as reqwest's client does it: the connector
//! (hyper-util's, with the server's [`GuardedResolver`]: a name resolved
//! once per connection, only admitted addresses dialled; the same 10 s
//! connect timeout, `TCP_NODELAY`, TCP keep-alive and happy eyeballs),
//! TLS (hyper-rustls over the same `rustls` configuration as the server's
//! reqwest client), the `Host` and default `Accept` headers, the idle
//! connections' 90 s lifetime and the retry of a request a reused
//! connection closed before it was sent. Everything above the exchange
//! (the SSRF check of each URL, redirects, credentials, body limits, error
//! mapping) stays in [`crate::http::GuardedHttp::send`]. The lane is used
//! only where reqwest would connect straight to the server: never with a
//! caller's own HTTP client, never when a proxy is configured in the
//! environment.

use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use http::header::{ACCEPT, Entry, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::client::conn::http1;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioIo;
use tower_service::Service;
use url::{Position, Url};

use crate::hosts::GuardedResolver;

/// How long a connection may wait idle for its next request (reqwest's
/// `pool_idle_timeout`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per lane (one per call in flight at the busiest
/// moment, below this); the oldest is closed beyond it. reqwest keeps any
/// number: this only bounds the sockets and buffers a lane holds.
const MAX_IDLE: usize = 256;

/// reqwest's `connect_timeout` as the guarded client sets it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// reqwest's default TCP keep-alive.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_RETRIES: u32 = 3;

type Io = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
type Driver = http1::Connection<Io, Full<Bytes>>;

/// The guarded client for one remote server (`crate::hosts`) and, beside
/// it, the call lane over the same resolver and TLS configuration (`None`
/// where the lane does not apply).
pub(crate) fn guarded_client_and_lane(
    resolver: GuardedResolver,
) -> Result<(reqwest::Client, Option<Arc<Lane>>), crate::tls::ClientBuildError> {
    let tls = crate::tls::shared()?;
    let lane = Lane::new(resolver.clone(), tls.clone());
    Ok((crate::hosts::guarded_client_with(resolver, tls)?, lane))
}

/// Why an exchange failed. The source chain is what reqwest's error would
/// carry (the connector's error, hyper's), so a transport failure reads the
/// same to a person.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaneError {
    /// The connection could not be opened.
    #[error("error sending request: connect")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The exchange failed on an open connection.
    #[error("error sending request")]
    Exchange(#[source] hyper::Error),
    /// The URL cannot be requested (no host).
    #[error("the URL cannot be requested")]
    Url,
}

/// Where a connection leads: scheme, host and port.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Origin {
    https: bool,
    host: String,
    port: u16,
}

/// One HTTP/1.1 connection: the handle requests are sent on and the
/// future that does its I/O, polled by whoever is waiting on it.
struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    /// `None` once it finished (the connection is closed).
    driver: Option<Driver>,
}

impl Conn {
    /// Polls the connection's I/O; forgets it once it ends.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(driver) = self.driver.as_mut()
            && Pin::new(driver).poll(cx).is_ready()
        {
            self.driver = None;
        }
    }

    /// Whether it can take another request now: open, and its last
    /// exchange done (polled once more so hyper sees that).
    fn reusable(&mut self) -> bool {
        self.drive(&mut Context::from_waker(std::task::Waker::noop()));
        self.driver.is_some() && self.sender.is_ready()
    }
}

/// A connection waiting for its next request.
struct Idle {
    origin: Origin,
    conn: Box<Conn>,
    since: Instant,
    /// The rest of its last answer, when that answer's reader stopped
    /// before its end had arrived (see [`Unread`]).
    unread: Option<Unread>,
}

/// The end of an answer whose reader stopped early, read on (and dropped)
/// only when its connection is next wanted. An event stream's server writes
/// the stream's end just after the answer's event; at one client the
/// answer is read, and the stream dropped, before that end arrives more
/// often than not, and closing the connection then made a third of calls
/// to such a server open a new one. By the next request the end is
/// normally there.
struct Unread {
    body: Incoming,
    /// Bytes of it already read and dropped.
    drained: usize,
}

/// Where reading the rest of an answer without waiting left it.
enum Drained {
    /// Read to its end: the connection can take the next request.
    End,
    /// More is still to come.
    Waiting,
    /// Failed, closed, or longer than [`MAX_DRAIN`]: the connection goes.
    Spent,
}

impl Unread {
    /// Reads on what has arrived of the body, dropping it, without waiting.
    fn drain(&mut self, conn: &mut Conn) -> Drained {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            conn.drive(&mut cx);
            if self.body.is_end_stream() {
                return Drained::End;
            }
            match Pin::new(&mut self.body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    self.drained += frame.data_ref().map_or(0, Bytes::len);
                    if self.drained > MAX_DRAIN {
                        return Drained::Spent;
                    }
                }
                Poll::Ready(None) => return Drained::End,
                Poll::Ready(Some(Err(_))) => return Drained::Spent,
                Poll::Pending if conn.driver.is_none() => return Drained::Spent,
                Poll::Pending => return Drained::Waiting,
            }
        }
    }
}

/// The call lane of one server (see the module's documentation).
pub(crate) struct Lane {
    connector: HttpsConnector<HttpConnector<LaneResolver>>,
    idle: Mutex<Vec<Idle>>,
}

impl Lane {
    /// The lane of a server whose reqwest client was built with `resolver`
    /// and `tls`; `None` where reqwest would not connect straight to the
    /// server (a proxy configured in the environment).
    pub(crate) fn new(resolver: GuardedResolver, tls: rustls::ClientConfig) -> Option<Arc<Lane>> {
        if proxied() {
            return None;
        }
        let mut http = HttpConnector::new_with_resolver(LaneResolver(resolver));
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_keepalive(Some(KEEPALIVE));
        http.set_keepalive_interval(Some(KEEPALIVE));
        http.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
        let connector = HttpsConnector::from((http, Arc::new(tls)));
        Some(Arc::new(Lane {
            connector,
            idle: Mutex::new(Vec::new()),
        }))
    }

    /// Sends one request to `url` and returns its response, whose body
    /// drives the connection as it is read. `headers` are the request's,
    /// merged as reqwest's request builder merges them.
    pub(crate) async fn send(
        self: &Arc<Self>,
        method: Method,
        url: &Url,
        mut headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<reqwest::Response, LaneError> {
        let origin = Origin {
            https: url.scheme() == "https",
            host: url.host_str().ok_or(LaneError::Url)?.to_owned(),
            port: url.port_or_known_default().ok_or(LaneError::Url)?,
        };
        // reqwest's default header, then hyper-util's `Host`.
        if let Entry::Vacant(entry) = headers.entry(ACCEPT) {
            entry.insert(HeaderValue::from_static("*/*"));
        }
        if let Entry::Vacant(entry) = headers.entry(HOST) {
            let host = match url.port() {
                Some(port) => HeaderValue::from_str(&format!("{}:{port}", origin.host)),
                None => HeaderValue::from_str(&origin.host),
            };
            entry.insert(host.map_err(|_| LaneError::Url)?);
        }
        // Origin form, as hyper-util writes a request to a server.
        let target = match &url[Position::BeforePath..Position::AfterQuery] {
            "" => "/",
            target => target,
        };
        let uri: Uri = target.parse().map_err(|_| LaneError::Url)?;
        let body = body.unwrap_or_default();
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        let (mut conn, mut reused) = match self.checkout(&origin) {
            Some(conn) => (conn, true),
            // Boxed, as connections are: the connector's state and
            // hyper's are kilobytes, and the call's future is moved whole.
            None => (Box::pin(self.connect(&origin)).await?, false),
        };
        loop {
            let sent = conn.sender.try_send_request(request);
            let mut sent = std::pin::pin!(sent);
            let answered = std::future::poll_fn(|cx| {
                conn.drive(cx);
                sent.as_mut().poll(cx)
            })
            .await;
            match answered {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let exchange = Exchange {
                        body: Some(body),
                        conn: Some(conn),
                        lane: self.clone(),
                        origin,
                    };
                    let body = reqwest::Body::wrap_stream(exchange);
                    return Ok(reqwest_response(parts, body));
                }
                // A reused connection the server closed before the request
                // went out: sent once more on a new one, as hyper-util does.
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => {
                        request = unsent;
                        conn = Box::pin(self.connect(&origin)).await?;
                        reused = false;
                    }
                    _ => return Err(LaneError::Exchange(error.into_error())),
                },
            }
        }
    }

    /// An idle connection to `origin` that can take a request, if any.
    fn checkout(&self, origin: &Origin) -> Option<Box<Conn>> {
        loop {
            let mut candidate = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                expire(&mut idle);
                // The newest connection whose exchange is done; else the
                // oldest with an answer's end unread, whose end has had the
                // longest to arrive.
                let at = idle
                    .iter()
                    .rposition(|entry| entry.origin == *origin && entry.unread.is_none())
                    .or_else(|| idle.iter().position(|entry| entry.origin == *origin))?;
                idle.remove(at)
            };
            // Read outside the lock; a connection that fails here is closed
            // as it is dropped, and the next one tried.
            if let Some(mut unread) = candidate.unread.take()
                && !matches!(unread.drain(&mut candidate.conn), Drained::End)
            {
                continue;
            }
            // A server may have closed it while it waited.
            if candidate.conn.reusable() {
                return Some(candidate.conn);
            }
        }
    }

    /// Puts a connection back for the next request: one whose exchange is
    /// done, or one whose last answer has `unread` still to come.
    fn checkin(&self, origin: Origin, mut conn: Box<Conn>, unread: Option<Unread>) {
        if unread.is_none() && !conn.reusable() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // Also here, so a lane no longer called does not keep its sockets.
        expire(&mut idle);
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(Idle {
            origin,
            conn,
            since: Instant::now(),
            unread,
        });
    }

    /// Opens a connection to `origin` as reqwest's connector does.
    async fn connect(&self, origin: &Origin) -> Result<Box<Conn>, LaneError> {
        let scheme = if origin.https { "https" } else { "http" };
        // `host` is the URL's, IPv6 literals in brackets.
        let uri: Uri = format!("{scheme}://{}:{}", origin.host, origin.port)
            .parse()
            .map_err(|_| LaneError::Url)?;
        let mut connector = self.connector.clone();
        let io = match tokio::time::timeout(CONNECT_TIMEOUT, connector.call(uri)).await {
            Ok(Ok(io)) => io,
            Ok(Err(error)) => return Err(LaneError::Connect(error)),
            Err(_) => {
                return Err(LaneError::Connect(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "operation timed out",
                ))));
            }
        };
        let (sender, driver) = http1::handshake(io).await.map_err(LaneError::Exchange)?;
        Ok(Box::new(Conn {
            sender,
            driver: Some(driver),
        }))
    }
}

/// Closes the idle connections past [`IDLE_TIMEOUT`].
fn expire(idle: &mut Vec<Idle>) {
    let now = Instant::now();
    idle.retain(|entry| now.duration_since(entry.since) < IDLE_TIMEOUT);
}

/// A response body that drives its connection as it is read, and puts the
/// connection back once it is read to the end. Dropped before that, the
/// connection goes back with the rest of the answer still to read
/// ([`Unread`]), or is closed.
struct Exchange {
    /// `None` once dropped.
    body: Option<Incoming>,
    conn: Option<Box<Conn>>,
    lane: Arc<Lane>,
    origin: Origin,
}

impl Stream for Exchange {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            if let Some(conn) = this.conn.as_mut() {
                conn.drive(cx);
            }
            if body.is_end_stream() {
                this.finish();
                return Poll::Ready(None);
            }
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry nothing the caller reads (as reqwest's
                    // byte stream skips them).
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The most of a body left unread that is read on (and dropped) so its
/// connection can be reused.
const MAX_DRAIN: usize = 64 * 1024;

impl Drop for Exchange {
    /// The reader stopped before the end (an event stream once its answer
    /// came): what has already arrived is read to the end without waiting,
    /// so the connection carries the next call, as hyper-util's connection
    /// task, reading ahead, would have left it. Anything still to come is
    /// read when the connection is next wanted.
    fn drop(&mut self) {
        let (Some(mut conn), Some(body)) = (self.conn.take(), self.body.take()) else {
            return;
        };
        let mut unread = Unread { body, drained: 0 };
        match unread.drain(&mut conn) {
            Drained::End => self.lane.checkin(self.origin.clone(), conn, None),
            Drained::Waiting => self.lane.checkin(self.origin.clone(), conn, Some(unread)),
            Drained::Spent => {}
        }
    }
}

impl Exchange {
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.lane.checkin(self.origin.clone(), conn, None);
        }
    }
}

/// The URL reqwest gives a response made from `http` parts without one.
/// Nothing reads it; reqwest would parse it again for every response.
static NO_URL: LazyLock<Url> =
    LazyLock::new(|| Url::parse("http://no.url.provided.local").expect("a valid constant URL"));

/// `parts` and `body` as the reqwest response the rest of the crate reads,
/// carrying reqwest's placeholder URL (copied, not parsed per response).
fn reqwest_response(mut parts: http::response::Parts, body: reqwest::Body) -> reqwest::Response {
    use reqwest::ResponseBuilderExt as _;
    // The builder is the only public way to attach reqwest's URL.
    if let Ok(marked) = http::Response::builder().url(NO_URL.clone()).body(()) {
        parts.extensions.extend(marked.into_parts().0.extensions);
    }
    http::Response::from_parts(parts, body).into()
}

/// The server's guarded resolver as hyper-util's connector asks for it.
#[derive(Clone)]
struct LaneResolver(GuardedResolver);

impl Service<Name> for LaneResolver {
    type Response = std::vec::IntoIter<std::net::SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolver = self.0.clone();
        Box::pin(async move { resolver.admitted(name.as_str()).await.map(Vec::into_iter) })
    }
}

/// Whether reqwest would send this process's requests through a proxy
/// named in the environment (it reads these variables when a client is
/// built; any of them set keeps the lane off).
fn proxied() -> bool {
    const VARS: [&str; 6] = [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ];
    VARS.iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::{HostGuard, Reach};
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The test stream's last event and its end.
    const STREAM_END: &str = "9\r\ndata: 2\n\n\r\n0\r\n\r\n";

    /// How the test server answers.
    #[derive(Clone, Copy)]
    enum Reply {
        /// JSON with a length; `close` adds `Connection: close`.
        Json { close: bool },
        /// An event stream in chunks: the answer, then one more event and
        /// the stream's end, written after `end_after` (never, when `None`;
        /// in the answer's own write, when zero).
        Stream { end_after: Option<Duration> },
    }

    /// A loopback HTTP/1.1 server answering every request with `answer`,
    /// counting the connections it accepted; `close` answers each request
    /// with `Connection: close`.
    async fn server(answer: &'static str, close: bool) -> (Url, Arc<AtomicUsize>) {
        let served = served(answer, Reply::Json { close }).await;
        (served.url, served.accepted)
    }

    /// A test server: where it listens and what it counted.
    struct Served {
        url: Url,
        /// Connections accepted.
        accepted: Arc<AtomicUsize>,
        /// Delayed stream ends written.
        ends_written: Arc<AtomicUsize>,
    }

    /// [`server`], answering as `reply` says.
    async fn served(answer: &'static str, reply: Reply) -> Served {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/mcp", listener.local_addr().unwrap())).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let ends_written = Arc::new(AtomicUsize::new(0));
        let (counted, ends) = (accepted.clone(), ends_written.clone());
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let ends = ends.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0; 8192];
                    loop {
                        // One request per read: the tests' bodies are small.
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        let (head, rest, close) = match reply {
                            Reply::Json { close } => (
                                format!(
                                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: {}\r\ncontent-length: {}\r\n\r\n{answer}",
                                    if close { "close" } else { "keep-alive" },
                                    answer.len()
                                ),
                                None,
                                close,
                            ),
                            Reply::Stream { end_after } => {
                                let mut head = format!(
                                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{answer}\r\n",
                                    answer.len()
                                );
                                // Written at once when the end is not delayed.
                                if end_after == Some(Duration::ZERO) {
                                    head.push_str(STREAM_END);
                                    (head, None, false)
                                } else {
                                    (head, Some(end_after), false)
                                }
                            }
                        };
                        if socket.write_all(head.as_bytes()).await.is_err() || close {
                            return;
                        }
                        match rest {
                            None => {}
                            // Held open, its end never written.
                            Some(None) => std::future::pending::<()>().await,
                            Some(Some(after)) => {
                                tokio::time::sleep(after).await;
                                if socket.write_all(STREAM_END.as_bytes()).await.is_err() {
                                    return;
                                }
                                ends.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                });
            }
        });
        Served {
            url,
            accepted,
            ends_written,
        }
    }

    /// POSTs `{}` to `url` on the lane.
    async fn send_post(lane: &Arc<Lane>, url: &Url) -> Result<reqwest::Response, LaneError> {
        let body = Some(Bytes::from_static(b"{}"));
        lane.send(Method::POST, url, HeaderMap::new(), body).await
    }

    /// Sends a request and reads the first chunk of its answer, dropping
    /// the rest unread.
    async fn first_chunk(lane: &Arc<Lane>, url: &Url) -> Bytes {
        let response = send_post(lane, url).await.unwrap();
        response.bytes_stream().next().await.unwrap().unwrap()
    }

    fn lane(reach: Reach) -> Arc<Lane> {
        let resolver = GuardedResolver {
            guard: HostGuard::new(None, reach),
            server: "remote".into(),
        };
        Lane::new(resolver, crate::tls::shared().unwrap()).expect("no proxy in the tests")
    }

    async fn post(lane: &Arc<Lane>, url: &Url) -> Result<Vec<u8>, String> {
        let response = send_post(lane, url)
            .await
            .map_err(|e| crate::connection::root_cause(&e))?;
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
        }
        Ok(body)
    }

    #[tokio::test]
    async fn a_connection_read_to_the_end_carries_the_next_request() {
        let (url, accepted) = server(r#"{"ok":true}"#, false).await;
        let lane = lane(Reach::Internal);
        for _ in 0..3 {
            assert_eq!(post(&lane, &url).await.unwrap(), br#"{"ok":true}"#);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_left_after_its_answer_leaves_the_connection_reusable() {
        let Served { url, accepted, .. } = served(
            "data: 1\n\n",
            Reply::Stream {
                end_after: Some(Duration::ZERO),
            },
        )
        .await;
        let lane = lane(Reach::Internal);
        for _ in 0..3 {
            assert_eq!(&first_chunk(&lane, &url).await[..], b"data: 1\n\n");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_whose_end_arrives_after_it_was_left_still_carries_the_next_call() {
        // The end is written 50 ms after the answer, long after the reader
        // left; the next request comes once it is there.
        let served = served(
            "data: 1\n\n",
            Reply::Stream {
                end_after: Some(Duration::from_millis(50)),
            },
        )
        .await;
        let lane = lane(Reach::Internal);
        for call in 1..=3 {
            assert_eq!(&first_chunk(&lane, &served.url).await[..], b"data: 1\n\n");
            let written = async {
                while served.ends_written.load(Ordering::SeqCst) < call {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), written)
                .await
                .expect("the server writes the end");
            // A turn of the runtime's I/O driver, to see it arrive.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(served.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_that_never_ends_is_not_waited_for() {
        let Served { url, accepted, .. } =
            served("data: 1\n\n", Reply::Stream { end_after: None }).await;
        let lane = lane(Reach::Internal);
        for _ in 0..3 {
            let answer = tokio::time::timeout(Duration::from_secs(10), first_chunk(&lane, &url));
            assert_eq!(
                &answer.await.expect("not held up by the last stream")[..],
                b"data: 1\n\n"
            );
        }
        // Each left connection is kept with its answer's end unread, and
        // closed when the next call finds it still unfinished.
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        let idle = lane.idle.lock().unwrap();
        assert_eq!(idle.len(), 1);
        assert!(idle[0].unread.is_some());
    }

    #[tokio::test]
    async fn a_response_carries_reqwest_placeholder_url_not_the_request_one() {
        // A URL may hold a credential in its query; reqwest's errors and
        // `Response::url` would show it.
        let (url, _) = server(r#"{"ok":true}"#, false).await;
        let mut secret = url.clone();
        secret.set_query(Some("api_key=hunter2"));
        let response = lane(Reach::Internal)
            .send(Method::POST, &secret, HeaderMap::new(), None)
            .await
            .unwrap();
        assert_eq!(response.url().as_str(), "http://no.url.provided.local/");
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_reused() {
        let (url, accepted) = server(r#"{"ok":true}"#, true).await;
        let lane = lane(Reach::Internal);
        for _ in 0..3 {
            assert_eq!(post(&lane, &url).await.unwrap(), br#"{"ok":true}"#);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_name_is_dialled_only_at_addresses_the_guard_admits() {
        let (url, accepted) = server(r#"{"ok":true}"#, false).await;
        let mut by_name = url.clone();
        by_name.set_host(Some("localhost")).unwrap();
        // A server on the internet may not reach loopback through a name.
        let refused = post(&lane(Reach::Public), &by_name).await.unwrap_err();
        assert!(refused.contains("loopback or private"), "{refused}");
        assert_eq!(accepted.load(Ordering::SeqCst), 0);
        // The same name from a server on loopback itself is dialled.
        assert!(post(&lane(Reach::Internal), &by_name).await.is_ok());
    }
}
