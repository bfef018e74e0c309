//! One trait for every kind of source: [`ToolSource`], from the handler
//! contract (`portcullis-handler`), which a gateway's upstreams implement
//! too.
//!
//! A native plugin, an application described by a route table and one
//! described by an OpenAPI document all answer the same two questions: which
//! tools (as `portcullis-handler` [`Registration`]s, handlers included) and
//! what was reported while loading. Running one and the change signal are
//! the trait's defaults: the registration's handler, and no changes (a
//! manifest or document is read again only when the source is loaded
//! again). The server checks ids across all of them when it is built
//! (`ERR_PLUGIN_TOOL_DUPLICATE_ID` naming both sources).

use std::sync::Arc;

use portcullis_catalog::{Diagnostic, Tool};
use portcullis_handler::{Access, Registration, ToolHandler};
// The trait is the handler contract's; re-exported where it always was.
pub use portcullis_handler::source::ToolSource;

use crate::forward::App;
use crate::native::NativePlugin;
use crate::openapi::OpenApiDocument;
use crate::route::HttpRoute;
use crate::routes::RouteTable;

impl ToolSource for NativePlugin {
    fn source_name(&self) -> &str {
        self.label()
    }

    fn registrations(&self) -> Vec<Registration> {
        NativePlugin::registrations(self)
    }
}

/// An application's routes bound to where the application listens.
#[derive(Debug, Clone)]
pub struct AppSource {
    label: String,
    app: Arc<App>,
    routes: Vec<HttpRoute>,
    diagnostics: Vec<Diagnostic>,
}

impl AppSource {
    /// The routes of a route table, forwarded to `app`.
    pub fn from_route_table(table: RouteTable, app: Arc<App>) -> Self {
        AppSource {
            label: table.label,
            app,
            routes: table.routes,
            diagnostics: Vec::new(),
        }
    }

    /// The operations of an OpenAPI document, forwarded to `app`.
    pub fn from_openapi(document: OpenApiDocument, app: Arc<App>) -> Self {
        AppSource {
            label: document.label,
            app,
            routes: document.routes,
            diagnostics: document.diagnostics,
        }
    }

    /// The routes that become tools.
    pub fn routes(&self) -> &[HttpRoute] {
        &self.routes
    }
}

impl ToolSource for AppSource {
    fn source_name(&self) -> &str {
        &self.label
    }

    fn registrations(&self) -> Vec<Registration> {
        self.app.registrations(&self.label, &self.routes)
    }

    fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }
}

/// Tools written in Rust, in-process, as a source like the others.
///
/// ```
/// use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
/// use portcullis_handler::{CallContext, ToolError};
/// use portcullis_sources::source::{InProcessSource, ToolSource};
///
/// let source = InProcessSource::new("builtin").tool(
///     Tool::new("now").with_annotations(ToolAnnotations::read_only(true)),
///     |_args: serde_json::Value, _ctx: CallContext| async { Ok::<_, ToolError>(ToolResult::text("12:00")) },
/// );
/// let registrations = source.registrations();
/// assert_eq!(registrations[0].source, "builtin");
/// ```
#[derive(Clone)]
pub struct InProcessSource {
    name: String,
    tools: Vec<(Arc<Tool>, Access, Arc<dyn ToolHandler>)>,
}

impl std::fmt::Debug for InProcessSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tools.iter().map(|(t, _, _)| t.name.as_str()).collect();
        f.debug_struct("InProcessSource")
            .field("name", &self.name)
            .field("tools", &names)
            .finish()
    }
}

impl InProcessSource {
    /// An empty source named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        InProcessSource {
            name: name.into(),
            tools: Vec::new(),
        }
    }

    /// Adds a tool open to any caller.
    pub fn tool(self, tool: impl Into<Arc<Tool>>, handler: impl ToolHandler) -> Self {
        self.tool_with_access(tool, Access::open(), handler)
    }

    /// Adds a tool with an access requirement.
    pub fn tool_with_access(
        mut self,
        tool: impl Into<Arc<Tool>>,
        access: Access,
        handler: impl ToolHandler,
    ) -> Self {
        self.tools.push((tool.into(), access, Arc::new(handler)));
        self
    }
}

impl ToolSource for InProcessSource {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn registrations(&self) -> Vec<Registration> {
        self.tools
            .iter()
            .map(|(tool, access, handler)| Registration {
                tool: tool.clone(),
                source: self.name.clone(),
                access: access.clone(),
                handler: handler.clone(),
                foreign_schema: false,
            })
            .collect()
    }
}
