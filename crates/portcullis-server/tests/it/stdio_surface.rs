//! The stdio surface: the same tools and gate over a byte pipe, driven by
//! rmcp's client (a real MCP session over an in-memory duplex pipe).

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, ToolError, ToolServer, serve_io};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

#[tokio::test]
async fn tools_are_listed_gated_and_called_over_a_pipe() {
    let server = ToolServer::builder()
        .tool(
            Tool::new("hello").with_annotations(ToolAnnotations::read_only(true)),
            |args: Value, _: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(format!(
                    "hello {}",
                    args["name"].as_str().unwrap_or("?")
                )))
            },
        )
        .tool(Tool::new("write"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(ToolResult::text("x"))
        })
        .build()
        .unwrap();
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let serving = tokio::spawn(serve_io(server, (server_read, server_write)));

    let (client_read, client_write) = tokio::io::split(client_io);
    let client = ().serve((client_read, client_write)).await.unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["hello"], "the write tool is withheld on stdio too");
    let args = json!({"name": "pipe"}).as_object().cloned().unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("hello").with_arguments(args))
        .await
        .unwrap();
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(
        text.starts_with("<untrusted-tool-output tool=\"hello\">\nhello pipe\n"),
        "{text}"
    );
    assert!(
        client
            .call_tool(CallToolRequestParams::new("write"))
            .await
            .is_err()
    );

    client.cancel().await.unwrap();
    // The server ends when the client closes the pipe.
    serving.await.unwrap().unwrap();
}

/// A 2026-07-28 client never sends `initialize`; closing the pipe without
/// one is the normal end of its session, not an error to log.
#[tokio::test]
async fn a_pipe_closed_before_initialize_ends_the_session_cleanly() {
    let server = ToolServer::builder()
        .tool(
            Tool::new("hello").with_annotations(ToolAnnotations::read_only(true)),
            |_: Value, _: CallContext| async { Ok::<_, ToolError>(ToolResult::text("hi")) },
        )
        .build()
        .unwrap();
    let (server_io, client_io) = tokio::io::duplex(1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let serving = tokio::spawn(serve_io(server, (server_read, server_write)));
    drop(client_io);
    let ended = serving.await.expect("the session task does not panic");
    assert!(ended.is_ok(), "closing before initialize: {ended:?}");
}
