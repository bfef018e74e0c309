//! End to end: a real axum application on loopback, described by a route
//! table and by an OpenAPI document, its tools served by `portcullis-server`
//! over Streamable HTTP and called by rmcp's client. The application
//! verifies every request's signature with the gateway's public key file and
//! records the identity it saw. Requests the gateway signed are also
//! captured and sent again, changed or not, to show what the application's
//! verifier refuses: replays, another application's requests, any change,
//! and a creation time outside the window.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use portcullis_server::{
    CallContext, Exposure, HttpOptions, HttpServer, Identity, ToolServer, serve_http,
};
use portcullis_sources::signing::{Verifier, content_digest};
use portcullis_sources::{
    App, AppOptions, AppSource, GatewayKey, NativePlugin, OpenApiDocument, PublicKey, RouteTable,
    ToolSource,
};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// What the application saw on one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    identity: Option<Identity>,
}

/// One request exactly as the application received it.
#[derive(Debug, Clone)]
struct Captured {
    method: String,
    target: String,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

#[derive(Clone)]
struct AppState {
    /// The application's verifier: its own authority, one nonce store.
    verifier: Verifier,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Every request target, verified or not.
    targets: Arc<Mutex<Vec<String>>>,
    /// While set, requests are captured and answered 503 unverified, so a
    /// test holds a signed request no verifier has seen yet.
    tap: Arc<AtomicBool>,
    captured: Arc<Mutex<Vec<Captured>>>,
    /// Seconds added to the application's clock.
    clock_offset: Arc<AtomicI64>,
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"statusCode": status.as_u16(), "error": status.canonical_reason(), "message": message}))).into_response()
}

/// The application: verifies, records, then serves a handful of routes.
async fn application(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return error(StatusCode::BAD_REQUEST, "ERR_BODY");
    };
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    state.targets.lock().unwrap().push(target.to_owned());
    if state.tap.load(Ordering::SeqCst) {
        state.captured.lock().unwrap().push(Captured {
            method: parts.method.to_string(),
            target: target.to_owned(),
            headers: parts.headers.clone(),
            body: body.to_vec(),
        });
        return error(StatusCode::SERVICE_UNAVAILABLE, "ERR_TAPPED");
    }
    let offset = state.clock_offset.load(Ordering::SeqCst);
    let now = if offset >= 0 {
        SystemTime::now() + Duration::from_secs(offset.unsigned_abs())
    } else {
        SystemTime::now() - Duration::from_secs(offset.unsigned_abs())
    };
    let verified = match state.verifier.verify(
        parts.method.as_str(),
        &parts.uri,
        &parts.headers,
        &body,
        now,
    ) {
        Ok(verified) => verified,
        Err(e) => {
            // The code is what the gateway maps; the reason is for tests
            // that read the answer themselves.
            let mut refused = error(StatusCode::UNAUTHORIZED, "ERR_BAD_SIGNATURE");
            if let Ok(reason) = axum::http::HeaderValue::from_str(&format!("{e:?}")) {
                refused.headers_mut().insert("x-refused", reason);
            }
            return refused;
        }
    };
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: target.to_owned(),
        identity: verified.identity.clone(),
    });
    let user = verified
        .identity
        .as_ref()
        .map(|i| i.user.clone())
        .unwrap_or(Value::Null);
    let segments: Vec<&str> = parts
        .uri
        .path()
        .trim_start_matches('/')
        .split('/')
        .collect();
    match (parts.method.as_str(), segments.as_slice()) {
        ("GET", ["devices", id]) => Json(json!({
            "id": percent_decode(id),
            "query": parts.uri.query(),
            "trace": parts.headers.get("x-trace").and_then(|v| v.to_str().ok()),
            "user": user,
        }))
        .into_response(),
        ("POST", ["devices", id, "reboot"]) => {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            Json(json!({"rebooted": id, "body": body, "user": user})).into_response()
        }
        ("GET", ["reports"]) => {
            Json(json!({"report": "secret numbers", "perms": verified.identity.map(|i| i.perms)}))
                .into_response()
        }
        ("GET", ["fail"]) => error(StatusCode::INTERNAL_SERVER_ERROR, "ERR_DEVICE_OFFLINE: m3"),
        ("GET", ["broken"]) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream exploded at /srv/internal",
        )
            .into_response(),
        ("GET", ["slow"]) => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "late".into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "ERR_NOT_FOUND"),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct RunningApp {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    targets: Arc<Mutex<Vec<String>>>,
    tap: Arc<AtomicBool>,
    captured: Arc<Mutex<Vec<Captured>>>,
    clock_offset: Arc<AtomicI64>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningApp {
    async fn start(key_file: &std::path::Path) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let targets = Arc::new(Mutex::new(Vec::new()));
        let tap = Arc::new(AtomicBool::new(false));
        let captured = Arc::new(Mutex::new(Vec::new()));
        let clock_offset = Arc::new(AtomicI64::new(0));
        // The app answers to its address, and to `localhost` on its port.
        let verifier = Verifier::new(PublicKey::read_file(key_file).unwrap(), addr.to_string())
            .with_authority(format!("localhost:{}", addr.port()));
        let state = AppState {
            verifier,
            seen: seen.clone(),
            targets: targets.clone(),
            tap: tap.clone(),
            captured: captured.clone(),
            clock_offset: clock_offset.clone(),
        };
        let router = axum::Router::new().fallback(application).with_state(state);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        RunningApp {
            addr,
            seen,
            targets,
            tap,
            captured,
            clock_offset,
            stop: Some(stop),
            task,
        }
    }

    /// Runs `call` with the tap on and answers the one request it sent.
    async fn capture<F: std::future::Future>(&self, call: F) -> Captured {
        self.tap.store(true, Ordering::SeqCst);
        call.await;
        self.tap.store(false, Ordering::SeqCst);
        let mut captured = std::mem::take(&mut *self.captured.lock().unwrap());
        assert_eq!(captured.len(), 1, "{captured:?}");
        captured.remove(0)
    }

    /// Sets the application's clock `seconds` ahead (or behind).
    fn shift_clock(&self, seconds: i64) {
        self.clock_offset.store(seconds, Ordering::SeqCst);
    }

    fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops listening and closes every connection.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

const ROUTE_TABLE: &str = r#"{
  "name": "site", "version": "1.0.0", "description": "The site app",
  "routes": [
    {"id": "devices.get", "safety": "read-only", "description": "Get a device",
     "http": {"method": "GET", "path": "/devices/{id}", "parameters": [
        {"in": "path", "name": "id", "required": true, "schema": {"type": "string"}},
        {"in": "query", "name": "verbose", "schema": {"type": "boolean"}},
        {"in": "header", "name": "x-trace", "schema": {"type": "string"}}]}},
    {"id": "devices.reboot", "safety": "write", "description": "Reboot a device",
     "http": {"method": "POST", "path": "/devices/:id/reboot",
              "parameters": [{"in": "path", "name": "id", "required": true, "schema": {"type": "string"}}],
              "requestBody": {"content": {"application/json": {"schema": {
                  "type": "object", "required": ["reason"], "properties": {"reason": {"type": "string"}}}}}}}},
    {"id": "reports.get", "safety": "read-only", "auth": true, "permissions": ["reports:r"],
     "http": {"method": "GET", "path": "/reports"}},
    {"id": "fail", "safety": "read-only", "http": {"method": "GET", "path": "/fail"}},
    {"id": "broken", "safety": "read-only", "http": {"method": "GET", "path": "/broken"}},
    {"id": "slow", "safety": "read-only", "http": {"method": "GET", "path": "/slow"}},
    {"id": "live", "safety": "read-only", "stream": true, "http": {"method": "GET", "path": "/live"}}
  ]
}"#;

const OPENAPI: &str = r##"
openapi: 3.0.3
info: {title: Site API, version: "1"}
servers: [{url: "https://example.invalid"}]
paths:
  /devices/{id}:
    get:
      operationId: getDevice
      summary: Get a device
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: verbose, in: query, schema: {type: boolean}}
      responses: {"200": {description: the device}}
  /devices/{id}/reboot:
    post:
      operationId: rebootDevice
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Reboot"}
      responses: {"200": {description: done}}
  /reports:
    get:
      operationId: getReport
      x-portcullis-auth: true
      x-portcullis-permissions: ["reports:r"]
      responses: {"200": {description: report}}
components:
  schemas:
    Reboot:
      type: object
      required: [reason]
      properties: {reason: {type: string}}
"##;

/// The gateway side of one test: a data directory with the key, the key file
/// the application reads, the route table and the OpenAPI document.
struct Gateway {
    dir: TempDir,
    key: Arc<GatewayKey>,
}

impl Gateway {
    fn new() -> Self {
        let dir = TempDir::new().unwrap();
        let key = Arc::new(GatewayKey::load_or_create(dir.path().join("data")).unwrap());
        key.write_public_key(dir.path().join("keys/gateway.pub"))
            .unwrap();
        std::fs::create_dir_all(dir.path().join("apps/site")).unwrap();
        std::fs::write(dir.path().join("apps/site/mdk-plugin.json"), ROUTE_TABLE).unwrap();
        std::fs::write(dir.path().join("apps/site/openapi.yaml"), OPENAPI).unwrap();
        Gateway { dir, key }
    }

    fn key_file(&self) -> std::path::PathBuf {
        self.dir.path().join("keys/gateway.pub")
    }

    fn app(&self, running: &RunningApp) -> Arc<App> {
        App::new(AppOptions::new("site", running.base_url()).with_key(self.key.clone())).unwrap()
    }

    fn routes(&self, running: &RunningApp) -> AppSource {
        AppSource::from_route_table(
            RouteTable::load(self.dir.path().join("apps/site")).unwrap(),
            self.app(running),
        )
    }

    fn openapi(&self, running: &RunningApp) -> AppSource {
        let document =
            OpenApiDocument::load(self.dir.path().join("apps/site/openapi.yaml")).unwrap();
        AppSource::from_openapi(document, self.app(running))
    }

    /// A native plugin with one read-only tool, to show the server keeps
    /// serving when the application is gone.
    fn native(&self) -> NativePlugin {
        let dir = self.dir.path().join("plugins/ping");
        std::fs::create_dir_all(&dir).unwrap();
        let handler = dir.join("ping.sh");
        std::fs::write(&handler, "#!/bin/sh\ncat >/dev/null\necho pong\n").unwrap();
        std::fs::set_permissions(&handler, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            dir.join("mcp-plugin.json"),
            json!({"name": "ping", "version": "1.0.0", "tools": [
                {"id": "ping", "handler": "./ping.sh", "description": "Answers pong", "annotations": {"readOnlyHint": true}}
            ]})
            .to_string(),
        )
        .unwrap();
        NativePlugin::load(dir).unwrap()
    }
}

fn agent(perms: &[&str]) -> Identity {
    Identity::new(json!({"userId": "mcp-agent"}), perms.iter().copied())
}

async fn connect(server: &HttpServer) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(server.url()))
        .await
        .unwrap()
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    name: &'static str,
    args: Value,
) -> CallToolResult {
    let args = args.as_object().cloned().unwrap_or_default();
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(args))
        .await
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn names(client: &RunningService<RoleClient, ()>) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_route_table_served_over_mcp_until_the_app_goes_down() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let tools = ToolServer::builder()
        .exposure(Exposure {
            identity: Some(agent(&["read", "reports:r"])),
            ..Default::default()
        })
        .register_all(gateway.routes(&running).registrations())
        .register_all(ToolSource::registrations(&gateway.native()))
        .build()
        .unwrap();
    // The write route is withheld by default; the stream route never existed.
    assert_eq!(
        tools
            .withheld()
            .iter()
            .map(|w| w.id.as_str())
            .collect::<Vec<_>>(),
        ["devices_reboot"]
    );
    let server = serve_http(tools, HttpOptions::default()).await.unwrap();
    let client = connect(&server).await;
    assert_eq!(
        names(&client).await,
        [
            "broken",
            "devices_get",
            "fail",
            "ping",
            "reports_get",
            "slow"
        ]
    );

    let device = call(
        &client,
        "devices_get",
        json!({"id": "d 1/x", "verbose": true, "x-trace": "t-9"}),
    )
    .await;
    assert_ne!(device.is_error, Some(true), "{}", text(&device));
    let body = text(&device);
    assert!(
        body.starts_with("<untrusted-tool-output tool=\"devices_get\">\n{\n  \"id\": \"d 1/x\""),
        "{body}"
    );
    assert!(body.contains("\"query\": \"verbose=true\""), "{body}");
    assert!(body.contains("\"trace\": \"t-9\""), "{body}");
    assert!(body.contains("\"userId\": \"mcp-agent\""), "{body}");
    let seen = running.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", "/devices/d%201%2Fx?verbose=true")
    );
    assert_eq!(seen[0].identity, Some(agent(&["read", "reports:r"])));

    let report = call(&client, "reports_get", json!({})).await;
    assert!(
        text(&report).contains("secret numbers"),
        "{}",
        text(&report)
    );

    let failed = call(&client, "fail", json!({})).await;
    assert_eq!(failed.is_error, Some(true));
    // The app's code in the clear, its words framed as the tool's output.
    assert!(
        text(&failed).starts_with("ERR_DEVICE_OFFLINE\n<untrusted-tool-output tool=\"fail\">\nm3\n</untrusted-tool-output>\n"),
        "{}",
        text(&failed)
    );
    let broken = call(&client, "broken", json!({})).await;
    assert_eq!(broken.is_error, Some(true));
    assert_eq!(text(&broken), "ERR_APP_HTTP_503");

    // Withheld means not callable either.
    let args = json!({"id": "d1", "reason": "x"})
        .as_object()
        .cloned()
        .unwrap();
    assert!(
        client
            .call_tool(CallToolRequestParams::new("devices_reboot").with_arguments(args))
            .await
            .is_err()
    );
    let before = running.seen().len();

    running.stop().await;
    let down = call(&client, "devices_get", json!({"id": "d1"})).await;
    assert_eq!(down.is_error, Some(true));
    assert!(
        text(&down).starts_with(
            "ERR_APP_RUNTIME_UNAVAILABLE\n<untrusted-tool-output tool=\"devices_get\">\napp \"site\" is not reachable\n"
        ),
        "{}",
        text(&down)
    );
    assert_eq!(before, 4, "devices_get, reports_get, fail, broken");

    // The server keeps serving: listing, and a tool from another source.
    assert_eq!(names(&client).await.len(), 6);
    let ping = call(&client, "ping", json!({})).await;
    assert_ne!(ping.is_error, Some(true));
    assert!(text(&ping).contains("\npong\n"));

    client.cancel().await.unwrap();
    server.close().await;
}

#[tokio::test]
async fn writes_are_served_when_allowed_and_their_body_is_signed() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let tools = ToolServer::builder()
        .exposure(Exposure {
            allow_write: true,
            ..Default::default()
        })
        .register_all(gateway.routes(&running).registrations())
        .build()
        .unwrap();
    let result = tools
        .call(
            "devices_reboot",
            json!({"id": "d7", "reason": "stuck"}),
            None,
        )
        .await
        .unwrap();
    assert!(!result.is_error, "{result:?}");
    let body = result.text_blocks().next().unwrap();
    assert!(body.contains("\"rebooted\": \"d7\""), "{body}");
    assert!(body.contains("\"reason\": \"stuck\""), "{body}");
    // No identity configured: none sent.
    assert!(body.contains("\"user\": null"), "{body}");
    let seen = running.seen();
    assert_eq!(
        (
            seen[0].method.as_str(),
            seen[0].path.as_str(),
            &seen[0].identity
        ),
        ("POST", "/devices/d7/reboot", &None)
    );

    // Missing required body field: refused before the app is reached.
    let refused = tools
        .call("devices_reboot", json!({"id": "d7"}), None)
        .await
        .unwrap();
    assert!(refused.is_error);
    assert_eq!(running.seen().len(), 1);
    running.stop().await;
}

#[tokio::test]
async fn an_unsigned_or_foreign_gateway_is_refused_by_the_app() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let table = RouteTable::load(gateway.dir.path().join("apps/site")).unwrap();
    for options in [
        AppOptions::new("site", running.base_url()),
        AppOptions::new("site", running.base_url())
            .with_key(Arc::new(GatewayKey::from_seed([9; 32]))),
    ] {
        let source = AppSource::from_route_table(table.clone(), App::new(options).unwrap());
        let tools = ToolServer::builder()
            .register_all(source.registrations())
            .build()
            .unwrap();
        let result = tools
            .call("devices_get", json!({"id": "d1"}), None)
            .await
            .unwrap();
        assert_eq!(result.text_blocks().next(), Some("ERR_BAD_SIGNATURE"));
    }
    assert!(running.seen().is_empty());

    // The same key reloaded from the data directory (a restart) still verifies.
    let reloaded = Arc::new(GatewayKey::load_or_create(gateway.dir.path().join("data")).unwrap());
    let app = App::new(AppOptions::new("site", running.base_url()).with_key(reloaded)).unwrap();
    let tools = ToolServer::builder()
        .register_all(AppSource::from_route_table(table, app).registrations())
        .build()
        .unwrap();
    let result = tools
        .call("devices_get", json!({"id": "d1"}), None)
        .await
        .unwrap();
    assert!(!result.is_error, "{result:?}");
    assert_eq!(running.seen().len(), 1);
    running.stop().await;
}

#[tokio::test]
async fn auth_routes_are_gated_by_permissions() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    for (identity, reason) in [
        (None, "auth route needs an identity"),
        (
            Some(agent(&["read"])),
            "identity lacks permissions: reports:r",
        ),
    ] {
        let tools = ToolServer::builder()
            .exposure(Exposure {
                identity,
                ..Default::default()
            })
            .register_all(gateway.routes(&running).registrations())
            .build()
            .unwrap();
        let withheld = tools
            .withheld()
            .into_iter()
            .find(|w| w.id == "reports_get")
            .unwrap();
        assert_eq!(withheld.reason, reason);
        assert!(!tools.tool_names().iter().any(|n| n == "reports_get"));
    }

    // The handler's own backstop, should a registration reach a server
    // without the gate: nothing is sent to the application.
    let registration = gateway
        .routes(&running)
        .registrations()
        .into_iter()
        .find(|r| r.tool.name == "reports_get")
        .unwrap();
    let no_identity = registration
        .handler
        .call(json!({}), CallContext::detached("reports_get"))
        .await
        .unwrap_err();
    assert_eq!(no_identity.message(), "ERR_MCP_AUTH_REQUIRED");
    let ctx = CallContext::detached("reports_get").with_identity(Some(Arc::new(agent(&["read"]))));
    let lacking = registration.handler.call(json!({}), ctx).await.unwrap_err();
    assert_eq!(lacking.message(), "ERR_MCP_PERM_DENIED");
    assert!(running.seen().is_empty());
    running.stop().await;
}

#[tokio::test]
async fn an_openapi_document_served_over_mcp() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let source = gateway.openapi(&running);
    assert!(
        source.diagnostics().is_empty(),
        "{:?}",
        source.diagnostics()
    );
    let tools = ToolServer::builder()
        .exposure(Exposure {
            identity: Some(agent(&["reports:r"])),
            ..Default::default()
        })
        .register_all(source.registrations())
        .build()
        .unwrap();
    assert_eq!(
        tools
            .withheld()
            .iter()
            .map(|w| w.id.as_str())
            .collect::<Vec<_>>(),
        ["rebootDevice"]
    );
    let server = serve_http(tools, HttpOptions::default()).await.unwrap();
    let client = connect(&server).await;
    assert_eq!(names(&client).await, ["getDevice", "getReport"]);

    let device = call(&client, "getDevice", json!({"id": "d2", "verbose": false})).await;
    assert_ne!(device.is_error, Some(true), "{}", text(&device));
    assert!(text(&device).contains("\"id\": \"d2\""));
    let report = call(&client, "getReport", json!({})).await;
    assert!(
        text(&report).contains("\"perms\": [\n    \"reports:r\"\n  ]"),
        "{}",
        text(&report)
    );
    let seen = running.seen();
    assert_eq!(
        seen.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        ["/devices/d2?verbose=false", "/reports"]
    );
    assert!(
        seen.iter()
            .all(|s| s.identity == Some(agent(&["reports:r"])))
    );

    // Both descriptions of one app on one server: ids are unique across sources.
    let both = ToolServer::builder()
        .register_all(gateway.routes(&running).registrations())
        .register_all(gateway.openapi(&running).registrations())
        .build();
    assert!(both.is_ok());

    client.cancel().await.unwrap();
    server.close().await;
    running.stop().await;
}

#[tokio::test]
async fn a_slow_app_is_unavailable_after_the_timeout() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let app = App::new(
        AppOptions::new("site", running.base_url())
            .with_key(gateway.key.clone())
            .with_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let source = AppSource::from_route_table(
        RouteTable::load(gateway.dir.path().join("apps/site")).unwrap(),
        app,
    );
    let tools = ToolServer::builder()
        .register_all(source.registrations())
        .build()
        .unwrap();
    let result = tools.call("slow", json!({}), None).await.unwrap();
    assert!(result.is_error);
    let text = result.text_blocks().next().unwrap_or_default();
    assert!(
        text.starts_with(
            "ERR_APP_RUNTIME_UNAVAILABLE\n<untrusted-tool-output tool=\"slow\">\napp \"site\" is not reachable\n"
        ),
        "{text}"
    );
    running.stop().await;
}

/// A path argument never leaves the route it fills: dot segments (plain or
/// percent-encoded in any case) are refused before anything is sent, and
/// every other value stays one segment under the declared path. Checked for
/// a route table and for an OpenAPI document, against an app under a base
/// path (`/api/v1`), whose parent a `..` would otherwise reach, signed.
#[tokio::test]
async fn path_arguments_never_leave_their_route() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let table = RouteTable::from_value(
        "./apps/site",
        &json!({"name": "site", "version": "1.0.0", "routes": [
            {"id": "field", "safety": "read-only", "http": {"method": "GET", "path": "/devices/{id}/{field}",
             "parameters": [
                {"in": "path", "name": "id", "required": true, "schema": {"type": "string"}},
                {"in": "path", "name": "field", "required": true, "schema": {"type": "string"}}]}}]}),
    )
    .unwrap();
    let openapi_path = gateway.dir.path().join("apps/site/fields.yaml");
    std::fs::write(
        &openapi_path,
        r##"
openapi: 3.0.3
info: {title: Site API, version: "1"}
paths:
  /devices/{id}/{field}:
    get:
      operationId: getField
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: field, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: the field}}
"##,
    )
    .unwrap();
    let document = OpenApiDocument::load(&openapi_path).unwrap();
    let app = App::new(
        AppOptions::new("site", format!("{}/api/v1", running.base_url()))
            .with_key(gateway.key.clone()),
    )
    .unwrap();
    let tools = ToolServer::builder()
        .register_all(AppSource::from_route_table(table, app.clone()).registrations())
        .register_all(AppSource::from_openapi(document, app).registrations())
        .build()
        .unwrap();

    let refused = [
        json!({"id": "..", "field": "admin"}),
        json!({"id": "..", "field": ".."}),
        json!({"id": "x", "field": ".."}),
        json!({"id": ".", "field": "admin"}),
        json!({"id": "%2e%2e", "field": "admin"}),
        json!({"id": "%2E%2E", "field": "%2e%2E"}),
        json!({"id": ".%2E", "field": "admin"}),
        json!({"id": "%2e.", "field": "admin"}),
        json!({"id": "%252e%252e", "field": "admin"}),
        json!({"id": "", "field": "admin"}),
    ];
    for tool in ["field", "getField"] {
        for args in &refused {
            let result = tools.call(tool, args.clone(), None).await.unwrap();
            assert!(result.is_error, "{tool} {args}: {result:?}");
            // The code in the clear, its words framed as the tool's.
            let message = result.text_blocks().next().unwrap();
            assert!(
                message.starts_with(&format!(
                    "ERR_INVALID_ARGUMENTS\n<untrusted-tool-output tool=\"{tool}\">\npath parameter \""
                )),
                "{tool} {args}: {message}"
            );
        }
    }
    assert_eq!(
        running.targets.lock().unwrap().clone(),
        Vec::<String>::new()
    );

    // Everything else is encoded into its one segment.
    let kept = [
        (json!({"id": "../admin", "field": "x"}), "..%2Fadmin", "x"),
        (
            json!({"id": "a\\..", "field": "?q=1#f"}),
            "a%5C..",
            "%3Fq%3D1%23f",
        ),
        (
            json!({"id": "...", "field": "%2F..%2F"}),
            "...",
            "%252F..%252F",
        ),
        (json!({"id": "d1", "field": "name"}), "d1", "name"),
    ];
    for tool in ["field", "getField"] {
        for (args, id, field) in &kept {
            let before = running.targets.lock().unwrap().len();
            let _ = tools.call(tool, args.clone(), None).await.unwrap();
            let targets = running.targets.lock().unwrap().clone();
            assert_eq!(
                targets[before..],
                [format!("/api/v1/devices/{id}/{field}")],
                "{tool} {args}"
            );
        }
    }
    // The app saw nothing outside `/api/v1/devices/<one segment>/<one segment>`.
    for target in running.targets.lock().unwrap().iter() {
        let segments: Vec<&str> = target.split('/').collect();
        assert_eq!(segments.len(), 6, "{target}");
        assert_eq!(segments[..4], ["", "api", "v1", "devices"], "{target}");
    }
    running.stop().await;
}

/// The site's tools with writes allowed, acting as `identity`.
fn site_tools(gateway: &Gateway, running: &RunningApp, identity: Option<Identity>) -> ToolServer {
    ToolServer::builder()
        .exposure(Exposure {
            allow_write: true,
            identity,
            ..Default::default()
        })
        .register_all(gateway.routes(running).registrations())
        .build()
        .unwrap()
}

/// Sends `request` to `addr` over a new connection exactly as captured (its
/// `Host` included; only the framing headers are written anew) and answers
/// the status and, for a refusal, the verifier's reason.
async fn send(addr: SocketAddr, request: &Captured) -> (u16, String) {
    let mut head = format!("{} {} HTTP/1.1\r\n", request.method, request.target).into_bytes();
    for (name, value) in &request.headers {
        if matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        ) {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            request.body.len()
        )
        .as_bytes(),
    );
    head.extend_from_slice(&request.body);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(&head).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the app answers")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let head = answer.split("\r\n\r\n").next().unwrap_or_default();
    let reason = head
        .lines()
        .find_map(|line| line.strip_prefix("x-refused: "))
        .unwrap_or_default()
        .to_owned();
    (status, reason)
}

/// A copy of `request` with `change` made to it.
fn changed(request: &Captured, change: impl FnOnce(&mut Captured)) -> Captured {
    let mut copy = request.clone();
    change(&mut copy);
    copy
}

fn header(value: &str) -> axum::http::HeaderValue {
    axum::http::HeaderValue::from_str(value).unwrap()
}

#[tokio::test]
async fn a_captured_request_replayed_to_the_same_app_is_refused() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let tools = site_tools(&gateway, &running, Some(agent(&["read"])));
    let reboot = || {
        tools.call(
            "devices_reboot",
            json!({"id": "d7", "reason": "stuck"}),
            None,
        )
    };
    let captured = running.capture(reboot()).await;

    // Delivered once, it is fresh and passes…
    assert_eq!(send(running.addr, &captured).await, (200, String::new()));
    // …the same bytes again are a replay, at once or late in the window.
    assert_eq!(
        send(running.addr, &captured).await,
        (401, "Replayed".to_owned())
    );
    running.shift_clock(299);
    assert_eq!(
        send(running.addr, &captured).await,
        (401, "Replayed".to_owned())
    );
    running.shift_clock(0);
    assert_eq!(running.seen().len(), 1);

    // The gateway's next call is a new request, with its own nonce.
    let again = reboot().await.unwrap();
    assert!(!again.is_error, "{again:?}");
    assert_eq!(running.seen().len(), 2);
    running.stop().await;
}

#[tokio::test]
async fn a_request_signed_for_one_app_is_refused_by_another() {
    let gateway = Gateway::new();
    let site = RunningApp::start(&gateway.key_file()).await;
    // Another application trusting the same gateway key.
    let other = RunningApp::start(&gateway.key_file()).await;
    let tools = site_tools(&gateway, &site, Some(agent(&["read"])));
    let captured = site
        .capture(tools.call("devices_get", json!({"id": "d1"}), None))
        .await;

    // As captured, the request says it is for the site…
    assert_eq!(
        send(other.addr, &captured).await,
        (401, format!("WrongAuthority(\"{}\")", site.addr))
    );
    // …and addressed to the other app, the signature no longer matches.
    let readdressed = changed(&captured, |c| {
        c.headers.insert("host", header(&other.addr.to_string()));
    });
    assert_eq!(
        send(other.addr, &readdressed).await,
        (401, "BadSignature".to_owned())
    );
    assert!(other.seen().is_empty());
    // The site, which it was signed for, takes it.
    assert_eq!(send(site.addr, &captured).await.0, 200);
    site.stop().await;
    other.stop().await;
}

#[tokio::test]
async fn a_changed_method_path_query_body_or_identity_is_refused() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let tools = site_tools(&gateway, &running, Some(agent(&["read"])));
    let post = running
        .capture(tools.call(
            "devices_reboot",
            json!({"id": "d7", "reason": "stuck"}),
            None,
        ))
        .await;
    let get = running
        .capture(tools.call("devices_get", json!({"id": "d1", "verbose": true}), None))
        .await;
    assert_eq!(get.target, "/devices/d1?verbose=true");
    let anonymous = running
        .capture(site_tools(&gateway, &running, None).call(
            "devices_get",
            json!({"id": "d1"}),
            None,
        ))
        .await;
    assert!(!anonymous.headers.contains_key("x-portcullis-identity"));

    let evil = br#"{"reason":"evil"}"#.to_vec();
    let cases = [
        (
            "method",
            changed(&post, |c| c.method = "PUT".into()),
            "BadSignature",
        ),
        (
            "path",
            changed(&post, |c| c.target = "/devices/d8/reboot".into()),
            "BadSignature",
        ),
        (
            "query",
            changed(&get, |c| c.target = "/devices/d1?verbose=false".into()),
            "BadSignature",
        ),
        (
            "query added",
            changed(&get, |c| c.target.push_str("&admin=1")),
            "BadSignature",
        ),
        (
            "query dropped",
            changed(&get, |c| c.target = "/devices/d1".into()),
            "BadSignature",
        ),
        (
            "body",
            changed(&post, |c| c.body = evil.clone()),
            "DigestMismatch",
        ),
        (
            "body with its own digest",
            changed(&post, |c| {
                c.headers
                    .insert("content-digest", header(&content_digest(&evil)));
                c.body = evil.clone();
            }),
            "BadSignature",
        ),
        (
            "identity",
            changed(&post, |c| {
                c.headers.insert(
                    "x-portcullis-identity",
                    header(r#"{"user":{"userId":"mcp-agent"},"perms":["read","admin"]}"#),
                );
            }),
            "BadSignature",
        ),
        (
            "identity dropped",
            changed(&post, |c| {
                c.headers.remove("x-portcullis-identity");
            }),
            "MissingHeader(\"x-portcullis-identity\")",
        ),
        (
            "identity added",
            changed(&anonymous, |c| {
                c.headers
                    .insert("x-portcullis-identity", header(r#"{"perms":["admin"]}"#));
            }),
            "NotCovered(\"x-portcullis-identity\")",
        ),
        (
            "host, to another name the same app answers to",
            changed(&get, |c| {
                c.headers.insert(
                    "host",
                    header(&format!("localhost:{}", running.addr.port())),
                );
            }),
            "BadSignature",
        ),
    ];
    for (what, request, reason) in &cases {
        assert_eq!(
            send(running.addr, request).await,
            (401, (*reason).to_owned()),
            "{what}"
        );
    }
    assert!(running.seen().is_empty());
    // Unchanged, each passes: the refusals above were the changes'.
    for request in [&post, &get, &anonymous] {
        assert_eq!(send(running.addr, request).await.0, 200, "{request:?}");
    }
    assert_eq!(running.seen().len(), 3);
    running.stop().await;
}

#[tokio::test]
async fn a_creation_time_outside_the_window_is_refused() {
    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let tools = site_tools(&gateway, &running, None);
    let captured = running
        .capture(tools.call("devices_get", json!({"id": "d1"}), None))
        .await;
    let stale = (401, "Stale".to_owned());

    // The application's clock 301 s ahead: the request is too old…
    running.shift_clock(301);
    assert_eq!(send(running.addr, &captured).await, stale);
    // …301 s behind: it claims to come from the future.
    running.shift_clock(-301);
    assert_eq!(send(running.addr, &captured).await, stale);

    // Moving `created` forward to make an old request look fresh breaks
    // the signature.
    let input = captured.headers["signature-input"].to_str().unwrap();
    let created: u64 = input
        .split(";created=")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let refreshed = changed(&captured, |c| {
        let input = input.replace(
            &format!(";created={created};"),
            &format!(";created={};", created + 301),
        );
        c.headers.insert("signature-input", header(&input));
    });
    running.shift_clock(301);
    assert_eq!(
        send(running.addr, &refreshed).await,
        (401, "BadSignature".to_owned())
    );

    // Within the window it passes, once; past it, it stays refused.
    running.shift_clock(0);
    assert_eq!(send(running.addr, &captured).await.0, 200);
    running.shift_clock(301);
    assert_eq!(send(running.addr, &captured).await, stale);
    assert_eq!(running.seen().len(), 1);
    running.stop().await;
}

/// The gateway's signature is RFC 9421's: a verifier written from the RFC
/// alone, here with plain string handling and the Ed25519 and SHA-256
/// crates (not the crate's verifier), checks it with the key file.
#[tokio::test]
async fn the_signature_is_checked_by_a_plain_rfc_9421_verifier() {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use sha2::{Digest, Sha256};

    let gateway = Gateway::new();
    let running = RunningApp::start(&gateway.key_file()).await;
    let key_bytes: [u8; 32] = STANDARD
        .decode(std::fs::read_to_string(gateway.key_file()).unwrap().trim())
        .unwrap()
        .try_into()
        .unwrap();
    let public = ed25519_dalek::VerifyingKey::from_bytes(&key_bytes).unwrap();
    let tools = site_tools(&gateway, &running, Some(agent(&["read"])));
    let requests = [
        running
            .capture(tools.call(
                "devices_reboot",
                json!({"id": "d7", "reason": "stuck"}),
                None,
            ))
            .await,
        running
            .capture(tools.call("devices_get", json!({"id": "d 1", "verbose": true}), None))
            .await,
    ];
    for request in &requests {
        let text = |name: &str| request.headers[name].to_str().unwrap().to_owned();
        assert_eq!(
            text("content-digest"),
            format!(
                "sha-256=:{}:",
                STANDARD.encode(Sha256::digest(&request.body))
            )
        );
        let params = text("signature-input")
            .strip_prefix("portcullis=")
            .unwrap()
            .to_owned();
        let (list, rest) = params.split_once(')').unwrap();
        let components: Vec<&str> = list
            .trim_start_matches('(')
            .split(' ')
            .map(|c| c.trim_matches('"'))
            .collect();
        assert_eq!(
            components,
            [
                "@method",
                "@authority",
                "@path",
                "@query",
                "content-digest",
                "x-portcullis-identity"
            ]
        );
        let param = |name: &str| {
            rest.split(';')
                .find_map(|p| p.strip_prefix(&format!("{name}=")))
                .unwrap()
                .trim_matches('"')
                .to_owned()
        };
        assert_eq!(param("alg"), "ed25519");
        assert_eq!(param("tag"), "portcullis");
        assert_eq!(
            param("keyid"),
            URL_SAFE_NO_PAD.encode(Sha256::digest(key_bytes))
        );
        assert_eq!(param("nonce").len(), 22);
        let created: u64 = param("created").parse().unwrap();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(now.abs_diff(created) < 60);

        let (path, query) = match request.target.split_once('?') {
            Some((path, query)) => (path.to_owned(), format!("?{query}")),
            None => (request.target.clone(), "?".to_owned()),
        };
        let mut base = String::new();
        for component in &components {
            let value = match *component {
                "@method" => request.method.clone(),
                "@authority" => text("host"),
                "@path" => path.clone(),
                "@query" => query.clone(),
                header => text(header),
            };
            base.push_str(&format!("\"{component}\": {value}\n"));
        }
        base.push_str(&format!("\"@signature-params\": {params}"));
        let signature = text("signature");
        let signature = signature
            .strip_prefix("portcullis=:")
            .and_then(|s| s.strip_suffix(':'))
            .unwrap();
        let signature =
            ed25519_dalek::Signature::from_slice(&STANDARD.decode(signature).unwrap()).unwrap();
        public
            .verify_strict(base.as_bytes(), &signature)
            .unwrap_or_else(|e| panic!("{e}\n{base}"));
    }
    assert_eq!(requests[1].target, "/devices/d%201?verbose=true");
    running.stop().await;
}
