//! What a source of tools is: [`ToolSource`].
//!
//! A source publishes tools, each a catalogue [`Tool`](portcullis_catalog::Tool)
//! with the handler that runs it (a [`Registration`]); it runs one when
//! asked ([`ToolSource::invoke`]); and it says when what it publishes
//! changed ([`ToolSource::changes`]), so whoever serves it can ask again.
//! Native tool plugins, applications (route tables, OpenAPI documents),
//! tools written in Rust and a gateway's upstream MCP servers are all
//! sources; a surface serves what they publish through one gate, and no
//! source knows which surface that is.
//!
//! ```
//! use futures::StreamExt;
//! use portcullis_catalog::{Tool, ToolResult};
//! use portcullis_handler::{CallContext, Registration, ToolError, ToolSource};
//!
//! /// One fixed tool.
//! struct Clock;
//!
//! impl ToolSource for Clock {
//!     fn source_name(&self) -> &str {
//!         "clock"
//!     }
//!
//!     fn registrations(&self) -> Vec<Registration> {
//!         let now = |_args: serde_json::Value, _ctx: CallContext| async {
//!             Ok::<_, ToolError>(ToolResult::text("12:00"))
//!         };
//!         vec![Registration::new(Tool::new("now"), now).with_source("clock")]
//!     }
//! }
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let answer = rt.block_on(Clock.invoke("now", serde_json::json!({}), CallContext::detached("now")));
//! assert_eq!(answer.unwrap().text_blocks().next(), Some("12:00"));
//! // A source that never changes ends its change stream at once.
//! assert!(rt.block_on(Clock.changes().next()).is_none());
//! ```

use futures::StreamExt;
use futures::stream::BoxStream;
use portcullis_catalog::Diagnostic;
use portcullis_catalog::error_mapping::codes::ERR_TOOL_FAILED;
use serde_json::Value;

use crate::context::CallContext;
use crate::error::ToolError;
use crate::handler::ToolFuture;
use crate::registration::Registration;

/// Anything that provides tools: what it publishes, running one, and when
/// that changed.
pub trait ToolSource: Send + Sync {
    /// The source's name in errors (a plugin directory, a route table path,
    /// an application's name).
    fn source_name(&self) -> &str;

    /// What the source publishes now: its tools with their handlers, ready
    /// for a surface (`ToolServer::builder().register_all(..)`).
    fn registrations(&self) -> Vec<Registration>;

    /// What loading reported without failing (skipped operations,
    /// simplified schemas). Empty by default.
    fn diagnostics(&self) -> &[Diagnostic] {
        &[]
    }

    /// Runs the published tool named `tool`, as its registration's handler
    /// would: the arguments are those the surface checked, and the answer
    /// goes back unframed (the surface frames it). A name the source does
    /// not publish is an `ERR_TOOL_FAILED` error. By default the handler of
    /// [`ToolSource::registrations`] is looked up; a source with a faster
    /// way to route a call overrides it.
    fn invoke(&self, tool: &str, args: Value, ctx: CallContext) -> ToolFuture {
        match self
            .registrations()
            .into_iter()
            .find(|registration| registration.tool.name == tool)
        {
            Some(registration) => registration.handler.call(args, ctx),
            None => {
                let message = format!(
                    "{ERR_TOOL_FAILED}: source \"{}\" publishes no tool \"{tool}\"",
                    self.source_name()
                );
                Box::pin(async move { Err(ToolError::msg(message)) })
            }
        }
    }

    /// One item each time what the source publishes changed (ask
    /// [`ToolSource::registrations`] again); the stream ends when the
    /// source will announce no more changes. By default it ends at once: a
    /// source loaded from files changes only when it is loaded again.
    fn changes(&self) -> BoxStream<'static, ()> {
        futures::stream::empty().boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_catalog::{Tool, ToolResult};

    struct One;

    impl ToolSource for One {
        fn source_name(&self) -> &str {
            "one"
        }

        fn registrations(&self) -> Vec<Registration> {
            let echo = |args: Value, _ctx: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(args.to_string()))
            };
            vec![Registration::new(Tool::new("echo"), echo)]
        }
    }

    #[tokio::test]
    async fn invoking_runs_the_published_handler_and_refuses_other_names() {
        let answer = One
            .invoke(
                "echo",
                serde_json::json!({"n": 1}),
                CallContext::detached("echo"),
            )
            .await
            .unwrap();
        assert_eq!(answer.text_blocks().next(), Some(r#"{"n":1}"#));
        let error = One
            .invoke("other", Value::Null, CallContext::detached("other"))
            .await
            .unwrap_err();
        assert_eq!(
            error.message(),
            "ERR_TOOL_FAILED: source \"one\" publishes no tool \"other\""
        );
    }
}
