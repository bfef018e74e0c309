//! The downstream half of relaying a server's requests: an upstream that
//! asks for sampling, elicitation or roots during a tool call is answered
//! by the MCP client that made the call, over that client's own session.
//!
//! The upstream half (which call a request belongs to, what happens when
//! none or several could) is `portcullis_upstream::relay`.
//!
//! Initialize-era clients get the request on their session, on the
//! response stream of the `tools/call` that caused it (Streamable HTTP
//! routes a server request by the request it originates from): through
//! rmcp's session when rmcp serves the call, through the call's
//! [`ClientRequests`] when the server answers it in front of rmcp. 2026-07-28
//! clients cannot be sent requests at all: the request goes through the
//! call's input channel instead ([`portcullis_server::input`]), which parks
//! the upstream call, answers the client's `tools/call` with an
//! `input_required` result carrying the request, and hands the client's
//! answer from its retry back here, to the upstream still waiting on the
//! same call. Both paths also answer a 2026 upstream's own
//! `input_required` requests.
//!
//! A request the calling client did not declare the capability for is
//! refused to the upstream (a JSON-RPC error naming why), and the upstream
//! decides what that means for its tool: it may fall back, or fail. For a
//! 2026-07-28 client a failure is then answered with the JSON-RPC error
//! `-32021` (MissingRequiredClientCapability, `data.requiredCapabilities`
//! naming what was missing; HTTP 400 on Streamable HTTP) instead of the
//! error result, as that revision requires of a server that needed an
//! undeclared capability ([`portcullis_server::input`]). That error is the
//! protocol's answer to the client, not a tool result: the edge's `ERR_…`
//! mapping is about what a model reads in results and does not apply. An
//! initialize-era client declared its capabilities once, in `initialize`,
//! and its revision has no such error: it gets the result as it is.

#![allow(deprecated)] // Sampling and roots: SEP-2577, still used by 2025-era servers.

use std::future::Future;
use std::pin::Pin;

use portcullis_handler::{CallContext, ClientRequests, InputChannel};
use portcullis_upstream::ClientRelay;
use portcullis_upstream::relay::InputKey;
use rmcp::model::{
    CancelledNotificationParam, ClientCapabilities, ClientResult, ErrorCode, GetExtensions,
    InputRequest, RequestId, ServerRequest,
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
    /// Where such a client's input is asked for (`None` when the tool
    /// surface cannot park this call).
    input: Option<InputChannel>,
    /// Where an initialize-era client is asked when the server answers
    /// the call in front of rmcp (`None`: rmcp serves it, ask the peer).
    direct: Option<ClientRequests>,
}

impl DownstreamRelay {
    /// The relay for the call `ctx` serves; `None` for a call that did not
    /// come over MCP (`portcullis call`, in-process).
    pub fn for_call(ctx: &CallContext) -> Option<Self> {
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
            input: ctx.input().cloned(),
            direct: ctx.client_requests().cloned(),
        })
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<ClientResult, ErrorData>> + Send + 'static>>;

impl ClientRelay for DownstreamRelay {
    fn capabilities(&self) -> ClientCapabilities {
        self.capabilities.clone()
    }

    fn undeclared(&self, missing: ClientCapabilities) {
        if self.modern
            && let Some(input) = &self.input
        {
            input.undeclared(missing);
        }
    }

    fn request(&self, mut request: ServerRequest, cancel: CancellationToken) -> Answer {
        if self.modern {
            return match &self.input {
                Some(input) => ask_by_round_trip(input, request, cancel),
                None => {
                    let message = "the calling client speaks 2026-07-28, which takes input through input_required results, and this call cannot be parked for one";
                    Box::pin(async move {
                        Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None))
                    })
                }
            };
        }
        if let Some(direct) = &self.direct {
            let answer = direct.send(request, None);
            return Box::pin(async move {
                tokio::select! {
                    answer = answer => answer.map_err(unrelayable),
                    // Dropping the answer withdraws the request: the client
                    // hears `notifications/cancelled` on the call's stream.
                    () = cancel.cancelled() => Err(ErrorData::new(
                        ErrorCode::INTERNAL_ERROR,
                        "the request was cancelled",
                        None,
                    )),
                }
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

/// A 2026-07-28 client's answer to `request`, through an `input_required`
/// round trip; the client's JSON answer is read back as the result the
/// request's method has.
fn ask_by_round_trip(
    input: &InputChannel,
    request: ServerRequest,
    cancel: CancellationToken,
) -> Answer {
    /// What kind of result the answer must be.
    enum Kind {
        Sampling,
        Elicitation,
        Roots,
    }
    let key = request.extensions().get::<InputKey>().map(|k| k.0.clone());
    let (kind, asked) = match request {
        ServerRequest::CreateMessageRequest(r) => (Kind::Sampling, InputRequest::CreateMessage(r)),
        ServerRequest::ElicitRequest(r) => (Kind::Elicitation, InputRequest::Elicitation(r)),
        ServerRequest::ListRootsRequest(r) => (Kind::Roots, InputRequest::ListRoots(r)),
        _ => {
            return Box::pin(async {
                Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    "a 2026-07-28 client can only be asked for sampling, elicitation or roots",
                    None,
                ))
            });
        }
    };
    let answer = input.request_keyed(key, asked);
    Box::pin(async move {
        let value = tokio::select! {
            value = answer => value?,
            // The upstream withdrew its request; the round trip's reply is
            // simply never used.
            () = cancel.cancelled() => {
                return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "the request was cancelled", None));
            }
        };
        let unreadable = |e: serde_json::Error| {
            ErrorData::invalid_params(format!("the client's answer could not be read: {e}"), None)
        };
        match kind {
            Kind::Sampling => serde_json::from_value(value).map(ClientResult::CreateMessageResult),
            Kind::Elicitation => serde_json::from_value(value).map(ClientResult::ElicitResult),
            Kind::Roots => serde_json::from_value(value).map(ClientResult::ListRootsResult),
        }
        .map_err(unreadable)
    })
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
