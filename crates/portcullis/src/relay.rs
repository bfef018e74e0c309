//! The downstream half of relaying a server's requests: an upstream that
//! asks for sampling, elicitation or roots during a tool call is answered
//! by the MCP client that made the call, over that client's own session.
//!
//! The upstream half (which call a request belongs to, what happens when
//! none or several could) is `portcullis_upstream::relay`.
//!
//! Initialize-era clients get the request on their session, on the
//! response stream of the `tools/call` that caused it (Streamable HTTP
//! routes a server request by the request it originates from). The same
//! path answers a 2026 upstream's `input_required` requests. 2026-07-28
//! clients cannot be sent requests at all: that revision replaces them with
//! `input_required` results, which the gateway's tool surface does not
//! hand on yet, so the upstream (or the call) is told the client cannot
//! answer, and why.

#![allow(deprecated)] // Sampling and roots: SEP-2577, still used by 2025-era servers.

use std::future::Future;
use std::pin::Pin;

use portcullis_upstream::ClientRelay;
use rmcp::model::{
    CancelledNotificationParam, ClientCapabilities, ClientResult, ErrorCode, GetExtensions,
    RequestId, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, ServiceError};
use rmcp::{ErrorData, Peer, RoleServer};
use tokio_util::sync::CancellationToken;

/// The client of one downstream call.
pub struct DownstreamRelay {
    peer: Peer<RoleServer>,
    /// The downstream `tools/call` the relayed requests belong to.
    origin: RequestId,
    capabilities: ClientCapabilities,
    /// A stateless 2026-07-28 client, which may not be sent requests.
    modern: bool,
}

impl DownstreamRelay {
    /// The relay for the call `ctx` serves; `None` for a call that did not
    /// come over MCP (`portcullis call`, in-process).
    pub fn for_call(ctx: &portcullis_server::CallContext) -> Option<Self> {
        let request = ctx.request()?;
        // 2026-07-28 clients name their capabilities on every request;
        // initialize-era clients named them once, in `initialize`.
        let capabilities = request
            .meta
            .client_capabilities()
            .or_else(|| {
                request
                    .peer
                    .peer_info()
                    .map(|info| info.capabilities.clone())
            })
            .unwrap_or_default();
        let modern = request
            .meta
            .protocol_version()
            .is_some_and(|version| !version.has_initialize());
        Some(DownstreamRelay {
            peer: request.peer.clone(),
            origin: request.id.clone(),
            capabilities,
            modern,
        })
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<ClientResult, ErrorData>> + Send + 'static>>;

impl ClientRelay for DownstreamRelay {
    fn capabilities(&self) -> ClientCapabilities {
        self.capabilities.clone()
    }

    fn request(&self, mut request: ServerRequest, cancel: CancellationToken) -> Answer {
        if self.modern {
            let message = "the calling client speaks 2026-07-28, which takes input through input_required results; portcullis cannot hand those on yet";
            return Box::pin(async move {
                Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None))
            });
        }
        // rmcp ties a server request to the request being handled through a
        // task-local that only the handling task has; this one is called
        // from the upstream connection's task, so the tie is made by hand
        // and the send runs on a task of its own (where no other request's
        // task-local can overwrite it).
        request
            .extensions_mut()
            .insert(OriginatingRequestId(self.origin.clone()));
        let peer = self.peer.clone();
        let task = tokio::spawn(async move {
            let handle = peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
                .map_err(unrelayable)?;
            let id = handle.id.clone();
            tokio::select! {
                answer = handle.await_response() => answer.map_err(unrelayable),
                () = cancel.cancelled() => {
                    let reason = Some("cancelled by the server".to_owned());
                    let _ = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await;
                    Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "the request was cancelled", None))
                }
            }
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|_| {
                Err(ErrorData::internal_error(
                    "the relay to the calling client failed",
                    None,
                ))
            })
        })
    }
}

/// What the upstream hears when the client could not be asked or failed:
/// the client's own JSON-RPC error passes unchanged.
fn unrelayable(error: ServiceError) -> ErrorData {
    match error {
        ServiceError::McpError(data) => data,
        other => ErrorData::internal_error(
            format!("the calling client could not be asked: {other}"),
            None,
        ),
    }
}
