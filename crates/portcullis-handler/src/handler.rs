//! Tool handlers: the code that runs when a tool is called.
//!
//! A handler receives the call's arguments — already validated against the
//! tool's input schema and normalised to a JSON object — and a
//! [`CallContext`] carrying the cancellation token, a progress sender and the
//! configured identity. It answers a [`ToolResult`] or a [`ToolError`]; the
//! surface frames the first and maps the second at the edge, so a handler
//! never has to think about what may reach the model.
//!
//! Any `Fn(Value, CallContext) -> impl Future<Output = Result<ToolResult,
//! ToolError>>` is a handler; [`typed`] turns a handler over a
//! `serde::Deserialize` argument type into one.

use std::future::Future;
use std::marker::PhantomData;

use futures::future::BoxFuture;
use portcullis_catalog::ToolResult;
use portcullis_catalog::error_mapping::codes::ERR_INVALID_ARGUMENTS;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::CallContext;
use crate::error::ToolError;

/// What a handler's call resolves to: the tool's result, or its failure.
pub type ToolFuture = BoxFuture<'static, Result<ToolResult, ToolError>>;

/// Runs one tool.
pub trait ToolHandler: Send + Sync + 'static {
    /// Handles one call.
    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
{
    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
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
/// use portcullis_handler::{typed, CallContext, ToolError, ToolHandler};
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
    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
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
}
