//! One trait for every kind of source.
//!
//! A native plugin, an application described by a route table and one
//! described by an OpenAPI document all answer the same two questions: which
//! tools (as `portcullis-server` [`Registration`]s, handlers included) and
//! what was reported while loading. The server checks ids across all of
//! them when it is built (`ERR_PLUGIN_TOOL_DUPLICATE_ID` naming both
//! sources).

use std::sync::Arc;

use portcullis_catalog::Diagnostic;
use portcullis_server::Registration;

use crate::forward::App;
use crate::native::NativePlugin;
use crate::openapi::OpenApiDocument;
use crate::route::HttpRoute;
use crate::routes::RouteTable;

/// Anything that provides tools.
pub trait ToolSource {
    /// The source's name in errors (a plugin directory, a route table path).
    fn source_name(&self) -> &str;

    /// The tools, ready for `ToolServer::builder().register_all(..)`.
    fn registrations(&self) -> Vec<Registration>;

    /// What loading reported without failing (skipped operations, simplified
    /// schemas). Empty by default.
    fn diagnostics(&self) -> &[Diagnostic] {
        &[]
    }
}

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
