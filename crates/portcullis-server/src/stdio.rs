//! The stdio surface: the same handler over stdin/stdout, for desktop
//! clients that launch the server as a process.
//!
//! stdout carries protocol messages only; every log line must go to stderr
//! (configure your `tracing` subscriber with `.with_writer(std::io::stderr)`).
//! rmcp serves both lifecycles on one pipe: legacy `initialize`, or a
//! 2026-07-28 client's `server/discover` followed by per-request `_meta`.
//!
//! Lines are read by this crate's own transport (`stdio/transport.rs`):
//! every message as rmcp reads it, and every line that is not one answered
//! with the JSON-RPC error the HTTP surface gives the same body (`-32700`,
//! `-32600`, `-32602`), so a client is never left waiting on a request
//! that was dropped.

mod transport;

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
    let (read, write) = io;
    let running = match handler
        .serve(transport::StdioTransport::new(read, write))
        .await
    {
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
