//! The conformance fixture server: every fixture the official MCP
//! conformance suite (`@modelcontextprotocol/conformance` 0.1.16 and
//! 0.2.0-alpha.12) calls, served by `portcullis-server`.
//!
//! Ordinary tools go through the library's [`ToolServer`] (so the suite also
//! exercises validation, the exposure gate and the edge); what the library
//! deliberately does not model — prompts, resources, logging, completions,
//! `subscriptions/listen`, and the 2026-07-28 multi-round (`input_required`)
//! results — is answered by the [`Fixture`] handler wrapped around it.
//!
//! ```text
//! portcullis-conformance-fixture [--port 3100] [--stdio] [--stateless] [--legacy]
//! ```
//!
//! `--legacy` serves only the initialize-era revisions (2025-11-25 and
//! older), as most deployed servers do: a client that probes with
//! `server/discover` is refused and falls back to `initialize`. The gateway
//! is measured in front of it that way (`.ci/conformance.sh`), since the
//! 2025 scenarios need a session that may send server-to-client requests.
//!
//! HTTP on 127.0.0.1 with legacy sessions on (2025-era scenarios need
//! server-to-client requests on a session); `--stdio` serves stdin/stdout.
//! Logs go to stderr.

// Logging, sampling and roots are deprecated by SEP-2577 but still part of
// the suite (and of every 2025-era client): the fixture must serve them.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use portcullis_catalog::{Tool, ToolAnnotations, ToolResult};
use portcullis_server::{CallContext, HttpOptions, ToolError, ToolServer, serve_http, serve_stdio};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientResult,
    CompleteRequestParams, CompleteResult, ElicitRequest, GetPromptRequestParams,
    GetPromptResponse, InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, ServerRequest, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

/// A 1×1 transparent PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A tiny valid WAV (44-byte header, two silent samples).
const WAV: &str = "UklGRigAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQQAAAAAAAAA";
/// Key for the fixture's tamper-evident `requestState` (a test fixture,
/// not a secret).
const STATE_KEY: &str = "portcullis-fixture-state-key";

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let mut port = 3100u16;
    let mut stdio = false;
    let mut stateless = false;
    let mut legacy = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => match args.next().and_then(|p| p.parse().ok()) {
                Some(p) => port = p,
                None => return usage("--port needs a number"),
            },
            "--stdio" => stdio = true,
            "--stateless" => stateless = true,
            "--legacy" => legacy = true,
            other => return usage(&format!("unknown argument {other}")),
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(port, stdio, stateless, legacy))
}

fn usage(problem: &str) -> std::process::ExitCode {
    eprintln!(
        "{problem}\nusage: portcullis-conformance-fixture [--port 3100] [--stdio] [--stateless] [--legacy]"
    );
    std::process::ExitCode::from(2)
}

async fn run(port: u16, stdio: bool, stateless: bool, legacy: bool) -> std::process::ExitCode {
    let fixture = match Fixture::new(legacy) {
        Ok(fixture) => fixture,
        Err(error) => {
            eprintln!("{error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if stdio {
        return match serve_stdio(fixture).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{error}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let options = HttpOptions {
        listen: ([127, 0, 0, 1], port).into(),
        legacy_sessions: !stateless,
        handle_signals: true,
        ..HttpOptions::default()
    };
    match serve_http(fixture, options).await {
        Ok(server) => {
            eprintln!("fixture listening on {}", server.url());
            server.wait().await;
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn ro(name: &str, description: &str) -> Tool {
    Tool::new(name)
        .with_description(description)
        .with_annotations(ToolAnnotations::read_only(true))
}

fn content(items: Vec<Value>) -> ToolResult {
    ToolResult {
        content: items,
        ..Default::default()
    }
}

fn string_arg(name: &str) -> Value {
    json!({"type": "object", "properties": {name: {"type": "string"}}, "required": [name]})
}

/// Deserialises a wire type from JSON we wrote ourselves.
fn wire<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value)
        .map_err(|e| ErrorData::internal_error(format!("fixture bug: {e}"), None))
}

#[derive(Clone)]
struct Fixture {
    tools: ToolServer,
    mrtr: Arc<Vec<rmcp::model::Tool>>,
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    changes: broadcast::Sender<Change>,
    /// Serve only the initialize-era revisions (`--legacy`).
    legacy: bool,
}

#[derive(Clone, Copy, Debug)]
enum Change {
    Tools,
    Prompts,
}

impl Fixture {
    fn new(legacy: bool) -> Result<Self, portcullis_server::ServerError> {
        let (changes, _) = broadcast::channel(16);
        let log_level = Arc::new(Mutex::new(None));
        let tools = library_tools(log_level.clone(), changes.clone()).build()?;
        let mrtr = MRTR_TOOLS
            .iter()
            .map(|(name, description)| {
                let mut tool = rmcp::model::Tool::new_with_raw(
                    *name,
                    Some((*description).into()),
                    Arc::new(serde_json::Map::from_iter([(
                        "type".to_owned(),
                        json!("object"),
                    )])),
                );
                tool.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
                tool
            })
            .collect();
        Ok(Fixture {
            tools,
            mrtr: Arc::new(mrtr),
            log_level,
            changes,
            legacy,
        })
    }
}

fn library_tools(
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    changes: broadcast::Sender<Change>,
) -> portcullis_server::ToolServerBuilder {
    let logging_level = log_level.clone();
    let tool_changes = changes.clone();
    ToolServer::builder()
        .server_info("portcullis-conformance-fixture", env!("CARGO_PKG_VERSION"))
        .tool(ro("test_simple_text", "Returns simple text content"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(ToolResult::text("This is a simple text response for testing."))
        })
        .tool(ro("test_image_content", "Returns image content"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(content(vec![json!({"type": "image", "data": PNG, "mimeType": "image/png"})]))
        })
        .tool(ro("test_audio_content", "Returns audio content"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(content(vec![json!({"type": "audio", "data": WAV, "mimeType": "audio/wav"})]))
        })
        .tool(ro("test_embedded_resource", "Returns an embedded resource"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(content(vec![json!({"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}})]))
        })
        .tool(ro("test_multiple_content_types", "Returns text, image and resource"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(content(vec![
                json!({"type": "text", "text": "Multiple content types test:"}),
                json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
                json!({"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}),
            ]))
        })
        .tool(ro("test_tool_with_logging", "Sends log notifications while running"), move |_: Value, ctx: CallContext| {
            let level = logging_level.clone();
            async move {
                for (i, message) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    log(&ctx, &level, message).await;
                }
                Ok::<_, ToolError>(ToolResult::text("Tool with logging executed successfully"))
            }
        })
        .tool(ro("test_tool_with_progress", "Reports progress"), |_: Value, ctx: CallContext| async move {
            for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                ctx.progress(step, Some(100.0), Some(&format!("Completed step {step} of 100"))).await;
            }
            let token = ctx
                .request()
                .and_then(|r| r.meta.get_progress_token())
                .and_then(|t| serde_json::to_value(t).ok())
                .map(|t| t.as_str().map(str::to_owned).unwrap_or_else(|| t.to_string()))
                .unwrap_or_else(|| "no progress token".into());
            Ok::<_, ToolError>(ToolResult::text(token))
        })
        .tool(ro("test_error_handling", "Always returns an error result"), |_: Value, _: CallContext| async {
            Ok::<_, ToolError>(ToolResult::error_text("This tool intentionally returns an error for testing"))
        })
        .tool(
            ro("test_sampling", "Asks the client to sample an LLM").with_input_schema(string_arg("prompt")),
            |args: Value, ctx: CallContext| async move {
                let prompt = args["prompt"].as_str().unwrap_or_default().to_owned();
                let request = json!({"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "maxTokens": 100}});
                let text = match ask(&ctx, request).await {
                    Ok(result) => format!("LLM response: {}", result["content"]["text"].as_str().unwrap_or_default()),
                    Err(error) => format!("Sampling not supported or error: {error}"),
                };
                Ok::<_, ToolError>(ToolResult::text(text))
            },
        )
        .tool(
            ro("test_elicitation", "Asks the user for input").with_input_schema(string_arg("message")),
            |args: Value, ctx: CallContext| async move {
                let schema = json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}},
                    "required": ["username", "email"]});
                elicit(&ctx, args["message"].as_str().unwrap_or_default(), schema, "User response").await
            },
        )
        .tool(ro("test_elicitation_sep1034_defaults", "Elicitation with defaults"), |_: Value, ctx: CallContext| async move {
            let schema = json!({"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true}}, "required": []});
            elicit(&ctx, "Please review and update the form fields with defaults", schema, "Elicitation completed").await
        })
        .tool(ro("test_elicitation_sep1330_enums", "Elicitation with enums"), |_: Value, ctx: CallContext| async move {
            let schema = json!({"type": "object", "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"}]}}}, "required": []});
            elicit(&ctx, "Please select options from the enum fields", schema, "Elicitation completed").await
        })
        .tool(
            ro("json_schema_2020_12_tool", "A tool whose input schema uses JSON Schema 2020-12 keywords").with_input_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}},
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            })),
            |args: Value, _: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(format!("JSON Schema 2020-12 tool called with: {args}")))
            },
        )
        .tool(
            ro("test_custom_headers", "Mirrors a parameter into an Mcp-Param header (SEP-2243)").with_input_schema(json!({
                "type": "object",
                "properties": {
                    "region": {"type": "string", "description": "Mirrored as Mcp-Param-Region", "x-mcp-header": "Region"},
                    "query": {"type": "string", "description": "Not mirrored"}
                },
                "required": ["region"]
            })),
            |args: Value, _: CallContext| async move {
                Ok::<_, ToolError>(ToolResult::text(format!("region={}", args["region"].as_str().unwrap_or_default())))
            },
        )
        .tool(ro("test_streaming_elicitation", "Streams progress, then answers"), |_: Value, ctx: CallContext| async move {
            ctx.progress(1.0, Some(2.0), Some("working")).await;
            Ok::<_, ToolError>(ToolResult::text("Streaming completed"))
        })
        .tool(ro("test_logging_tool", "Logs only when the request asks for a level"), |_: Value, ctx: CallContext| async move {
            let level = ctx.request().and_then(|r| r.meta.log_level());
            if let (Some(level), Some(peer)) = (level, ctx.peer()) {
                let mut param = LoggingMessageNotificationParam::new(level, json!("Logging evaluated"));
                param.logger = Some("fixture".into());
                #[allow(deprecated)]
                let _ = peer.notify_logging_message(param).await;
            }
            Ok::<_, ToolError>(ToolResult::text("Logging evaluated"))
        })
        .tool(ro("test_trigger_tool_change", "Announces a tool list change"), move |_: Value, _: CallContext| {
            let changes = tool_changes.clone();
            async move {
                let _ = changes.send(Change::Tools);
                Ok::<_, ToolError>(ToolResult::text("Mutation triggered"))
            }
        })
        .tool(ro("test_trigger_prompt_change", "Announces a prompt list change"), move |_: Value, _: CallContext| {
            let changes = changes.clone();
            async move {
                let _ = changes.send(Change::Prompts);
                Ok::<_, ToolError>(ToolResult::text("Mutation triggered"))
            }
        })
}

async fn log(ctx: &CallContext, level: &Mutex<Option<LoggingLevel>>, message: &str) {
    let Some(peer) = ctx.peer() else { return };
    // Respect logging/setLevel: nothing below the client's threshold.
    let threshold = level.lock().map(|l| *l).unwrap_or(None);
    if threshold.is_some_and(|t| t as u8 > LoggingLevel::Info as u8) {
        return;
    }
    let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(message));
    #[allow(deprecated)]
    if let Err(error) = peer.notify_logging_message(param).await {
        tracing::debug!(%error, "log notification not delivered");
    }
}

/// Sends a server-to-client request on the call's own session and returns
/// the client's answer as JSON.
async fn ask(ctx: &CallContext, request: Value) -> Result<Value, String> {
    ask_peer(ctx.peer().ok_or("no client")?, request).await
}

async fn elicit(
    ctx: &CallContext,
    message: &str,
    schema: Value,
    prefix: &str,
) -> Result<ToolResult, ToolError> {
    let request = json!({"method": "elicitation/create", "params": {
        "mode": "form", "message": message, "requestedSchema": schema}});
    let text = match ask(ctx, request).await {
        Ok(result) => format!(
            "{prefix}: action={}, content={}",
            result["action"].as_str().unwrap_or_default(),
            result.get("content").cloned().unwrap_or(Value::Null)
        ),
        Err(error) => format!("Elicitation not supported or error: {error}"),
    };
    Ok(ToolResult::text(text))
}

const MRTR_TOOLS: &[(&str, &str)] = &[
    (
        "test_input_required_result_elicitation",
        "Asks for the user's name, then greets",
    ),
    (
        "test_input_required_result_sampling",
        "Asks the client to sample, then answers",
    ),
    (
        "test_input_required_result_list_roots",
        "Asks for the client's roots",
    ),
    (
        "test_input_required_result_request_state",
        "Round-trips an opaque request state",
    ),
    (
        "test_input_required_result_multiple_inputs",
        "Asks for three inputs at once",
    ),
    (
        "test_input_required_result_multi_round",
        "Takes three rounds",
    ),
    (
        "test_input_required_result_tampered_state",
        "Refuses a tampered request state",
    ),
    (
        "test_input_required_result_capabilities",
        "Asks only for what the client supports",
    ),
    ("test_missing_capability", "Needs the sampling capability"),
];

fn sign(payload: &str) -> String {
    let mac = Sha256::digest(format!("{STATE_KEY}:{payload}").as_bytes());
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("{payload}.{hex}")
}

fn verify(state: &str) -> Option<&str> {
    let (payload, _) = state.rsplit_once('.')?;
    (sign(payload) == state).then_some(payload)
}

fn elicit_request(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}}})
}

fn sampling_request(text: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens}})
}

fn roots_request() -> Value {
    json!({"method": "roots/list", "params": {}})
}

fn input_required(
    requests: Value,
    state: Option<String>,
) -> Result<InputRequiredResult, ErrorData> {
    let mut body = json!({"resultType": "input_required", "inputRequests": requests});
    if let Some(state) = state {
        body["requestState"] = json!(state);
    }
    wire(body)
}

fn complete_text(text: impl Into<String>) -> CallToolResponse {
    rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(text.into())]).into()
}

/// The multi-round fixtures for an initialize-era client, which cannot take
/// an `input_required` result: each round's input requests are sent as
/// real requests on the client's session (all at once), the answers that
/// came back are the round's `inputResponses` (a request the client
/// refused is left out, as a 2026 client leaves out what it cannot
/// answer), and the fixture runs again, as a server of that era would.
/// `test_missing_capability` really samples; a refusal is `-32021`. So a
/// gateway in front of this fixture relays real server requests, and its
/// 2026-07-28 callers see them as its own `input_required` rounds.
async fn on_session(
    mut request: CallToolRequestParams,
    caps: Option<&ClientCapabilities>,
    peer: &rmcp::Peer<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    if request.name == "test_missing_capability" {
        let mut required = ClientCapabilities::default();
        required.sampling = Some(Default::default());
        if caps.is_some_and(|c| c.sampling.is_some()) {
            let asked = ask_peer(peer, sampling_request("Say hello", 20)).await;
            if asked.is_ok() {
                return Ok(complete_text("Success"));
            }
        }
        return Err(ErrorData::missing_required_client_capability(required));
    }
    // The fixtures settle within three rounds; the bound only stops one
    // that a client keeps refusing.
    for _ in 0..8 {
        let required = match mrtr_call(&request, caps) {
            Some(Ok(CallToolResponse::InputRequired(required))) => required,
            Some(other) => return other,
            None => break,
        };
        let asks = required.input_requests.unwrap_or_default();
        let answers = futures::future::join_all(asks.into_iter().map(|(key, asked)| async move {
            let asked = serde_json::to_value(asked).unwrap_or_default();
            (key, ask_peer(peer, asked).await)
        }))
        .await;
        request.input_responses = Some(
            answers
                .into_iter()
                .filter_map(|(key, answer)| Some((key, answer.ok()?)))
                .collect(),
        );
        request.request_state = required.request_state;
    }
    Err(ErrorData::internal_error(
        "the client did not answer the fixture's requests",
        None,
    ))
}

/// Sends a request written as `{method, params}` to the client of a
/// session and returns its answer as JSON.
async fn ask_peer(peer: &rmcp::Peer<RoleServer>, request: Value) -> Result<Value, String> {
    let params = request["params"].clone();
    let request = match request["method"].as_str() {
        Some("sampling/createMessage") => {
            ServerRequest::CreateMessageRequest(rmcp::model::CreateMessageRequest::new(
                serde_json::from_value(params).map_err(|e| e.to_string())?,
            ))
        }
        Some("roots/list") => {
            ServerRequest::ListRootsRequest(rmcp::model::ListRootsRequest::default())
        }
        _ => ServerRequest::ElicitRequest(ElicitRequest::new(
            serde_json::from_value(params).map_err(|e| e.to_string())?,
        )),
    };
    match peer
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?
    {
        ClientResult::CreateMessageResult(result) => serde_json::to_value(result),
        ClientResult::ElicitResult(result) => serde_json::to_value(result),
        ClientResult::ListRootsResult(result) => serde_json::to_value(result),
        other => serde_json::to_value(other),
    }
    .map_err(|e| e.to_string())
}

/// The multi-round fixtures. `None` means "not one of them".
fn mrtr_call(
    request: &CallToolRequestParams,
    caps: Option<&ClientCapabilities>,
) -> Option<Result<CallToolResponse, ErrorData>> {
    let responses: BTreeMap<String, Value> = request.input_responses.clone().unwrap_or_default();
    let state = request.request_state.as_deref();
    let has = |key: &str| responses.get(key).is_some_and(Value::is_object);
    let again = |requests: Value, state: Option<String>| {
        input_required(requests, state).map(CallToolResponse::InputRequired)
    };
    let result = match request.name.as_ref() {
        "test_input_required_result_elicitation" => {
            let name = responses
                .get("user_name")
                .and_then(|r| r["content"]["name"].as_str())
                .map(str::to_owned);
            match name {
                Some(name) => Ok(complete_text(format!("Hello, {name}!"))),
                None => again(
                    json!({"user_name": elicit_request("What is your name?", json!({"name": {"type": "string"}}), &["name"])}),
                    None,
                ),
            }
        }
        "test_input_required_result_sampling" => {
            match responses.get("capital_question").filter(|r| r.is_object()) {
                Some(answer) => Ok(complete_text(format!(
                    "Sampled: {}",
                    answer["content"]["text"].as_str().unwrap_or_default()
                ))),
                None => again(
                    json!({"capital_question": sampling_request("What is the capital of France?", 100)}),
                    None,
                ),
            }
        }
        "test_input_required_result_list_roots" => {
            match responses.get("client_roots").filter(|r| r.is_object()) {
                Some(roots) => Ok(complete_text(format!("Roots: {}", roots["roots"]))),
                None => again(json!({"client_roots": roots_request()}), None),
            }
        }
        "test_input_required_result_request_state" => {
            if has("confirm") && state.and_then(verify) == Some("confirm") {
                Ok(complete_text("Confirmed: state-ok"))
            } else {
                again(
                    json!({"confirm": elicit_request("Please confirm", json!({"ok": {"type": "boolean"}}), &["ok"])}),
                    Some(sign("confirm")),
                )
            }
        }
        "test_input_required_result_multiple_inputs" => {
            if has("user_name")
                && has("greeting")
                && has("client_roots")
                && state.and_then(verify) == Some("multi")
            {
                Ok(complete_text("All inputs received"))
            } else {
                again(
                    json!({
                        "user_name": elicit_request("What is your name?", json!({"name": {"type": "string"}}), &["name"]),
                        "greeting": sampling_request("Generate a greeting", 50),
                        "client_roots": roots_request()
                    }),
                    Some(sign("multi")),
                )
            }
        }
        "test_input_required_result_multi_round" => match state.and_then(verify) {
            Some("round2") if has("step2") => Ok(complete_text("All rounds completed")),
            Some("round1") if has("step1") => again(
                json!({"step2": elicit_request("Step 2: What is your favorite color?", json!({"color": {"type": "string"}}), &["color"])}),
                Some(sign("round2")),
            ),
            _ => again(
                json!({"step1": elicit_request("Step 1: What is your name?", json!({"name": {"type": "string"}}), &["name"])}),
                Some(sign("round1")),
            ),
        },
        "test_input_required_result_tampered_state" => match state {
            Some(state) if verify(state) == Some("tamper") && has("confirm") => {
                Ok(complete_text("Confirmed: state-ok"))
            }
            Some(_) => Err(ErrorData::invalid_params(
                "requestState failed its integrity check",
                None,
            )),
            None => again(
                json!({"confirm": elicit_request("Please confirm", json!({"ok": {"type": "boolean"}}), &["ok"])}),
                Some(sign("tamper")),
            ),
        },
        "test_input_required_result_capabilities" => {
            if !responses.is_empty() {
                Ok(complete_text("Inputs received"))
            } else {
                let mut requests = serde_json::Map::new();
                if caps.is_some_and(|c| c.sampling.is_some()) {
                    requests.insert("sampled".into(), sampling_request("Say hello", 20));
                }
                if caps.is_some_and(|c| c.elicitation.is_some()) {
                    requests.insert(
                        "answer".into(),
                        elicit_request("Anything?", json!({"x": {"type": "string"}}), &[]),
                    );
                }
                if caps.is_some_and(|c| c.roots.is_some()) {
                    requests.insert("roots".into(), roots_request());
                }
                if requests.is_empty() {
                    Ok(complete_text("No client capabilities to ask for"))
                } else {
                    again(Value::Object(requests), None)
                }
            }
        }
        "test_missing_capability" => {
            if caps.is_some_and(|c| c.sampling.is_some()) {
                Ok(complete_text("Success"))
            } else {
                let mut required = ClientCapabilities::default();
                required.sampling = Some(Default::default());
                Err(ErrorData::missing_required_client_capability(required))
            }
        }
        _ => return None,
    };
    Some(result)
}

impl ServerHandler for Fixture {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.legacy {
            std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = serde_json::from_value(json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "logging": {},
            "completions": {}
        }))
        .unwrap_or_default();
        let mut info = self.tools.get_info();
        info.capabilities = capabilities;
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools: Vec<_> = self
            .tools
            .listed_tools()
            .iter()
            .chain(self.mrtr.iter())
            .cloned()
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tools
            .get_tool(name)
            .or_else(|| self.mrtr.iter().find(|t| t.name == name).cloned())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caps = context.client_capabilities();
        let modern = context
            .meta
            .protocol_version()
            .is_some_and(|version| !version.has_initialize());
        if !modern && MRTR_TOOLS.iter().any(|(name, _)| *name == request.name) {
            return on_session(request, caps.as_ref(), &context.peer).await;
        }
        if let Some(result) = mrtr_call(&request, caps.as_ref()) {
            return result;
        }
        self.tools.call_tool(request, context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Ok(mut level) = self.log_level.lock() {
            *level = Some(request.level);
        }
        Ok(())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        wire(
            json!({"resultType": "complete", "completion": {"values": [], "total": 0, "hasMore": false}}),
        )
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        wire(json!({"resultType": "complete", "prompts": [
            {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
            {"name": "test_prompt_with_arguments", "description": "A prompt with required arguments", "arguments": [
                {"name": "arg1", "description": "First test argument", "required": true},
                {"name": "arg2", "description": "Second test argument", "required": true}]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt with an embedded resource", "arguments": [
                {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image"},
            {"name": "test_input_required_result_prompt", "description": "Asks for context before answering"}
        ]}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |name: &str| {
            args.get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let user_text =
            |text: String| json!({"role": "user", "content": {"type": "text", "text": text}});
        let messages = match request.name.as_str() {
            "test_simple_prompt" => vec![user_text("This is a simple prompt for testing.".into())],
            "test_prompt_with_arguments" => vec![user_text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg("arg1"),
                arg("arg2")
            ))],
            "test_prompt_with_embedded_resource" => vec![
                json!({"role": "user", "content": {"type": "resource", "resource": {
                    "uri": arg("resourceUri"), "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."}}}),
                user_text("Please process the embedded resource above.".into()),
            ],
            "test_prompt_with_image" => vec![
                json!({"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}}),
                user_text("Please analyze the image above.".into()),
            ],
            "test_input_required_result_prompt" => {
                let context = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_context"))
                    .and_then(|r| r["content"]["context"].as_str())
                    .map(str::to_owned);
                match context {
                    Some(context) => vec![user_text(format!("Use this context: {context}"))],
                    None => {
                        return input_required(
                            json!({"user_context": elicit_request(
                                "What context should the prompt use?",
                                json!({"context": {"type": "string"}}),
                                &["context"])}),
                            None,
                        )
                        .map(GetPromptResponse::InputRequired);
                    }
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt: {other}"),
                    None,
                ));
            }
        };
        wire(json!({"resultType": "complete", "messages": messages}))
            .map(GetPromptResponse::Complete)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        wire(json!({"resultType": "complete", "resources": [
            {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
             "description": "A static text resource", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
             "description": "A static binary resource (a PNG)", "mimeType": "image/png"},
            {"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource",
             "description": "A resource that can be subscribed to", "mimeType": "text/plain"}
        ]}))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        wire(json!({"resultType": "complete", "resourceTemplates": [
            {"uriTemplate": "test://template/{id}/data", "name": "template-data",
             "title": "Template Data", "description": "Data for an id", "mimeType": "application/json"}
        ]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."}),
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => json!({"uri": uri, "mimeType": "application/json",
                    "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("Resource not found: {uri}"),
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        wire(json!({"resultType": "complete", "contents": [contents]}))
            .map(ReadResourceResponse::Complete)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tracing::info!(uri = %request.uri, "subscribed");
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tracing::info!(uri = %request.uri, "unsubscribed");
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.changes.subscribe();
        let wants_tools = context.accepted().tools_list_changed.unwrap_or(false);
        let wants_prompts = context.accepted().prompts_list_changed.unwrap_or(false);
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                change = changes.recv() => {
                    let sent = match change {
                        Ok(Change::Tools) if wants_tools => context.sink().notify_tool_list_changed().await,
                        Ok(Change::Prompts) if wants_prompts => context.sink().notify_prompt_list_changed().await,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => Ok(()),
                        Err(broadcast::error::RecvError::Closed) => return Ok(()),
                    };
                    if sent.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
