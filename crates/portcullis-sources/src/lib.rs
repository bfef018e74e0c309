//! placeholder
#![forbid(unsafe_code)]
#![warn(missing_docs)]
pub mod command;
mod containment;
pub mod error;
pub mod native;
pub use containment::PATH_ESCAPES_PLUGIN_ROOT;
pub use error::SourceError;
pub use native::{NativeOptions, NativePlugin, NativeTool};
