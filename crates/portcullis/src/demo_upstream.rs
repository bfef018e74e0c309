//! `portcullis demo-upstream`: a tiny MCP server over stdio, so
//! `examples/portcullis.toml` runs with nothing but the repo.
//!
//! It is deliberately a plain rmcp server (not a `portcullis-server`
//! `ToolServer`): it answers the way a third-party upstream would, with raw,
//! unframed output, so what a client sees through the gateway is framed once,
//! by the gateway. Tools:
//!
//! | tool | annotations | does |
//! |---|---|---|
//! | `echo` | read-only | returns `text` |
//! | `add` | read-only | returns `a + b` |
//! | `count` | read-only | counts to `n`, 20 ms a step, reporting progress on the way |
//! | `write_note` | a write | "saves" a note (kept in memory only) |
//!
//! `PORTCULLIS_DEMO_ECHO_DESCRIPTION` replaces `echo`'s description and
//! `PORTCULLIS_DEMO_ECHO_SCHEMA` (JSON) its input schema: a rug pull on
//! demand, for tests of the trust baseline. `PORTCULLIS_DEMO_DROP` leaves the
//! named tool out of the listing and `PORTCULLIS_DEMO_EXTRA` adds a read-only
//! tool of that name (it answers like `echo`), for tests of removed and
//! added tools.
//!
//! `PORTCULLIS_DEMO_PROMPT` makes it advertise prompts and list one,
//! `greet` (argument `who`), with that description;
//! `PORTCULLIS_DEMO_RESOURCE` makes it advertise resources and list one,
//! `demo://notes` (text/plain), with that description: for tests of the
//! pins of prompts and resources. They are listed only (a `prompts/get` or
//! `resources/read` is not answered).
//!
//! Hidden from `--help`: it is a fixture, not a feature.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// The demo server's state: the notes `write_note` kept.
#[derive(Clone, Default)]
pub struct DemoUpstream {
    notes: Arc<Mutex<Vec<String>>>,
}

/// The demo tools' definitions, as rmcp tools.
fn definitions() -> Vec<rmcp::model::Tool> {
    let tools = [
        json!({
            "name": "echo",
            "description": std::env::var("PORTCULLIS_DEMO_ECHO_DESCRIPTION").unwrap_or_else(|_| "Returns the text it is given.".to_owned()),
            "inputSchema": std::env::var("PORTCULLIS_DEMO_ECHO_SCHEMA").ok().and_then(|s| serde_json::from_str::<Value>(&s).ok())
                .unwrap_or_else(|| json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})),
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "add",
            "description": "Adds two numbers.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "count",
            "description": "Counts slowly from 1 to n, reporting progress at each step.",
            "inputSchema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["n"]},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "write_note",
            "description": "Saves a note (in memory only).",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "annotations": {"readOnlyHint": false, "destructiveHint": false}
        }),
    ];
    let extra = std::env::var("PORTCULLIS_DEMO_EXTRA").ok().map(|name| {
        json!({
            "name": name,
            "description": "Returns the text it is given (an extra tool).",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "annotations": {"readOnlyHint": true}
        })
    });
    let dropped = std::env::var("PORTCULLIS_DEMO_DROP").unwrap_or_default();
    tools
        .into_iter()
        .chain(extra)
        .filter(|t| t["name"] != dropped.as_str())
        .filter_map(|t| serde_json::from_value(t).ok())
        .collect()
}

fn text(result: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(result)]).into()
}

fn tool_error(message: impl Into<String>) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message)]).into()
}

impl ServerHandler for DemoUpstream {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        if std::env::var_os("PORTCULLIS_DEMO_PROMPT").is_some() {
            capabilities.prompts = Some(Default::default());
        }
        if std::env::var_os("PORTCULLIS_DEMO_RESOURCE").is_some() {
            capabilities.resources = Some(Default::default());
        }
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "portcullis-demo-upstream",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompts = match std::env::var("PORTCULLIS_DEMO_PROMPT") {
            Ok(description) => vec![json!({
                "name": "greet",
                "description": description,
                "arguments": [{"name": "who", "description": "Whom to greet", "required": true}]
            })],
            Err(_) => Vec::new(),
        };
        let prompts = serde_json::from_value(Value::Array(prompts))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = match std::env::var("PORTCULLIS_DEMO_RESOURCE") {
            Ok(description) => vec![json!({
                "uri": "demo://notes",
                "name": "notes",
                "description": description,
                "mimeType": "text/plain"
            })],
            Err(_) => Vec::new(),
        };
        let resources = serde_json::from_value(Value::Array(resources))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(definitions()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let string = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str| args.get(key).and_then(Value::as_f64);
        let extra = std::env::var("PORTCULLIS_DEMO_EXTRA").ok();
        let name = match request.name.as_ref() {
            n if extra.as_deref() == Some(n) => "echo",
            n => n,
        };
        Ok(match name {
            "echo" => match string("text") {
                Some(t) => text(t),
                None => tool_error("echo needs a string `text`"),
            },
            "add" => match (number("a"), number("b")) {
                (Some(a), Some(b)) => text((a + b).to_string()),
                _ => tool_error("add needs numbers `a` and `b`"),
            },
            "count" => {
                let n = args.get("n").and_then(Value::as_u64).unwrap_or(1).min(100);
                if let Some(token) = context.meta.get_progress_token() {
                    for i in 1..=n {
                        let mut param = ProgressNotificationParam::new(token.clone(), i as f64);
                        param.total = Some(n as f64);
                        let _ = context.peer.notify_progress(param).await;
                        // Counting takes a moment per step, as real work would.
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
                text(format!("counted to {n}"))
            }
            "write_note" => match string("text") {
                Some(t) => {
                    let count = match self.notes.lock() {
                        Ok(mut notes) => {
                            notes.push(t);
                            notes.len()
                        }
                        Err(_) => return Ok(tool_error("the note store is unusable")),
                    };
                    text(format!("saved note {count}"))
                }
                None => tool_error("write_note needs a string `text`"),
            },
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool: {other}"),
                    None,
                ));
            }
        })
    }
}

/// Serves the demo tools on stdin/stdout until the client closes the pipe.
pub async fn run() -> anyhow::Result<()> {
    portcullis_server::serve_stdio(DemoUpstream::default())
        .await
        .map_err(|e| anyhow::anyhow!("demo upstream: {e}"))
}
