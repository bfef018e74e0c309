//! Tool handlers: the code that runs when a tool is called.
//!
//! A handler receives the call's arguments — already validated against the
//! tool's input schema and normalised to a JSON object — and a
//! [`CallContext`] carrying the cancellation token, a progress sender and the
//! configured identity. It answers a [`ToolResult`] or a [`ToolError`]; the
//! server frames the first and maps the second at the edge, so a handler
//! never has to think about what may reach the model.
//!
//! Any `Fn(Value, CallContext) -> impl Future<Output = Result<ToolResult,
//! ToolError>>` is a handler; [`typed`] turns a handler over a
//! `serde::Deserialize` argument type into one.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use portcullis_catalog::ToolResult;
use portcullis_catalog::error_mapping::codes::ERR_INVALID_ARGUMENTS;
use portcullis_catalog::gate::CallDecision;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::exposure::Identity;
use crate::input::InputChannel;

/// Runs one tool.
pub trait ToolHandler: Send + Sync + 'static {
    /// Handles one call.
    fn call(
        &self,
        args: Value,
        ctx: CallContext,
    ) -> BoxFuture<'static, Result<ToolResult, ToolError>>;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
{
    fn call(
        &self,
        args: Value,
        ctx: CallContext,
    ) -> BoxFuture<'static, Result<ToolResult, ToolError>> {
        Box::pin(self(args, ctx))
    }
}

/// A handler over typed arguments; see [`typed`].
pub struct Typed<A, F> {
    handler: F,
    args: PhantomData<fn() -> A>,
}

/// Wraps a handler whose arguments are a `Deserialize` type. Arguments that
/// validate against the schema but still do not deserialise (a schema looser
/// than the type) become an `ERR_INVALID_ARGUMENTS` tool error whose message
/// does not echo the values.
///
/// ```
/// use portcullis_server::{typed, CallContext, ToolError, ToolHandler};
/// use portcullis_catalog::ToolResult;
///
/// #[derive(serde::Deserialize)]
/// struct Add { a: i64, b: i64 }
///
/// let handler = typed(|args: Add, _ctx: CallContext| async move {
///     Ok::<_, ToolError>(ToolResult::text((args.a + args.b).to_string()))
/// });
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let result = rt.block_on(handler.call(serde_json::json!({"a": 2, "b": 40}), CallContext::detached("add"))).unwrap();
/// assert_eq!(result.text_blocks().next(), Some("42"));
/// ```
pub fn typed<A, F, Fut>(handler: F) -> Typed<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
{
    Typed {
        handler,
        args: PhantomData,
    }
}

impl<A, F, Fut> ToolHandler for Typed<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
{
    fn call(
        &self,
        args: Value,
        ctx: CallContext,
    ) -> BoxFuture<'static, Result<ToolResult, ToolError>> {
        match serde_json::from_value::<A>(args) {
            Ok(args) => Box::pin((self.handler)(args, ctx)),
            Err(error) => {
                // serde's message can quote the offending value; keep only
                // its category so nothing the model sent is echoed back.
                let category = match error.classify() {
                    serde_json::error::Category::Data => "a value has the wrong type or is missing",
                    _ => "they are not valid JSON",
                };
                let message = format!(
                    "{ERR_INVALID_ARGUMENTS}: arguments for tool \"{}\" cannot be read: {category}",
                    ctx.tool()
                );
                Box::pin(async move { Err(ToolError::msg(message)) })
            }
        }
    }
}

/// A handler's failure. Its message reaches the model only when it starts
/// with `ERR_`; anything else is logged and replaced by `ERR_TOOL_FAILED`.
///
/// Any `std::error::Error` converts into it (so `?` works), and
/// [`ToolError::msg`] makes one from a message, typically a contract code:
///
/// ```
/// use portcullis_server::ToolError;
///
/// let e = ToolError::msg("ERR_DEVICE_OFFLINE: miner-3");
/// assert_eq!(e.message(), "ERR_DEVICE_OFFLINE: miner-3");
/// let io: ToolError = std::io::Error::other("disk on fire").into();
/// assert_eq!(io.message(), "disk on fire");
/// ```
pub struct ToolError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    // Boxed: a refusal is rare, and every handler's `Result` carries this.
    refusal: Option<Box<(CallDecision, ToolResult)>>,
}

impl ToolError {
    /// A failure with this message.
    pub fn msg(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            source: None,
            refusal: None,
        }
    }

    /// A refusal by a guard behind the handler (a toolset's quarantine of a
    /// tool that drifted since it was listed, say): `answer` is written by
    /// that guard, holds no tool output and reaches the model as it is;
    /// `decision` is what the audit trail records. Typed, so no one has to
    /// read the verdict back out of the words.
    pub fn refused(decision: CallDecision, answer: ToolResult) -> Self {
        ToolError {
            message: decision.as_str().to_owned(),
            source: None,
            refusal: Some(Box::new((decision, answer))),
        }
    }

    /// The refusal, when [`ToolError::refused`] made this.
    pub fn refusal(&self) -> Option<(CallDecision, &ToolResult)> {
        self.refusal
            .as_deref()
            .map(|(decision, answer)| (*decision, answer))
    }

    /// Takes the refusal out, when [`ToolError::refused`] made this.
    pub(crate) fn into_refusal(self) -> Result<(CallDecision, ToolResult), Box<ToolError>> {
        match self.refusal {
            Some(refusal) => Ok(*refusal),
            None => Err(Box::new(self)),
        }
    }

    /// The message (the edge decides whether the model may see it).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, when the failure came from one.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

// Deliberately not `std::error::Error` (like `anyhow::Error`): that is what
// lets every error type convert into it with `?`.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(error: E) -> Self {
        ToolError {
            message: error.to_string(),
            source: Some(Box::new(error)),
            refusal: None,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("message", &self.message)
            .field("source", &self.source)
            .field("refusal", &self.refusal.as_deref().map(|(d, _)| d))
            .finish()
    }
}

/// What a handler knows about the call it serves.
#[derive(Clone)]
pub struct CallContext {
    tool: Arc<str>,
    cancel: CancellationToken,
    progress: Option<(ProgressToken, Peer<RoleServer>)>,
    identity: Option<Arc<Identity>>,
    request: Option<Arc<RequestContext<RoleServer>>>,
    approved: bool,
    input: Option<InputChannel>,
}

impl CallContext {
    /// A context for a call made in-process, outside any MCP session: never
    /// cancelled unless you cancel [`CallContext::cancellation`], progress
    /// goes nowhere, no identity.
    pub fn detached(tool: impl Into<Arc<str>>) -> Self {
        CallContext {
            tool: tool.into(),
            cancel: CancellationToken::new(),
            progress: None,
            identity: None,
            request: None,
            approved: false,
            input: None,
        }
    }

    pub(crate) fn for_request(
        tool: Arc<str>,
        request: RequestContext<RoleServer>,
        identity: Option<Arc<Identity>>,
    ) -> Self {
        let progress = request
            .meta
            .get_progress_token()
            .map(|token| (token, request.peer.clone()));
        CallContext {
            tool,
            cancel: request.ct.clone(),
            progress,
            identity,
            request: Some(Arc::new(request)),
            approved: false,
            input: None,
        }
    }

    /// Sets the identity the handler sees.
    pub fn with_identity(mut self, identity: Option<Arc<Identity>>) -> Self {
        self.identity = identity;
        self
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Cancelled when the client cancels the call or goes away (over HTTP:
    /// closes the response stream), or the server shuts down. A handler
    /// doing long work should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// True once the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the call is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// True when the client asked for progress (sent a progress token).
    pub fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Reports progress to the client, if it asked for it; otherwise does
    /// nothing. `progress` should increase with every report.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some((token, peer)) = &self.progress else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token.clone(), progress);
        param.total = total;
        param.message = message.map(str::to_owned);
        // A client that went away cannot be told; the call's cancellation
        // token says so, and the handler decides what to do.
        if let Err(error) = peer.notify_progress(param).await {
            tracing::debug!(tool = %self.tool, %error, "progress notification not delivered");
        }
    }

    /// True when the policy answered `ask` and the person at the client
    /// approved this very call (see [`crate::approval`]). Only the server
    /// sets it, once the person said yes; a context built elsewhere is
    /// never approved.
    pub fn approved(&self) -> bool {
        self.approved
    }

    pub(crate) fn mark_approved(mut self) -> Self {
        self.approved = true;
        self
    }

    /// Where to ask the client for input mid-call, when the client takes
    /// it through `input_required` round trips (2026-07-28 clients; see
    /// [`crate::input`]). `None` otherwise: an initialize-era client is sent
    /// requests through [`CallContext::peer`].
    pub fn input(&self) -> Option<&InputChannel> {
        self.input.as_ref()
    }

    /// The context of a run that may be parked: its own cancellation (the
    /// run outlives the request that started it) and an input channel.
    pub(crate) fn parkable(mut self, cancel: CancellationToken, input: InputChannel) -> Self {
        self.cancel = cancel;
        self.input = Some(input);
        self
    }

    /// The identity configured for the server (sent with app calls), if any.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_deref()
    }

    /// The client, for handlers that need more than progress (logging,
    /// sampling, elicitation). `None` for a detached call.
    pub fn peer(&self) -> Option<&Peer<RoleServer>> {
        self.request.as_ref().map(|r| &r.peer)
    }

    /// The raw rmcp request context (request `_meta`, HTTP parts in its
    /// extensions). `None` for a detached call.
    pub fn request(&self) -> Option<&RequestContext<RoleServer>> {
        self.request.as_deref()
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("tool", &self.tool)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("wants_progress", &self.progress.is_some())
            .field("approved", &self.approved)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize)]
    struct Args {
        #[allow(dead_code)]
        n: u8,
    }

    #[tokio::test]
    async fn typed_arguments_that_do_not_fit_are_refused_without_echoing_them() {
        let handler = typed(|_args: Args, _ctx| async { Ok(ToolResult::text("ok")) });
        let error = handler
            .call(json!({"n": "secret-value-9"}), CallContext::detached("t"))
            .await
            .unwrap_err();
        assert!(
            error.message().starts_with("ERR_INVALID_ARGUMENTS: "),
            "{error}"
        );
        assert!(!error.message().contains("secret-value-9"));
        let ok = handler
            .call(json!({"n": 3}), CallContext::detached("t"))
            .await
            .unwrap();
        assert_eq!(ok.text_blocks().next(), Some("ok"));
    }

    #[tokio::test]
    async fn a_detached_context_reports_no_progress_and_can_be_cancelled() {
        let ctx = CallContext::detached("t");
        assert!(!ctx.wants_progress());
        ctx.progress(1.0, None, None).await;
        assert!(!ctx.is_cancelled());
        ctx.cancellation().cancel();
        ctx.cancelled().await;
        assert!(ctx.is_cancelled());
    }
}
