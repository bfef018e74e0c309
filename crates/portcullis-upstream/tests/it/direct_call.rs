//! Calls to a 2026-07-28 Streamable HTTP server go the direct way
//! (`connection::direct`); these pin what that path must do besides a
//! plain JSON answer, which every HTTP test in `integration.rs` covers: a
//! server that answers with an event stream, log messages on that stream
//! handed over before the call returns, a JSON-RPC error, and a caller
//! that wants progress still getting it (through rmcp's path).

// Logging is deprecated by SEP-2577, but 2026 servers may still log on a
// call's stream, and the gateway passes it on.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use portcullis_upstream::{
    CallContext, CallError, ConnectOptions, LogSink, McpServerConfig, Toolset, connect,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// A stateless server that answers every POST with an event stream.
#[derive(Clone)]
struct Streaming;

impl ServerHandler for Streaming {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = ["echo", "fail", "count"].map(|name| {
            serde_json::from_value::<Tool>(json!({
                "name": name,
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": true}
            }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
        });
        Ok(ListToolsResult::with_all_items(
            tools.into_iter().collect::<Result<_, _>>()?,
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "echo" => {
                let _ = context
                    .peer
                    .notify_logging_message(LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        json!("echoing"),
                    ))
                    .await;
                let text = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
            }
            "count" => {
                if let Some(token) = context.meta.get_progress_token() {
                    for step in 1..=3 {
                        let _ = context
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), f64::from(step))
                                    .with_total(3.0),
                            )
                            .await;
                    }
                }
                Ok(CallToolResult::success(vec![ContentBlock::text("counted")]).into())
            }
            _ => Err(ErrorData::invalid_params("no such luck", None)),
        }
    }
}

async fn serve() -> (String, tokio::task::JoinHandle<()>) {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(false);
    let service = StreamableHttpService::new(
        || Ok(Streaming),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("has an address")
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

#[derive(Default)]
struct Logs(Mutex<Vec<Value>>);

impl LogSink for Logs {
    fn log(&self, _server: &str, message: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        if let Ok(mut seen) = self.0.lock() {
            seen.push(message.data);
        }
        Box::pin(async {})
    }
}

async fn connected(url: &str) -> Toolset {
    let toolset = connect(
        vec![McpServerConfig::streamable_http("sx", url)],
        ConnectOptions::default(),
    )
    .await
    .expect("wiring is fine");
    assert!(
        toolset.diagnostics().is_empty(),
        "{:?}",
        toolset.diagnostics()
    );
    toolset
}

fn text(result: &portcullis_catalog::ToolResult) -> String {
    result.content[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_answer_is_read_and_its_logs_handed_over_first() {
    let (url, server) = serve().await;
    let toolset = connected(&url).await;
    let logs = Arc::new(Logs::default());
    toolset.passthrough().route_logs(logs.clone());
    for round in 0..5 {
        let result = toolset
            .call(
                "echo",
                Some(json!({"message": "hello"})),
                &CallContext::default(),
            )
            .await
            .expect("the tool answers");
        assert_eq!(text(&result), "hello", "round {round}");
        let seen = std::mem::take(&mut *logs.0.lock().expect("not poisoned"));
        assert_eq!(seen, [json!("echoing")], "round {round}");
    }
    let error = toolset
        .call("fail", Some(json!({})), &CallContext::default())
        .await
        .expect_err("the server refuses");
    assert!(
        matches!(&error, CallError::Protocol { message, .. } if message == "no such luck"),
        "{error:?}"
    );
    toolset.close().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_wants_progress_still_gets_it() {
    let (url, server) = serve().await;
    let toolset = connected(&url).await;
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let result = toolset
        .call(
            "count",
            Some(json!({})),
            &CallContext::default().with_progress(sender),
        )
        .await
        .expect("the tool answers");
    assert_eq!(text(&result), "counted");
    let mut steps = Vec::new();
    while let Ok(progress) = receiver.try_recv() {
        steps.push(progress.progress);
    }
    assert_eq!(steps, [1.0, 2.0, 3.0]);
    toolset.close().await;
    server.abort();
}
