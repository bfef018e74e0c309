//! The stdio surface: the same handler over stdin/stdout, for desktop
//! clients that launch the server as a process.
//!
//! stdout carries protocol messages only; every log line must go to stderr
//! (configure your `tracing` subscriber with `.with_writer(std::io::stderr)`).
//! rmcp serves both lifecycles on one pipe: legacy `initialize`, or a
//! 2026-07-28 client's `server/discover` followed by per-request `_meta`.
//!
//! A session's plain `tools/call` lines are answered in front of rmcp's
//! service loop (`stdio/direct.rs`); everything else goes through it.
//!
//! Lines are read by this crate's own transport (`stdio/transport.rs`):
//! every message as rmcp reads it, and every line that is not one answered
//! with the JSON-RPC error the HTTP surface gives the same body (`-32700`,
//! `-32600`, `-32602`), so a client is never left waiting on a request
//! that was dropped.
//!
//! [`serve_stdio_until`] drains when told to stop: requests in flight are
//! answered (for up to a grace), new ones are refused with a JSON-RPC error
//! saying the server is shutting down, and so are those still in flight
//! when the grace runs out.

mod direct;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use rmcp::{ServerHandler, ServiceExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::error::ServerError;
use direct::DirectCalls;
use transport::{Drain, StdioTransport};

/// Serves `handler` on this process's stdin/stdout until the client closes
/// the pipe.
pub async fn serve_stdio<H>(handler: H) -> Result<(), ServerError>
where
    H: ServerHandler + Send + Sync + 'static,
{
    serve_io(handler, rmcp::transport::stdio_pipes()).await
}

/// Serves `handler` over any byte pipe (a child's stdio, a socket, an
/// in-memory duplex in tests) until the other side closes it.
pub async fn serve_io<H, R, W>(handler: H, io: (R, W)) -> Result<(), ServerError>
where
    H: ServerHandler + Send + Sync + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = io;
    serve_transport(handler, StdioTransport::new(read, write)).await
}

/// [`serve_stdio`] until `stop` is cancelled, then drained (see the module
/// docs): returns once every request in flight is answered, or `grace`
/// after `stop` with those left answered with the shutdown's error.
pub async fn serve_stdio_until<H>(
    handler: H,
    stop: CancellationToken,
    grace: Duration,
) -> Result<(), ServerError>
where
    H: ServerHandler + Send + Sync + 'static,
{
    serve_io_until(handler, rmcp::transport::stdio_pipes(), stop, grace).await
}

/// [`serve_io`] until `stop` is cancelled, then drained as
/// [`serve_stdio_until`] is.
pub async fn serve_io_until<H, R, W>(
    handler: H,
    io: (R, W),
    stop: CancellationToken,
    grace: Duration,
) -> Result<(), ServerError>
where
    H: ServerHandler + Send + Sync + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = io;
    let gave_up = CancellationToken::new();
    let transport = StdioTransport::new(read, write).with_drain(Drain {
        stop,
        grace,
        gave_up: gave_up.clone(),
    });
    // Past the grace the calls left were answered already: their handlers
    // are not waited for (rmcp would, for seconds more).
    tokio::select! {
        served = serve_transport(handler, transport) => served,
        () = gave_up.cancelled() => Ok(()),
    }
}

async fn serve_transport<H, R, W>(
    handler: H,
    transport: StdioTransport<R, W>,
) -> Result<(), ServerError>
where
    H: ServerHandler + Send + Sync + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let handler = Arc::new(handler);
    let (direct, adoption) = DirectCalls::new(handler.clone());
    let running = match handler.serve(transport.with_direct(direct)).await {
        Ok(running) => running,
        // A 2026-07-28 client never sends `initialize`: it discovers, calls
        // statelessly and closes the pipe, which rmcp reports as a close
        // before initialisation. That is the normal end of its session.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(ServerError::Stdio(e.to_string())),
    };
    // The handshake is done: plain calls may skip rmcp's service loop.
    adoption.adopt(running.peer());
    running
        .waiting()
        .await
        .map_err(|e| ServerError::Stdio(e.to_string()))?;
    Ok(())
}
