//! The accept loop of the HTTP surface: what a connection may hold before
//! any request reaches the guards.
//!
//! * Every accepted socket has `TCP_NODELAY` (an SSE answer is written in
//!   pieces; with Nagle's algorithm a piece waits for the client's delayed
//!   ACK).
//! * At most `max_connections` connections are served at once. One more is
//!   answered `503` with `Connection: close` at once and closed, so file
//!   descriptors run out neither for the gateway nor for the clients
//!   already admitted.
//! * A connection must send a request's headers within
//!   `header_read_timeout`, counted from its accept (a new connection) or
//!   from the first byte of its next request (a kept-alive one), and a
//!   kept-alive connection may wait at most `idle_timeout` between a
//!   response and the next request's first byte. Otherwise it is closed. A
//!   request in flight (a long call, an open SSE stream) is never timed
//!   out here.
//!
//! HTTP/1.1 only, as `axum::serve` without its `http2` feature served.

use std::convert::Infallible;
use std::io;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::{Service, ServiceExt as _};

use crate::repoll::Repoll;
use crate::throttle::LogThrottle;

/// What one connection may hold; `None` turns a limit off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections served at once.
    pub(crate) max_connections: Option<usize>,
    /// From accept (or a kept-alive request's first byte) to the end of
    /// the request's headers.
    pub(crate) header_read_timeout: Option<Duration>,
    /// From a response's end to the next request's first byte.
    pub(crate) idle_timeout: Option<Duration>,
}

/// Over-limit connections being answered at once; beyond these an
/// over-limit connection is closed without an answer.
const REFUSALS_AT_ONCE: usize = 64;

/// How long answering an over-limit connection may take.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How long to wait after an accept error that is not the peer's doing
/// (out of file descriptors, say) before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(250);

/// Serves `app` on `listener` until `stop` is cancelled, then lets each
/// connection finish its request in flight (idle ones close at once) and
/// returns when all are closed.
pub(crate) async fn serve<S>(listener: TcpListener, app: S, limits: Limits, stop: CancellationToken)
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    let connections = TaskTracker::new();
    let slots = limits.max_connections.map(|n| Arc::new(Semaphore::new(n)));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let warnings = LogThrottle::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) if is_peer_error(&error) => continue,
            Err(error) => {
                if let Some(held_back) = warnings.admit() {
                    tracing::warn!(%error, held_back, "cannot accept a connection; retrying shortly");
                }
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    () = stop.cancelled() => break,
                }
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let permit = match &slots {
            None => None,
            Some(slots) => match slots.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    if let Some(held_back) = warnings.admit() {
                        tracing::warn!(
                            max_connections = limits.max_connections.unwrap_or_default(),
                            held_back,
                            "refused a connection: the server is at its connection limit (max_connections)"
                        );
                    }
                    refuse(stream, &refusals);
                    continue;
                }
            },
        };
        connections.spawn(serve_one(stream, app.clone(), limits, stop.clone(), permit));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Errors a client causes (it gave up before we accepted); nothing to wait
/// for.
fn is_peer_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The answer to a connection over the limit.
fn busy_response() -> Vec<u8> {
    let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Service Unavailable: the server is at its connection limit; try again shortly"}}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers `503` and closes, within [`REFUSAL_LINGER`]. The answer waits
/// for the request's headers (an HTTP client treats an answer before its
/// request as a broken connection), and what the client sends after it is
/// read and dropped until it closes too, so our close does not reset the
/// connection under the answer. With [`REFUSALS_AT_ONCE`] answers under
/// way, the connection is closed at once instead.
fn refuse(stream: TcpStream, refusals: &Arc<Semaphore>) {
    let Ok(slot) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _slot = slot;
        let mut stream = stream;
        let _ = tokio::time::timeout(REFUSAL_LINGER, async move {
            let mut head = Vec::new();
            let mut chunk = [0u8; 2048];
            while head.len() < 16 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&chunk[..n]);
            }
            stream.write_all(&busy_response()).await?;
            stream.shutdown().await?;
            while stream.read(&mut chunk).await? > 0 {}
            Ok::<_, io::Error>(())
        })
        .await;
    });
}

/// Serves one connection until it closes, times out, or the server stops.
async fn serve_one<S>(
    stream: TcpStream,
    app: S,
    limits: Limits,
    stop: CancellationToken,
    permit: Option<OwnedSemaphorePermit>,
) where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    let _permit = permit;
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            // Busy until the response's body is dropped: written out, or
            // abandoned with the connection.
            let busy = activity.begin();
            let app = app.clone();
            async move {
                let response = app
                    .oneshot(request.map(Body::new))
                    .await
                    .unwrap_or_else(|never| match never {});
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    let mut connection = pin!(connection);
    let mut stopped = pin!(stop.cancelled());
    let mut draining = false;
    // The deadline only moves while the connection is polled (a request's
    // first byte read, its headers in, its response dropped), so it is read
    // again after every poll of the connection instead of being signalled:
    // a task that wakes itself is queued as a yield, and the runtime then
    // wakes another worker for it, two needless wake-ups a request.
    let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
    // hyper's request body channel wakes this task while it is polled;
    // see `crate::repoll`.
    let repoll = Repoll::new();
    let mut armed: Option<Instant> = None;
    let timed_out = std::future::poll_fn(|cx| {
        if !draining && stopped.as_mut().poll(cx).is_ready() {
            draining = true;
            connection.as_mut().graceful_shutdown();
        }
        if let Poll::Ready(served) = repoll.poll(cx, |cx| connection.as_mut().poll(cx)) {
            if let Err(error) = served {
                tracing::trace!(%error, "connection ended with an error");
            }
            return Poll::Ready(false);
        }
        let Some(deadline) = activity.deadline(&limits) else {
            return Poll::Pending;
        };
        if armed != Some(deadline) {
            timer.as_mut().reset(deadline);
            armed = Some(deadline);
        }
        // The timer never fires before the deadline it is armed for.
        timer.as_mut().poll(cx).map(|()| true)
    })
    .await;
    if timed_out {
        tracing::debug!("closing a connection that sent no complete request in time");
    }
}

/// Where a connection is between requests, for its timeouts.
#[derive(Debug)]
struct Activity {
    state: Mutex<Waiting>,
    /// Set while waiting for a request's first byte, so reads need not
    /// lock to learn that they must note it.
    awaiting_first_byte: AtomicBool,
}

#[derive(Debug)]
struct Waiting {
    /// Requests in flight (responses not yet written out).
    busy: usize,
    /// When the current wait began: the accept, or the last response's end.
    since: Instant,
    /// No request yet on this connection.
    fresh: bool,
    /// When the next request's first byte arrived.
    first_byte: Option<Instant>,
}

impl Activity {
    fn new() -> Self {
        Activity {
            state: Mutex::new(Waiting {
                busy: 0,
                since: Instant::now(),
                fresh: true,
                first_byte: None,
            }),
            awaiting_first_byte: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the connection is to be closed unless a request arrives;
    /// `None` while one is in flight.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let state = self.lock();
        if state.busy > 0 {
            None
        } else if state.fresh {
            // A new connection gets one header timeout from its accept: a
            // byte now and then does not extend it.
            limits.header_read_timeout.map(|t| state.since + t)
        } else if let Some(first) = state.first_byte {
            limits.header_read_timeout.map(|t| first + t)
        } else {
            limits.idle_timeout.map(|t| state.since + t)
        }
    }

    /// A request's headers are in: no timeout until its response is out.
    fn begin(self: &Arc<Self>) -> Busy {
        self.awaiting_first_byte.store(false, Ordering::Relaxed);
        let mut state = self.lock();
        state.busy += 1;
        state.fresh = false;
        Busy(self.clone())
    }

    fn first_byte(&self) {
        if self.awaiting_first_byte.swap(false, Ordering::Relaxed) {
            let mut state = self.lock();
            if state.busy == 0 && state.first_byte.is_none() {
                state.first_byte = Some(Instant::now());
            }
        }
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.busy = state.busy.saturating_sub(1);
        if state.busy == 0 {
            state.since = Instant::now();
            state.first_byte = None;
            drop(state);
            self.0.awaiting_first_byte.store(true, Ordering::Relaxed);
        }
    }
}

/// A response body that keeps its request counted in flight until hyper
/// drops it.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, noting the first byte of each request for the header
/// timeout.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before && this.activity.awaiting_first_byte.load(Ordering::Relaxed)
        {
            this.activity.first_byte();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};

    use axum::Router;

    use super::*;

    /// Forwards to the task's waker and counts the wake-ups made by the
    /// thread polling the connection while it polls, i.e. the task waking
    /// itself (not the reactor or the test's client on another thread).
    struct Counting {
        task: Mutex<Waker>,
        polling: Mutex<Option<std::thread::ThreadId>>,
        self_wakes: AtomicUsize,
    }

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            let poller = *self.polling.lock().unwrap_or_else(|e| e.into_inner());
            if poller == Some(std::thread::current().id()) {
                self.self_wakes.fetch_add(1, Ordering::SeqCst);
            }
            self.task
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .wake_by_ref();
        }
    }

    /// A served request must not make its connection's task wake itself:
    /// the runtime queues such a task as a yield and wakes another worker
    /// for it, twice a request when the timeouts' deadline was signalled,
    /// once a request with a body (hyper's body channel).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serving_requests_does_not_wake_the_connection_task_itself() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        // A GET, and a POST whose body the service reads (hyper's body
        // channel then signals the connection).
        let app = Router::new().route(
            "/",
            axum::routing::get(|| async { "ok" }).post(|body: String| async move {
                assert_eq!(body, "ping");
                "ok"
            }),
        );
        let limits = Limits {
            max_connections: None,
            header_read_timeout: Some(Duration::from_secs(30)),
            idle_timeout: Some(Duration::from_secs(30)),
        };
        let stop = CancellationToken::new();
        let counting = Arc::new(Counting {
            task: Mutex::new(Waker::noop().clone()),
            polling: Mutex::new(None),
            self_wakes: AtomicUsize::new(0),
        });
        let served = {
            let counting = counting.clone();
            let mut connection = Box::pin(serve_one(accepted, app, limits, stop.clone(), None));
            tokio::spawn(std::future::poll_fn(move |cx| {
                *counting.task.lock().unwrap_or_else(|e| e.into_inner()) = cx.waker().clone();
                let waker = Waker::from(counting.clone());
                let set =
                    |poller| *counting.polling.lock().unwrap_or_else(|e| e.into_inner()) = poller;
                set(Some(std::thread::current().id()));
                let polled = connection.as_mut().poll(&mut Context::from_waker(&waker));
                set(None);
                polled
            }))
        };
        for request in 0..6 {
            let request = if request % 2 == 0 {
                format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n")
            } else {
                format!("POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 4\r\n\r\nping")
            };
            client.write_all(request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            let mut chunk = [0u8; 1024];
            while !answer.ends_with(b"\r\n\r\nok") {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed mid-answer: {answer:?}");
                answer.extend_from_slice(&chunk[..n]);
            }
            assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        }
        stop.cancel();
        drop(client);
        served.await.unwrap();
        // The fault this guards against wakes the task once for every
        // request with a body at least (three here). One stray wake is
        // allowed: under a loaded machine the runtime's cooperative budget
        // can make a resource yield by waking its task (seen once in CI).
        let self_wakes = counting.self_wakes.load(Ordering::SeqCst);
        assert!(self_wakes <= 1, "{self_wakes} self-wakes over 6 requests");
    }
}
