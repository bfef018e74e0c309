//! Server-to-client requests: a server that asks for sampling
//! (`sampling/createMessage`), user input (`elicitation/create`) or the
//! client's roots (`roots/list`) while it runs a tool is asking the person
//! and model behind the *call*, not the gateway. Each call may carry a
//! [`ClientRelay`] (the downstream client that made it); the request is
//! handed to that client and its answer goes back to the server unchanged.
//!
//! One connection serves every caller, so the request must be tied to a
//! call. Every `tools/call` in flight holds a `RelaySlot`, bound to the
//! request id it was sent with:
//!
//! * Streamable HTTP tells which POST's response stream the request arrived
//!   on (rmcp's `InboundStreamOrigin`): that call's slot answers.
//! * Transports that cannot tell (stdio, legacy SSE, the standalone GET
//!   stream) fall back to the only call in flight.
//! * At most [`MAX_RELAYED_PER_CALL`] requests of one call reach its client
//!   (every kind, every `input_required` round counted): a server that asks
//!   again and again would otherwise flood the person and the model behind
//!   the call. Past that, each request is answered to the server with a
//!   JSON-RPC error (`-32600`) saying so; the call itself goes on.
//! * No call in flight, several calls and no way to choose, a call made
//!   without a client (`portcullis call`), or a client that did not declare
//!   the capability: the server gets a JSON-RPC error saying which. The
//!   client is told of a capability it lacks too
//!   ([`ClientRelay::undeclared`]): a 2026-07-28 client's call is answered
//!   with `-32021` naming it, as that revision requires of a server that
//!   needs an undeclared capability.
//!
//! A 2026-07-28 server does not send requests: it answers `tools/call` with
//! an `input_required` result listing them. `answer_inputs` puts each to
//! the calling client the same way and the call is retried with the
//! answers (see `Connection::call`), so an initialize-era client can use a
//! 2026 server's tools that need input. A 2026-07-28 *client* cannot be
//! sent requests: its [`ClientRelay`] (the gateway's) parks the call and
//! asks through an `input_required` round trip of its own, so to this
//! module it is one more client that answers, only more slowly.

// Sampling and roots are deprecated by SEP-2577, but 2025-era servers use
// them and a faithful proxy relays them.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::RoleClient;
use rmcp::model::{
    ClientCapabilities, ClientResult, ElicitRequestParams, ErrorCode, GetExtensions, InputRequest,
    InputRequests, InputResponses, RequestId, RequestMetaObject, ServerRequest,
};
use rmcp::service::{InboundStreamOrigin, RequestContext, ServiceError};
use tokio_util::sync::CancellationToken;

/// The client that made a call, able to answer the server's requests on
/// the call's behalf. The gateway implements it over the downstream MCP
/// session; tests implement it directly.
pub trait ClientRelay: Send + Sync + 'static {
    /// What the client declared it can answer (`sampling`, `elicitation`,
    /// `roots`).
    fn capabilities(&self) -> ClientCapabilities;

    /// Sends `request` to the client and resolves with its answer. `cancel`
    /// fires when the server withdraws the request (or the call ends); the
    /// client should then be told too.
    fn request(
        &self,
        request: ServerRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ClientResult, ErrorData>>;

    /// Told when the server's requests needed `missing`, capabilities the
    /// client did not declare (the server hears a JSON-RPC error either
    /// way). A client whose revision answers that itself ends its call
    /// here (a 2026-07-28 client: `-32021` with `requiredCapabilities`);
    /// the default does nothing.
    fn undeclared(&self, missing: ClientCapabilities) {
        let _ = missing;
    }
}

/// Requests (sampling, elicitation, roots) one tool call may relay to its
/// client; each one past it is refused to the server. Each may put a
/// question to a person or a prompt to a model: a hundred is far more than
/// a tool that asks in good faith needs, and bounds one that does not.
pub const MAX_RELAYED_PER_CALL: usize = 100;

/// One call's client, counting what is put to it (see
/// [`MAX_RELAYED_PER_CALL`]).
struct Capped {
    client: Arc<dyn ClientRelay>,
    relayed: AtomicUsize,
}

impl ClientRelay for Capped {
    fn capabilities(&self) -> ClientCapabilities {
        self.client.capabilities()
    }

    fn request(
        &self,
        request: ServerRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ClientResult, ErrorData>> {
        if self.relayed.fetch_add(1, Ordering::Relaxed) >= MAX_RELAYED_PER_CALL {
            let refusal = Refusal::TooMany {
                method: method_of(&request),
                limit: MAX_RELAYED_PER_CALL,
            };
            return Box::pin(async move { Err(refusal.into()) });
        }
        self.client.request(request, cancel)
    }

    fn undeclared(&self, missing: ClientCapabilities) {
        self.client.undeclared(missing);
    }
}

/// The client of one call as the call relays to it: at most
/// [`MAX_RELAYED_PER_CALL`] requests reach it. Made once per call, so the
/// count spans every round of the call.
pub(crate) fn for_one_call(relay: Option<&Arc<dyn ClientRelay>>) -> Option<Arc<dyn ClientRelay>> {
    relay.map(|client| {
        Arc::new(Capped {
            client: client.clone(),
            relayed: AtomicUsize::new(0),
        }) as Arc<dyn ClientRelay>
    })
}

/// The key a 2026 server gave a request among its `input_required` input
/// requests, carried in the request's extensions: a client that answers by
/// a round trip of its own can ask under the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputKey(pub String);

/// The method name of a server-to-client request, for messages.
pub(crate) fn method_of(request: &ServerRequest) -> &'static str {
    match request {
        ServerRequest::PingRequest(_) => "ping",
        ServerRequest::CreateMessageRequest(_) => "sampling/createMessage",
        ServerRequest::ListRootsRequest(_) => "roots/list",
        ServerRequest::ElicitRequest(_) => "elicitation/create",
        _ => "a server request",
    }
}

/// Whether `capabilities` cover `request`.
fn declared(capabilities: &ClientCapabilities, request: &ServerRequest) -> bool {
    match request {
        ServerRequest::CreateMessageRequest(_) => capabilities.sampling.is_some(),
        ServerRequest::ListRootsRequest(_) => capabilities.roots.is_some(),
        ServerRequest::ElicitRequest(_) => capabilities.elicitation.is_some(),
        _ => false,
    }
}

/// Adds the capability `request` needs to `needed` (as an empty object:
/// `{"sampling": {}}`, the shape `requiredCapabilities` takes).
fn require(needed: &mut ClientCapabilities, request: &ServerRequest) {
    match request {
        ServerRequest::CreateMessageRequest(_) => needed.sampling = Some(Default::default()),
        ServerRequest::ListRootsRequest(_) => needed.roots = Some(Default::default()),
        ServerRequest::ElicitRequest(_) => needed.elicitation = Some(Default::default()),
        _ => {}
    }
}

struct Slot {
    /// The `tools/call` request id, once sent.
    request: Option<RequestId>,
    relay: Option<Arc<dyn ClientRelay>>,
}

#[derive(Default)]
struct Slots {
    next: u64,
    open: HashMap<u64, Slot>,
}

/// The calls in flight on one connection and their clients.
#[derive(Clone, Default)]
pub(crate) struct Relays {
    slots: Arc<Mutex<Slots>>,
}

/// Why a server's request could not be relayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// No tool call is in flight to relate it to.
    #[error("portcullis cannot relay {method}: no tool call is in flight on this connection")]
    NoCall {
        /// The request's method.
        method: &'static str,
    },
    /// Several are, and the transport does not say which one asked.
    #[error(
        "portcullis cannot relay {method}: {calls} tool calls are in flight on this connection and the request is not tied to one of them"
    )]
    Ambiguous {
        /// The request's method.
        method: &'static str,
        /// How many calls are in flight.
        calls: usize,
    },
    /// The call was made without a client that could answer (an operator
    /// command, an in-process call).
    #[error("portcullis cannot relay {method}: the tool call was not made by an MCP client")]
    NoClient {
        /// The request's method.
        method: &'static str,
    },
    /// The call already relayed as many requests as one call may.
    #[error(
        "portcullis cannot relay {method}: a tool call may relay at most {limit} requests to its client, and this one has"
    )]
    TooMany {
        /// The request's method.
        method: &'static str,
        /// [`MAX_RELAYED_PER_CALL`].
        limit: usize,
    },
    /// The client did not declare the capability the request needs.
    #[error("portcullis cannot relay {method}: the calling client did not declare that capability")]
    Undeclared {
        /// The request's method.
        method: &'static str,
    },
}

impl From<Refusal> for ErrorData {
    fn from(refusal: Refusal) -> Self {
        let code = match refusal {
            // The client cannot do it at all: as if the method did not exist.
            Refusal::Undeclared { .. } | Refusal::NoClient { .. } => ErrorCode::METHOD_NOT_FOUND,
            // SEP-2260: a request not tied to an outbound one is invalid.
            Refusal::NoCall { .. } | Refusal::Ambiguous { .. } => ErrorCode::INVALID_REQUEST,
            // One request too many: refused, like one not tied to a call.
            Refusal::TooMany { .. } => ErrorCode::INVALID_REQUEST,
        };
        ErrorData::new(code, refusal.to_string(), None)
    }
}

impl Relays {
    /// Opens a slot for a call about to be sent; it closes when the
    /// returned guard drops, however the call ends.
    pub(crate) fn open(&self, relay: Option<Arc<dyn ClientRelay>>) -> RelaySlot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let key = slots.next;
        slots.next = slots.next.wrapping_add(1);
        slots.open.insert(
            key,
            Slot {
                request: None,
                relay,
            },
        );
        RelaySlot {
            slots: self.slots.clone(),
            key,
        }
    }

    /// The client that should answer a request that arrived with `origin`.
    fn find(
        &self,
        origin: Option<&InboundStreamOrigin>,
        method: &'static str,
    ) -> Result<Arc<dyn ClientRelay>, Refusal> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let exact = match origin {
            Some(InboundStreamOrigin::OutboundRequest(id)) => slots
                .open
                .values()
                .find(|slot| slot.request.as_ref() == Some(id)),
            _ => None,
        };
        let slot = match exact {
            Some(slot) => slot,
            None => {
                let mut open = slots.open.values();
                match (open.next(), slots.open.len()) {
                    (None, _) => return Err(Refusal::NoCall { method }),
                    (Some(only), 1) => only,
                    (Some(_), calls) => return Err(Refusal::Ambiguous { method, calls }),
                }
            }
        };
        slot.relay.clone().ok_or(Refusal::NoClient { method })
    }

    /// Relays `request` to the client of the call it belongs to and returns
    /// the answer; the server's cancellation of its request (the context's
    /// token) reaches the client.
    pub(crate) async fn forward(
        &self,
        request: ServerRequest,
        context: &RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        let method = method_of(&request);
        let origin = context.extensions.get::<InboundStreamOrigin>();
        let relay = self.find(origin, method)?;
        put_to(&relay, request, context.ct.clone()).await
    }
}

/// Puts `request` to `relay`, the client of the call it belongs to, if
/// that client declared the capability it needs.
async fn put_to(
    relay: &Arc<dyn ClientRelay>,
    request: ServerRequest,
    cancel: CancellationToken,
) -> Result<ClientResult, ErrorData> {
    let method = method_of(&request);
    if !declared(&relay.capabilities(), &request) {
        let mut missing = ClientCapabilities::default();
        require(&mut missing, &request);
        relay.undeclared(missing);
        return Err(Refusal::Undeclared { method }.into());
    }
    tracing::debug!(method, "relaying a server request to the calling client");
    relay.request(request, cancel).await
}

/// `request` without the server's `_meta` (its progress token and the
/// like belong to the server's side of the exchange), as rmcp's service
/// hands a request to its client handler: the calling client gets what it
/// would get through rmcp's path.
fn without_meta(mut request: ServerRequest) -> ServerRequest {
    request.extensions_mut().remove::<RequestMetaObject>();
    match &mut request {
        ServerRequest::CreateMessageRequest(r) => r.params.meta = None,
        ServerRequest::ElicitRequest(r) => match &mut r.params {
            ElicitRequestParams::FormElicitationParams { meta, .. }
            | ElicitRequestParams::UrlElicitationParams { meta, .. } => *meta = None,
            _ => {}
        },
        _ => {}
    }
    request
}

/// The answer to a server request that arrived on a call's own response
/// stream, read without rmcp's service (the direct call path): `relay` is
/// that call's client. Answered as rmcp's service and
/// [`Relays::forward`] answer it: `ping` at once, sampling, elicitation
/// and roots by the calling client (a result of another kind is an
/// error), anything else "method not found".
pub(crate) async fn answer_for_call(
    relay: Option<Arc<dyn ClientRelay>>,
    request: ServerRequest,
    cancel: CancellationToken,
) -> Result<ClientResult, ErrorData> {
    let method = method_of(&request);
    let asked = match request {
        ServerRequest::PingRequest(_) => return Ok(ClientResult::empty(())),
        ServerRequest::CustomRequest(_) => {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "portcullis does not relay this request to the calling client",
                None,
            ));
        }
        asked => asked,
    };
    let relay = relay.ok_or(Refusal::NoClient { method })?;
    let answer = put_to(&relay, without_meta(asked), cancel).await?;
    let answered = match &answer {
        ClientResult::CreateMessageResult(_) => "sampling/createMessage",
        ClientResult::ElicitResult(_) => "elicitation/create",
        ClientResult::ListRootsResult(_) => "roots/list",
        _ => "",
    };
    let fits = answered == method;
    if fits {
        Ok(answer)
    } else {
        Err(ErrorData::internal_error(
            format!("the calling client answered {method} with another kind of result"),
            None,
        ))
    }
}

/// What a 2026-07-28 server is told, with each call, that the calling
/// client can answer: its declared sampling, elicitation and roots (the
/// requests the gateway relays); nothing for a call made without a client.
/// Told more, the server would ask for what the caller cannot give; told
/// this, it can fall back, or refuse with `-32021` itself
/// ([`note_refusal`]). (An initialize-era server was told the gateway's
/// relayable capabilities once, in `initialize`.)
pub(crate) fn answerable(relay: Option<&Arc<dyn ClientRelay>>) -> ClientCapabilities {
    let mut answerable = ClientCapabilities::default();
    if let Some(declared) = relay.map(|relay| relay.capabilities()) {
        answerable.sampling = declared.sampling;
        answerable.elicitation = declared.elicitation;
        // Not `listChanged`: root changes of many clients cannot be told
        // apart upstream.
        answerable.roots = declared.roots.map(|_| Default::default());
    }
    answerable
}

/// Passes a server's own `-32021` refusal of a call on to the calling
/// client ([`ClientRelay::undeclared`], with the server's
/// `requiredCapabilities`), so a 2026-07-28 caller gets that error as it
/// is rather than a failed tool result.
pub(crate) fn note_refusal<T>(
    relay: Option<&Arc<dyn ClientRelay>>,
    answer: &Result<T, ServiceError>,
) {
    if let (Some(relay), Err(ServiceError::McpError(error))) = (relay, answer)
        && error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
    {
        let required = error
            .data
            .as_ref()
            .and_then(|data| data.get("requiredCapabilities"))
            .and_then(|required| serde_json::from_value(required.clone()).ok())
            .unwrap_or_default();
        relay.undeclared(required);
    }
}

/// Answers a 2026 server's `input_required` requests by putting them to the
/// calling client all at once (a client that answers by round trip gets
/// them in one round, under the server's keys: [`InputKey`]); the answers
/// are keyed as the requests were. The error says why a request could not
/// be answered (the client's own JSON-RPC error passes unchanged); when
/// some need capabilities the client did not declare, none is put to it
/// and it is told of them all at once ([`ClientRelay::undeclared`]).
pub(crate) async fn answer_inputs(
    relay: Option<&Arc<dyn ClientRelay>>,
    requests: InputRequests,
    cancel: &CancellationToken,
) -> Result<InputResponses, ErrorData> {
    let mut asked = Vec::new();
    for (key, request) in requests {
        let request = match request {
            InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
            InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
            InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
            _ => {
                return Err(ErrorData::invalid_request(
                    "an input request of an unknown kind",
                    None,
                ));
            }
        };
        asked.push((key, request));
    }
    let Some(relay) = relay else {
        return match asked.first() {
            Some((_, request)) => Err(Refusal::NoClient {
                method: method_of(request),
            }
            .into()),
            None => Ok(InputResponses::new()),
        };
    };
    let capabilities = relay.capabilities();
    let mut missing = ClientCapabilities::default();
    let mut first_missing = None;
    for (_, request) in &asked {
        if !declared(&capabilities, request) {
            require(&mut missing, request);
            first_missing.get_or_insert(method_of(request));
        }
    }
    if let Some(method) = first_missing {
        relay.undeclared(missing);
        return Err(Refusal::Undeclared { method }.into());
    }
    let mut pending = Vec::new();
    for (key, mut request) in asked {
        let method = method_of(&request);
        request.extensions_mut().insert(InputKey(key.clone()));
        let answer = relay.request(request, cancel.child_token());
        pending.push(async move {
            let answer = match answer.await? {
                ClientResult::CreateMessageResult(r) => serde_json::to_value(r),
                ClientResult::ElicitResult(r) => serde_json::to_value(r),
                ClientResult::ListRootsResult(r) => serde_json::to_value(r),
                _ => {
                    return Err(ErrorData::internal_error(
                        format!("the calling client answered {method} with another kind of result"),
                        None,
                    ));
                }
            };
            let answer = answer.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            Ok::<_, ErrorData>((key, answer))
        });
    }
    Ok(futures::future::try_join_all(pending)
        .await?
        .into_iter()
        .collect())
}

/// A call's place among the calls in flight; removed on drop.
pub(crate) struct RelaySlot {
    slots: Arc<Mutex<Slots>>,
    key: u64,
}

impl RelaySlot {
    /// Ties the slot to the request id the call was sent with.
    pub(crate) fn bind(&self, request: RequestId) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.open.get_mut(&self.key) {
            slot.request = Some(request);
        }
    }
}

impl Drop for RelaySlot {
    fn drop(&mut self) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ListRootsRequest, ListRootsResult};

    struct Answers(ClientCapabilities, Arc<Mutex<Vec<ClientCapabilities>>>);

    impl ClientRelay for Answers {
        fn capabilities(&self) -> ClientCapabilities {
            self.0.clone()
        }
        fn undeclared(&self, missing: ClientCapabilities) {
            self.1.lock().unwrap().push(missing);
        }
        fn request(
            &self,
            _request: ServerRequest,
            _cancel: CancellationToken,
        ) -> BoxFuture<'static, Result<ClientResult, ErrorData>> {
            Box::pin(async { Ok(ClientResult::ListRootsResult(ListRootsResult::default())) })
        }
    }

    fn roots() -> ClientCapabilities {
        let mut capabilities = ClientCapabilities::default();
        capabilities.roots = Some(Default::default());
        capabilities
    }

    fn relay(capabilities: ClientCapabilities) -> Option<Arc<dyn ClientRelay>> {
        Some(Arc::new(Answers(capabilities, Default::default())))
    }

    #[tokio::test]
    async fn every_undeclared_capability_is_reported_at_once_and_nothing_is_asked() {
        let reported = Arc::new(Mutex::new(Vec::new()));
        let relay: Arc<dyn ClientRelay> = Arc::new(Answers(roots(), reported.clone()));
        let sampling: rmcp::model::CreateMessageRequestParams =
            serde_json::from_value(serde_json::json!({"messages": [], "maxTokens": 5})).unwrap();
        let elicitation: rmcp::model::ElicitRequestParams = serde_json::from_value(
            serde_json::json!({"mode": "form", "message": "?", "requestedSchema": {"type": "object", "properties": {}}}),
        )
        .unwrap();
        let requests = InputRequests::from_iter([
            (
                "model".to_owned(),
                InputRequest::CreateMessage(rmcp::model::CreateMessageRequest::new(sampling)),
            ),
            (
                "person".to_owned(),
                InputRequest::Elicitation(rmcp::model::ElicitRequest::new(elicitation)),
            ),
            (
                "where".to_owned(),
                InputRequest::ListRoots(ListRootsRequest::default()),
            ),
        ]);
        let error = answer_inputs(Some(&relay), requests, &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND);
        let reported = reported.lock().unwrap();
        assert_eq!(reported.len(), 1, "one report");
        assert_eq!(
            serde_json::to_value(&reported[0]).unwrap(),
            serde_json::json!({"sampling": {}, "elicitation": {}})
        );
    }

    #[test]
    fn the_stream_origin_picks_the_call_and_the_sole_call_is_the_fallback() {
        let relays = Relays::default();
        assert_eq!(
            relays.find(None, "roots/list").err(),
            Some(Refusal::NoCall {
                method: "roots/list"
            })
        );
        let first = relays.open(relay(roots()));
        first.bind(RequestId::Number(7));
        assert!(relays.find(None, "roots/list").is_ok());
        let second = relays.open(None);
        second.bind(RequestId::Number(8));
        assert_eq!(
            relays.find(None, "roots/list").err(),
            Some(Refusal::Ambiguous {
                method: "roots/list",
                calls: 2
            })
        );
        let to_first = InboundStreamOrigin::OutboundRequest(RequestId::Number(7));
        assert!(relays.find(Some(&to_first), "roots/list").is_ok());
        let to_second = InboundStreamOrigin::OutboundRequest(RequestId::Number(8));
        assert_eq!(
            relays.find(Some(&to_second), "roots/list").err(),
            Some(Refusal::NoClient {
                method: "roots/list"
            })
        );
        drop(second);
        assert!(relays.find(Some(&to_second), "roots/list").is_ok());
        drop(first);
        assert!(relays.find(None, "roots/list").is_err());
    }

    #[tokio::test]
    async fn a_call_relays_at_most_the_cap_and_the_rest_is_refused() {
        let client = relay(roots());
        let capped = for_one_call(client.as_ref()).unwrap();
        let ask = || {
            capped.request(
                ServerRequest::ListRootsRequest(ListRootsRequest::default()),
                CancellationToken::new(),
            )
        };
        for _ in 0..MAX_RELAYED_PER_CALL {
            assert!(ask().await.is_ok());
        }
        let refused = ask().await.unwrap_err();
        assert_eq!(refused.code, ErrorCode::INVALID_REQUEST);
        assert!(
            refused.message.contains("at most 100"),
            "{}",
            refused.message
        );
        // Another call starts its own count.
        let next = for_one_call(client.as_ref()).unwrap();
        assert!(
            next.request(
                ServerRequest::ListRootsRequest(ListRootsRequest::default()),
                CancellationToken::new()
            )
            .await
            .is_ok()
        );
    }

    #[test]
    fn capabilities_are_checked_per_method() {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        assert!(declared(&roots(), &request));
        assert!(!declared(&ClientCapabilities::default(), &request));
        let error = ErrorData::from(Refusal::Undeclared {
            method: method_of(&request),
        });
        assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND);
        assert!(error.message.contains("roots/list"), "{}", error.message);
    }

    #[tokio::test]
    async fn input_requests_are_answered_by_the_caller_under_their_keys() {
        let requests = || {
            InputRequests::from_iter([(
                "client_roots".to_owned(),
                InputRequest::ListRoots(ListRootsRequest::default()),
            )])
        };
        let cancel = CancellationToken::new();
        let none = answer_inputs(None, requests(), &cancel).await.unwrap_err();
        assert_eq!(none.code, ErrorCode::METHOD_NOT_FOUND);
        assert!(
            none.message.contains("not made by an MCP client"),
            "{}",
            none.message
        );
        let undeclared = relay(ClientCapabilities::default());
        let error = answer_inputs(undeclared.as_ref(), requests(), &cancel)
            .await
            .unwrap_err();
        assert!(
            error.message.contains("did not declare"),
            "{}",
            error.message
        );
        let able = relay(roots());
        let answers = answer_inputs(able.as_ref(), requests(), &cancel)
            .await
            .unwrap();
        assert_eq!(answers.keys().collect::<Vec<_>>(), ["client_roots"]);
        assert_eq!(answers["client_roots"]["roots"], serde_json::json!([]));
    }
}
