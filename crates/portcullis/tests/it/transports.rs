//! One gateway, upstreams of every transport at once, end to end through
//! the real `portcullis` binary: `portcullis serve` with a config of three
//! upstreams —
//!
//! * `demo`: the binary's own `demo-upstream`, a **stdio** child;
//! * `web`: a [`ToolServer`] served over **Streamable HTTP** on loopback by
//!   this test (`portcullis_server::serve_http`);
//! * `legacy`: a [`ToolServer`] served over **legacy HTTP+SSE** (2024-11-05)
//!   on loopback by this test (`common::legacy_sse`) —
//!
//! reached by an rmcp client over HTTP and by the Python SDK over
//! `portcullis serve --stdio`: each lists the qualified tools of all three
//! and calls one on each. A SIGTERM then ends the gateway cleanly and takes
//! its stdio child with it. A raw stdio client then makes 300 sequential
//! calls across the three, bounded well under a per-call stall.

use crate::common;

use common::{alive, child_pids, toml_string, write_config};
use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, HttpServer, ToolError, ToolServer, serve_http};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

/// A read-only tool taking one string argument.
fn tool(name: &str, arg: &str, description: &str) -> Tool {
    Tool::new(name)
        .with_description(description)
        .with_input_schema(json!({
            "type": "object",
            "properties": {arg: {"type": "string"}},
            "required": [arg]
        }))
        .with_annotations(ToolAnnotations::read_only(true))
}

fn arg(args: &Value, name: &str) -> String {
    args[name].as_str().unwrap_or_default().to_owned()
}

/// The Streamable HTTP upstream: `lookup`.
async fn web_upstream() -> HttpServer {
    let tools = ToolServer::builder()
        .tool(
            tool("lookup", "key", "Looks a key up"),
            |args: Value, _: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(format!(
                    "found {} over streamable http",
                    arg(&args, "key")
                )))
            },
        )
        .build()
        .expect("the web upstream's tools");
    serve_http(tools, HttpOptions::default())
        .await
        .expect("the web upstream listens")
}

/// The legacy SSE upstream's tools: `shout`.
fn legacy_tools() -> ToolServer {
    ToolServer::builder()
        .tool(
            tool("shout", "text", "Says it louder"),
            |args: Value, _: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(format!(
                    "{} over sse",
                    arg(&args, "text").to_uppercase()
                )))
            },
        )
        .build()
        .expect("the legacy upstream's tools")
}

/// The three upstreams under their names, an in-memory store.
fn config(dir: &std::path::Path, web: &str, sse: &str) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            "[gateway]\nstore = \"memory\"\n\n{}\n\
             [upstreams.web]\ntype = \"streamable-http\"\nurl = {}\ntimeout_ms = 30000\n\n\
             [upstreams.legacy]\ntype = \"sse\"\nurl = {}\ntimeout_ms = 30000\n",
            common::DEMO,
            toml_string(web),
            toml_string(sse),
        ),
    )
}

/// What each of the three calls must answer, by qualified name: the
/// arguments and a line the framed output must contain.
fn calls(who: &str) -> [(&'static str, Value, String); 3] {
    [
        (
            "demo__echo",
            json!({"text": format!("{who} over stdio")}),
            format!("\n{who} over stdio\n"),
        ),
        (
            "web__lookup",
            json!({"key": who}),
            format!("\nfound {who} over streamable http\n"),
        ),
        (
            "legacy__shout",
            json!({"text": who}),
            format!("\n{} over sse\n", who.to_uppercase()),
        ),
    ]
}

const EXPOSED: [&str; 5] = [
    "demo__add",
    "demo__count",
    "demo__echo",
    "legacy__shout",
    "web__lookup",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_fronts_stdio_http_and_sse_upstreams_at_once() {
    let web = web_upstream().await;
    let sse = common::legacy_sse(legacy_tools()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), &web.url(), &sse.url());
    let mut served = tokio::task::block_in_place(|| common::serve(&config));
    assert!(
        served
            .listening
            .contains("5 tools exposed, 0 quarantined, 1 withheld"),
        "{}",
        served.listening
    );
    let children = child_pids(served.pid());
    assert_eq!(children.len(), 1, "one stdio child: {children:?}");
    assert_eq!(
        sse.sessions.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the gateway opened one SSE session"
    );

    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(served.url.clone());
    let client = ().serve(transport).await.expect("an MCP client connects");
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, EXPOSED);
    for (name, args, expected) in calls("rust") {
        let result = client
            .call_tool(
                CallToolRequestParams::new(name)
                    .with_arguments(args.as_object().cloned().unwrap_or_default()),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
        let body = result.content[0]
            .as_text()
            .map(|t| t.text.clone())
            .unwrap_or_default();
        assert!(
            body.starts_with(&format!("<untrusted-tool-output tool=\"{name}\">")),
            "{name}: {body}"
        );
        assert!(body.contains(&expected), "{name}: {body}");
    }
    let _ = client.cancel().await;

    let code = tokio::task::block_in_place(|| served.terminate());
    assert_eq!(code, Some(0), "SIGTERM drains and exits 0");
    for pid in children {
        assert!(!alive(pid), "the stdio child {pid} outlived the gateway");
    }
    web.close().await;
}

/// The Python SDK client over `portcullis serve --stdio`: lists the tools
/// and calls each of [`calls`]. Prints one JSON object.
const PYTHON_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, StdioServerParameters

async def main():
    calls = json.loads(sys.argv[1])
    server = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
    out = {"calls": {}}
    async with Client(server) as client:
        out["protocol"] = client.protocol_version
        listed = await client.list_tools()
        out["tools"] = sorted(tool.name for tool in listed.tools)
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            out["calls"][name] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    print(json.dumps(out))

asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_serve_stdio_reaches_all_three_transports() {
    let Some(python) = common::python() else {
        return;
    };
    let web = web_upstream().await;
    let sse = common::legacy_sse(legacy_tools()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), &web.url(), &sse.url());
    let plan: Vec<(&str, Value)> = calls("python")
        .into_iter()
        .map(|(name, args, _)| (name, args))
        .collect();
    let plan = serde_json::to_string(&plan).expect("JSON");
    let out = tokio::task::block_in_place(|| {
        common::python_json(
            &python,
            PYTHON_CLIENT,
            &[
                &plan,
                env!("CARGO_BIN_EXE_portcullis"),
                "serve",
                "--stdio",
                "--config",
                config.to_str().expect("a UTF-8 path"),
            ],
        )
    });
    assert_eq!(out["tools"], json!(EXPOSED), "{out}");
    for (name, _, expected) in calls("python") {
        let call = &out["calls"][name];
        assert_ne!(call["isError"], true, "{name}: {call}");
        let body = call["content"][0]["text"].as_str().unwrap_or_default();
        assert!(body.contains(&expected), "{name}: {body}");
    }
    web.close().await;
}

/// Desktop clients launch the gateway over stdio and wait for each answer
/// before the next call. Pipes have no Nagle, but a writer that batches
/// or flushes on a timer, or a read that waits out a timeout, would stall
/// every call the same way the HTTP surface once did on delayed ACKs:
/// 100 sequential calls to each of the three upstream transports (300 in
/// all) take a small fraction of the bound without one (0.6 s in a debug
/// build), and over 3 s with a 10 ms stall a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_calls_over_serve_stdio_do_not_stall() {
    let web = web_upstream().await;
    let sse = common::legacy_sse(legacy_tools()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config(dir.path(), &web.url(), &sse.url());
    let took = tokio::task::block_in_place(|| {
        let mut client = common::RawStdio::start(&config, false);
        client.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "pace", "version": "1"}}}),
        );
        let answer = client
            .answer_to(0, common::PATIENCE)
            .expect("initialize answered");
        assert_eq!(
            answer["result"]["protocolVersion"], "2025-11-25",
            "{answer}"
        );
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let started = std::time::Instant::now();
        for id in 1..=300u64 {
            let (name, args, expected) = calls(&format!("call{id}"))
                .into_iter()
                .nth(id as usize % 3)
                .expect("three calls");
            client.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": args}}));
            let answer = client
                .answer_to(id, common::PATIENCE)
                .unwrap_or_else(|| panic!("call {id} to {name} unanswered"));
            let body = answer["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            assert!(body.contains(&expected), "{name}: {answer}");
        }
        started.elapsed()
    });
    web.close().await;
    assert!(
        took < std::time::Duration::from_secs(3),
        "300 sequential calls over serve --stdio took {took:?}: a call waits on something"
    );
}

/// A front on loopback that answers every request with a 307 to `target`.
async fn redirecting_front(target: String) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("the front binds");
    let addr = listener.local_addr().expect("the front's address");
    let front = axum::Router::new().fallback(move || {
        let target = target.clone();
        async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, target)],
            )
        }
    });
    tokio::spawn(async move { axum::serve(listener, front).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_allowed_hosts_bound_where_its_redirects_go() {
    let web = web_upstream().await;
    // The front redirects to the web upstream under another host name.
    let target = format!("http://localhost:{}/mcp", web.local_addr().port());
    let front = redirecting_front(target).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let with = |hosts: &str| {
        write_config(
            dir.path(),
            &format!(
                "[gateway]\nstore = \"memory\"\n\n\
                 [upstreams.web]\ntype = \"streamable-http\"\nurl = \"http://{front}/mcp\"\ntimeout_ms = 10000\n{hosts}"
            ),
        )
    };
    let tools = |config: &std::path::Path| {
        let out = common::portcullis(&["tools", "--json", "--config", &config.to_string_lossy()]);
        (common::text(&out.stdout), common::text(&out.stderr))
    };
    // Without a list the redirect is followed (both are on loopback, where
    // the upstream itself is): the refusal below is the list's doing.
    let (listed, _) = tools(&with(""));
    assert!(listed.contains("lookup"), "{listed}");
    let (listed, stderr) = tools(&with("allowed_hosts = [\"mcp.example.com\"]\n"));
    assert!(!listed.contains("lookup"), "{listed}");
    assert!(
        stderr.contains("host \"localhost\" is not in allowedHosts"),
        "{stderr}"
    );
    // Listing the redirect's host lets it through.
    let (listed, _) = tools(&with("allowed_hosts = [\"localhost\"]\n"));
    assert!(listed.contains("lookup"), "{listed}");
}

#[test]
fn allowed_hosts_is_for_remote_upstreams_and_bare_hosts() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (entry, complaint) in [
        (
            "type = \"stdio\"\ncommand = \"true\"\nallowed_hosts = [\"a.example\"]\n",
            "a stdio upstream has no allowed_hosts",
        ),
        (
            "type = \"streamable-http\"\nurl = \"http://127.0.0.1:9/mcp\"\nallowed_hosts = [\"https://a.example/\"]\n",
            "is not a host name or address",
        ),
    ] {
        let config = write_config(dir.path(), &format!("[upstreams.x]\n{entry}"));
        let out = common::portcullis(&["check", "--config", &config.to_string_lossy()]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = common::text(&out.stderr);
        assert!(stderr.contains("upstreams.x.allowed_hosts"), "{stderr}");
        assert!(stderr.contains(complaint), "{stderr}");
    }
}
