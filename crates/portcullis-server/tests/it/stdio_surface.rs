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

/// Stopped while serving, the pipe drains: a request sent after the stop
/// is refused with the shutdown's JSON-RPC error, the call in flight is
/// answered, one the client cancelled is neither answered nor waited for,
/// and the session ends as soon as nothing is left in flight (not at the
/// end of the grace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_pipe_answers_the_calls_in_flight_and_refuses_new_ones() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let grace = Duration::from_secs(5);
    let server = crate::session_call::slow_tool(Duration::from_millis(800))
        .build()
        .unwrap();
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let stop = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(portcullis_server::serve_io_until(
        server,
        (server_read, server_write),
        stop.clone(),
        grace,
    ));
    let (client_read, mut client_write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(client_read).lines();
    let mut send = async |message: Value| {
        let line = format!("{message}\n");
        client_write.write_all(line.as_bytes()).await.unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "drain", "version": "1"}}}),
    )
    .await;
    let first = lines.next_line().await.unwrap().unwrap();
    assert!(first.contains("\"id\":1"), "{first}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    for id in [2, 3] {
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow", "arguments": {}}}))
        .await;
    }
    send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 3}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopped = Instant::now();
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})).await;
    let mut answers = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
    {
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
        if answers.len() == 2 {
            break;
        }
    }
    let by_id = |id: u64| answers.iter().find(|a| a["id"] == id);
    let refused = by_id(4).unwrap_or_else(|| panic!("{answers:?}"));
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("shutting down"), "{refused}");
    let answered = by_id(2).unwrap_or_else(|| panic!("{answers:?}"));
    let text = answered["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("late answer"), "{answered}");
    let ended = tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    let took = stopped.elapsed();
    assert!(
        took < grace,
        "the drain waited for the cancelled call: {took:?}"
    );
    // Nothing more: the cancelled call is not answered.
    let rest = lines.next_line().await.unwrap_or_default();
    assert!(rest.is_none(), "{rest:?}");
}

/// A client that sends its calls and closes its end of the pipe at once
/// (a script piping requests in) still gets every answer before the
/// session ends, on the multi-threaded runtime the gateway runs on:
/// plain calls (answered in front of rmcp's service loop) and a request
/// rmcp answers alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sent_before_the_client_closes_the_pipe_are_all_answered() {
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    for round in 0..5 {
        let server = crate::session_call::slow_tool(Duration::from_millis(100 * round))
            .build()
            .unwrap();
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let (server_read, server_write) = tokio::io::split(server_io);
        let serving = tokio::spawn(serve_io(server, (server_read, server_write)));
        let (client_read, mut client_write) = tokio::io::split(client_io);
        let mut script = String::new();
        for line in [
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "script", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "slow", "arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "slow", "arguments": {}}}),
        ] {
            script.push_str(&format!("{line}\n"));
        }
        client_write.write_all(script.as_bytes()).await.unwrap();
        client_write.shutdown().await.unwrap();
        let mut lines = BufReader::new(client_read).lines();
        let mut ids = Vec::new();
        while let Some(line) = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the session ends within 20 s")
            .unwrap()
        {
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == 1 || answer["id"] == 3 {
                let text = answer["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("");
                assert!(text.contains("late answer"), "round {round}: {answer}");
            }
            ids.push(answer["id"].as_u64().expect("an answer"));
        }
        ids.sort_unstable();
        assert_eq!(ids, [0, 1, 2, 3], "round {round}");
        serving.await.unwrap().unwrap();
    }
}
