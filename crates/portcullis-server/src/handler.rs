//! Tool handlers: the code that runs when a tool is called. The contract
//! lives in `portcullis-handler`, which tool sources depend on without
//! depending on this server; its names are re-exported here.

pub use portcullis_handler::context::{CallContext, InputSink};
pub use portcullis_handler::error::ToolError;
pub use portcullis_handler::handler::{ToolFuture, ToolHandler, Typed, typed};
