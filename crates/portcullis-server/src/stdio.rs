//! The stdio surface: the same handler over stdin/stdout, for desktop
//! clients that launch the server as a process.
//!
//! stdout carries protocol messages only; every log line must go to stderr
//! (configure your `tracing` subscriber with `.with_writer(std::io::stderr)`).
//! rmcp serves both lifecycles on one pipe: legacy `initialize`, or a
//! 2026-07-28 client's `server/discover` followed by per-request `_meta`.
//!
//! Lines are read and parsed by rmcp's transport (`AsyncRwTransport`),
//! which ignores a line that is not JSON (deliberately: answering garbage
//! can start an error storm with a peer that echoes it) and answers JSON
//! that is not a message with `-32600` and no id. A line that begins with
//! JSON and goes on with garbage (`123abc`) is read by serde as JSON of
//! the wrong shape and so gets that `-32600` rather than `-32700`. The
//! rule lives in rmcp; answering `-32700` here would mean owning the line
//! framing, its length cap and its compatibility rules, so it is left.

use rmcp::{ServerHandler, ServiceExt};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::ServerError;

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
    let running = match handler.serve(io).await {
        Ok(running) => running,
        // A 2026-07-28 client never sends `initialize`: it discovers, calls
        // statelessly and closes the pipe, which rmcp reports as a close
        // before initialisation. That is the normal end of its session.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(ServerError::Stdio(e.to_string())),
    };
    running
        .waiting()
        .await
        .map_err(|e| ServerError::Stdio(e.to_string()))?;
    Ok(())
}
