//! One tool, ready to serve: [`Registration`].

use std::sync::Arc;

use portcullis_catalog::Tool;

use crate::access::Access;
use crate::handler::ToolHandler;

/// The source name of tools registered without one.
pub const IN_PROCESS_SOURCE: &str = "in-process";

/// One tool, ready to register: its definition, where it came from, what it
/// needs from the caller, and its handler.
pub struct Registration {
    /// The definition the model sees (`name` is the tool id); shared with
    /// the catalogue a gateway registers from, not copied.
    pub tool: Arc<Tool>,
    /// Where it came from (a plugin directory, an app, an upstream); named in
    /// duplicate-id errors.
    pub source: String,
    /// Authentication requirement (routes with `auth: true`).
    pub access: Access,
    /// The code that runs.
    pub handler: Arc<dyn ToolHandler>,
    /// The definition was published by another server, which checks its
    /// own arguments: an input schema the surface cannot compile (an
    /// external `$ref`, which is never fetched) is then logged and the
    /// arguments go on unchecked, instead of failing the whole build. One
    /// hostile definition must not take its siblings down.
    pub foreign_schema: bool,
}

impl Registration {
    /// A registration from the in-process source, open to any caller.
    /// `tool` is a [`Tool`] or one already shared (`Arc<Tool>`).
    pub fn new(tool: impl Into<Arc<Tool>>, handler: impl ToolHandler) -> Self {
        Registration {
            tool: tool.into(),
            source: IN_PROCESS_SOURCE.to_owned(),
            access: Access::open(),
            handler: Arc::new(handler),
            foreign_schema: false,
        }
    }

    /// Sets the source name.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// Sets the access requirement.
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// Marks the definition as published by another server (see
    /// [`Registration::foreign_schema`]).
    pub fn with_foreign_schema(mut self) -> Self {
        self.foreign_schema = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_definition_is_registered_without_a_copy() {
        let definition = Arc::new(Tool::new("search").with_description("Search the docs"));
        let handler = |_: serde_json::Value, _: crate::CallContext| async {
            Ok(portcullis_catalog::ToolResult::text("ok"))
        };
        let registration = Registration::new(Arc::clone(&definition), handler);
        assert!(Arc::ptr_eq(&registration.tool, &definition));
        let owned = Registration::new(Tool::new("t"), handler);
        assert_eq!(owned.tool.name, "t");
    }
}
