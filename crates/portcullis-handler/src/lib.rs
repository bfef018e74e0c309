//! # portcullis-handler
//!
//! The contract between the code that runs a tool and the surface that
//! serves it. A tool is a catalogue [`Tool`](portcullis_catalog::Tool)
//! (what the model sees) plus a [`ToolHandler`] (what runs when it is
//! called), bundled with its origin and [`Access`] requirement as a
//! [`Registration`]. Whoever *makes* tools (native plugins, application
//! route tables and OpenAPI documents, a gateway's upstreams, your own
//! code) depends on this crate and implements [`ToolSource`]; whoever
//! *serves* them (the MCP server in `portcullis-server`) depends on it too;
//! neither depends on the other.
//!
//! | module | what it holds |
//! |---|---|
//! | [`handler`] | [`ToolHandler`], any async function of its arguments and a [`CallContext`]; [`typed`] for `Deserialize` arguments |
//! | [`error`] | [`ToolError`], a handler's failure or a guard's typed refusal |
//! | [`context`] | [`CallContext`], what a handler knows of its call (cancellation, progress, identity, the client); [`InputChannel`] and [`ClientRequests`] for input asked mid-call, [`CallProgress`] for progress on a call the surface answers |
//! | [`access`] | [`Access`] and [`Identity`], and [`check_call`], the call-time backstop for routes needing an authenticated caller |
//! | [`registration`] | [`Registration`], one tool ready to serve |
//! | [`source`] | [`ToolSource`], anything that publishes tools, runs them and says when they changed |
//!
//! What reaches the model is not decided here: the surface frames a
//! handler's result, maps its error (only `ERR_…` codes pass) and rules
//! every call before the handler runs. A handler only answers.
//!
//! ```
//! use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
//! use portcullis_handler::{typed, CallContext, Registration, ToolError};
//!
//! #[derive(serde::Deserialize)]
//! struct Add { a: i64, b: i64 }
//!
//! let registration = Registration::new(
//!     Tool::new("add").with_annotations(ToolAnnotations::read_only(true)),
//!     typed(|args: Add, _ctx: CallContext| async move {
//!         Ok::<_, ToolError>(ToolResult::text((args.a + args.b).to_string()))
//!     }),
//! )
//! .with_source("./plugins/math");
//!
//! // A surface calls the handler with the checked arguments and a context;
//! // outside any MCP session, a detached one.
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let args = serde_json::json!({"a": 2, "b": 40});
//! let result = rt.block_on(registration.handler.call(args, CallContext::detached("add")));
//! assert_eq!(result.unwrap().text_blocks().next(), Some("42"));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
pub mod context;
pub mod error;
pub mod handler;
pub mod registration;
pub mod source;

pub use access::{Access, Identity, check_call, missing_permissions};
pub use context::{
    CallContext, CallProgress, ClientRequests, InputChannel, InputSink, ProgressSink, RequestSink,
};
pub use error::ToolError;
pub use handler::{ToolFuture, ToolHandler, Typed, typed};
pub use registration::{IN_PROCESS_SOURCE, Registration};
pub use source::ToolSource;
