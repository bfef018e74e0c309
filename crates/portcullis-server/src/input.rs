//! Input asked for in the middle of a call: a handler that needs the
//! client's sampling, elicitation or roots while it runs (the gateway's
//! upstreams do) asks through [`CallContext::input`].
//!
//! A 2026-07-28 client cannot be sent requests; that revision (SEP-2322)
//! answers the `tools/call` with an `input_required` result instead, and the
//! client retries the call with its `inputResponses` and the result's
//! `requestState`. So for such a client the handler runs *beside* the
//! request: when it asks, the call is parked (the handler keeps waiting on
//! its question), the client gets the question with a fresh handle as the
//! request state, and the retry that brings that handle back hands the
//! answers to the waiting handler and waits on the same run again, which
//! may ask again (at most [`MAX_INPUT_ROUNDS`] rounds). The handler runs
//! exactly once however many rounds it takes.
//!
//! The handle is one of the approval handles of [`crate::approval`] (same
//! generator, same table, same bound): a forged, replayed or swapped state
//! is refused with `-32602`. A call not resumed within the approval timeout
//! is cancelled, and so is a call whose parked state is dropped any other
//! way.
//!
//! A retry that leaves a question unanswered (no answer under its key, or
//! one that is not a result object) is asked that question again: the next
//! `input_required` carries the unanswered requests under the same keys,
//! with anything the handler asked meanwhile (SEP-2322: a server re-requests
//! missing input rather than failing). Re-asking is a round like any other,
//! so the same [`MAX_INPUT_ROUNDS`] bound ends it.
//!
//! Work that needed a capability the client did not declare (a proxied
//! server asked for sampling of a client without `sampling`) is reported
//! through [`InputChannel::undeclared`]: the question is never put to the
//! client, and if the run then fails (an error result) the call answers
//! the JSON-RPC error `-32021` (MissingRequiredClientCapability, with
//! `data.requiredCapabilities` naming every missing capability; HTTP 400 on
//! Streamable HTTP) instead, as the 2026-07-28 revision requires. A run
//! that gets by without it (a server that falls back) keeps its result.
//! That error is the protocol's answer to the client, not a tool result,
//! so it is outside the edge's `ERR_…` mapping, which governs what a model
//! reads in results.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use portcullis_catalog::framing::Exit;
use portcullis_catalog::gate::CallDecision;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ProtocolVersion,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::answer::Answer;
use crate::approval::Approvals;
use crate::handler::{CallContext, InputSink};
// The handler's end is part of the contract with tool sources.
pub use portcullis_handler::context::InputChannel;

/// Rounds of `input_required` one call may take; a handler still asking
/// after that has its further questions refused (it hears an error).
pub const MAX_INPUT_ROUNDS: usize = 16;

/// The reply to one question: the client's result as JSON, or why there is
/// none.
type Reply = oneshot::Sender<Result<Value, ErrorData>>;

/// One question from the handler.
struct Ask {
    /// The key the handler would like it asked under.
    key: Option<String>,
    request: InputRequest,
    reply: Reply,
}

/// What a handler sends its driver.
enum Message {
    Ask(Ask),
    /// Capabilities the run needed and the client did not declare.
    Undeclared(ClientCapabilities),
}

/// A question the client has been shown and owes an answer to; kept so it
/// can be asked again when a retry leaves it out.
struct Owed {
    request: InputRequest,
    reply: Reply,
}

/// Where a parked run's handler sends its questions: the driver's end of
/// the channel behind its [`InputChannel`].
struct Asks(mpsc::UnboundedSender<Message>);

impl InputSink for Asks {
    fn ask(
        &self,
        key: Option<String>,
        request: InputRequest,
    ) -> BoxFuture<'static, Result<Value, ErrorData>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.0.send(Message::Ask(Ask {
            key,
            request,
            reply,
        }));
        Box::pin(async move {
            if sent.is_err() {
                return Err(gone());
            }
            answer.await.unwrap_or_else(|_| Err(gone()))
        })
    }

    fn undeclared(&self, missing: ClientCapabilities) {
        let _ = self.0.send(Message::Undeclared(missing));
    }
}

fn gone() -> ErrorData {
    ErrorData::internal_error(
        "the client's call is no longer waiting for input (it ended, was cancelled, or was not resumed in time)",
        None,
    )
}

/// How the run went: finished, or parked behind a question.
pub(crate) enum Step {
    /// The handler's answer, sealed on its way out by the caller.
    Done(Answer),
    /// Answer the client with this and wait for its retry.
    Ask(InputRequiredResult),
}

/// The handler's run, wherever it is.
enum Body {
    /// Polled by the request that started it (no question asked yet).
    Inline(BoxFuture<'static, Answer>),
    /// Moved to a task of its own when it first asked, so it outlives the
    /// request.
    Spawned(oneshot::Receiver<Answer>),
}

impl Body {
    async fn result(&mut self) -> Answer {
        match self {
            Body::Inline(run) => run.await,
            Body::Spawned(done) => (&mut *done).await.unwrap_or_else(|_| Answer {
                exit: Exit::Failure("the tool's run ended without a result".into()),
                decision: CallDecision::Allowed,
                cancelled: false,
            }),
        }
    }

    /// Moves an inline run to a task of its own.
    fn detach(&mut self) {
        if !matches!(self, Body::Inline(_)) {
            return;
        }
        let (done, result) = oneshot::channel();
        if let Body::Inline(run) = std::mem::replace(self, Body::Spawned(result)) {
            tokio::spawn(async move {
                let _ = done.send(run.await);
            });
        }
    }
}

/// A run that can be parked: the handler's body, its questions, and the
/// replies owed to the questions the client has been shown.
pub(crate) struct Parked {
    body: Body,
    asks: mpsc::UnboundedReceiver<Message>,
    owed: BTreeMap<String, Owed>,
    /// The handler's own cancellation: the request's while one is
    /// attached, the timeout's while parked.
    cancel: CancellationToken,
    rounds: usize,
    keys: usize,
    /// What the run needed and the client did not declare, so far (boxed:
    /// it is rarely anything, and the parked run travels by value).
    undeclared: Box<ClientCapabilities>,
}

impl Drop for Parked {
    // However a parked run is let go (completed, timed out, evicted, the
    // process shutting down) the handler is told, so it stops asking its
    // upstream to wait.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Whether a call from `ctx` should run so it can be parked: a 2026-07-28
/// client over MCP (initialize-era clients are sent requests on their
/// session instead).
pub(crate) fn parkable(ctx: &CallContext) -> bool {
    ctx.request()
        .and_then(|r| r.protocol_version())
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// Starts a parkable run: `run` gets the context with an input channel and
/// a cancellation of its own, then is driven until it finishes or asks.
/// The error is a refusal of the call.
pub(crate) async fn start(
    approvals: &Approvals<Parked>,
    tool: &str,
    args: &Value,
    ctx: CallContext,
    run: impl FnOnce(CallContext) -> BoxFuture<'static, Answer>,
) -> Result<Step, ErrorData> {
    let attached = ctx.cancellation().clone();
    let cancel = CancellationToken::new();
    let (sender, asks) = mpsc::unbounded_channel();
    let ctx = ctx.parkable(cancel.clone(), InputChannel::new(Asks(sender)));
    let parked = Parked {
        body: Body::Inline(run(ctx)),
        asks,
        owed: BTreeMap::new(),
        cancel,
        rounds: 0,
        keys: 0,
        undeclared: Box::default(),
    };
    drive(parked, &attached, approvals, tool, args).await
}

/// Resumes a parked run with the client's answers; questions left
/// unanswered are asked again.
pub(crate) async fn resume(
    mut parked: Parked,
    responses: Option<InputResponses>,
    ctx: &CallContext,
    approvals: &Approvals<Parked>,
    tool: &str,
    args: &Value,
) -> Result<Step, ErrorData> {
    let mut responses = responses.unwrap_or_default();
    for (key, owed) in std::mem::take(&mut parked.owed) {
        match responses.remove(&key) {
            // Every answer (sampling, elicitation, roots) is a result
            // object; anything else is no answer.
            Some(answer) if answer.is_object() => {
                let _ = owed.reply.send(Ok(answer));
            }
            // Asked again in the next round (`drive`).
            _ => {
                parked.owed.insert(key, owed);
            }
        }
    }
    drive(parked, ctx.cancellation(), approvals, tool, args).await
}

/// Adds the capabilities named in `more` to `into`.
fn merge(into: &mut ClientCapabilities, more: ClientCapabilities) {
    if more.sampling.is_some() {
        into.sampling = more.sampling;
    }
    if more.elicitation.is_some() {
        into.elicitation = more.elicitation;
    }
    if more.roots.is_some() {
        into.roots = more.roots;
    }
    if let Some(experimental) = more.experimental {
        into.experimental
            .get_or_insert_with(Default::default)
            .extend(experimental);
    }
    if let Some(extensions) = more.extensions {
        into.extensions
            .get_or_insert_with(Default::default)
            .extend(extensions);
    }
}

/// How a finished run answers: its result, or `-32021` when it failed
/// after needing capabilities the client did not declare.
fn finish(parked: &mut Parked, result: Answer) -> Result<Step, ErrorData> {
    // Reports sent just before the run ended count too; a question asked
    // then has nobody left to hear its answer.
    while let Ok(message) = parked.asks.try_recv() {
        match message {
            Message::Undeclared(missing) => merge(&mut parked.undeclared, missing),
            Message::Ask(ask) => {
                let _ = ask.reply.send(Err(gone()));
            }
        }
    }
    if result.exit.is_error() && *parked.undeclared != ClientCapabilities::default() {
        return Err(ErrorData::missing_required_client_capability(
            std::mem::take(&mut *parked.undeclared),
        ));
    }
    Ok(Step::Done(result))
}

/// Drives the run with a request attached: its result, or its next
/// questions (parked under a new handle), or the request's cancellation
/// passed on. Questions a retry left unanswered go out again at once. The
/// error is `-32021` (see [`finish`]).
async fn drive(
    mut parked: Parked,
    attached: &CancellationToken,
    approvals: &Approvals<Parked>,
    tool: &str,
    args: &Value,
) -> Result<Step, ErrorData> {
    loop {
        // A question whose asker stopped waiting is not asked again.
        parked.owed.retain(|_, owed| !owed.reply.is_closed());
        let mut messages = Vec::new();
        if parked.owed.is_empty() {
            let first = tokio::select! {
                biased;
                Some(message) = parked.asks.recv() => message,
                result = parked.body.result() => return finish(&mut parked, result),
                () = attached.cancelled(), if !parked.cancel.is_cancelled() => {
                    // The client gave up on this request: the run is
                    // cancelled, and its (cancelled) result is what the
                    // request answers.
                    parked.cancel.cancel();
                    continue;
                }
            };
            messages.push(first);
        }
        // Questions asked together go out together.
        while let Ok(message) = parked.asks.try_recv() {
            messages.push(message);
        }
        let mut batch = Vec::new();
        for message in messages {
            match message {
                Message::Ask(ask) => batch.push(ask),
                Message::Undeclared(missing) => merge(&mut parked.undeclared, missing),
            }
        }
        if batch.is_empty() && parked.owed.is_empty() {
            // Only a report: nothing to ask, the run goes on.
            continue;
        }
        if parked.rounds >= MAX_INPUT_ROUNDS {
            let limit = || {
                ErrorData::invalid_request(
                    format!("the call already asked its client for input {MAX_INPUT_ROUNDS} times"),
                    None,
                )
            };
            for (_, owed) in std::mem::take(&mut parked.owed) {
                let _ = owed.reply.send(Err(limit()));
            }
            for ask in batch {
                let _ = ask.reply.send(Err(limit()));
            }
            continue;
        }
        // The unanswered questions keep their keys; new ones take the key
        // the handler asked for when it is free.
        let mut requests: InputRequests = parked
            .owed
            .iter()
            .map(|(key, owed)| (key.clone(), owed.request.clone()))
            .collect();
        for ask in batch {
            let key = match ask.key {
                Some(key) if !requests.contains_key(&key) => key,
                _ => loop {
                    parked.keys += 1;
                    let key = format!("input-{}", parked.keys);
                    if !requests.contains_key(&key) {
                        break key;
                    }
                },
            };
            requests.insert(key.clone(), ask.request.clone());
            parked.owed.insert(
                key,
                Owed {
                    request: ask.request,
                    reply: ask.reply,
                },
            );
        }
        parked.rounds += 1;
        parked.body.detach();
        match approvals.park(tool, args, parked) {
            Ok(state) => {
                return Ok(Step::Ask(InputRequiredResult::new(
                    Some(requests),
                    Some(state),
                )));
            }
            Err(mut refused) => {
                // Too many calls already wait: this question is refused and
                // the run goes on without it.
                for (_, owed) in std::mem::take(&mut refused.owed) {
                    let _ = owed.reply.send(Err(ErrorData::internal_error(
                        "too many calls are already waiting for their clients' input",
                        None,
                    )));
                }
                parked = refused;
            }
        }
    }
}
