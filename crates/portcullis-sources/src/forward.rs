//! Forwarding a route's call to its application over HTTP.
//!
//! An [`App`] is where an application listens (`base_url`), how long a call
//! may take (`timeout`, default 60 s), the gateway key that signs every
//! request (see [`crate::signing`]: method, authority, path, query, body
//! digest and identity, with a fresh nonce and the signing time) and the
//! caller identity travels in `x-portcullis-identity`. A call:
//!
//! 1. refuses an `auth: true` route without an identity
//!    (`ERR_MCP_AUTH_REQUIRED`) or whose identity lacks a permission
//!    (`ERR_MCP_PERM_DENIED`), before anything is sent;
//! 2. splits the flat arguments into path, query, headers and a JSON body;
//!    each path argument is encoded into the one segment it fills, and one
//!    that would make that segment empty, `.` or `..` (plain or
//!    percent-encoded) is refused with `ERR_INVALID_ARGUMENTS`, so no call
//!    reaches a path outside its route;
//! 3. signs and sends the request (no redirects followed, no proxy);
//! 4. answers the response body as text, JSON pretty-printed, read up to a
//!    cap.
//!
//! Errors: an application that cannot be reached or does not answer in time
//! gives `ERR_APP_RUNTIME_UNAVAILABLE: app "<name>" is not reachable`; a
//! 4xx/5xx gives the application's own `ERR_…` message when its body is the
//! Gateway's `{statusCode, error, message}` with an `ERR_` message, else
//! `ERR_APP_HTTP_<status>` (e.g. `ERR_APP_HTTP_500`).

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use percent_encoding::percent_decode;
use portcullis_catalog::ToolResult;
use portcullis_catalog::error_mapping::codes::{
    ERR_APP_RUNTIME_UNAVAILABLE, ERR_INVALID_ARGUMENTS,
};
use portcullis_handler::check_call;
use portcullis_handler::{CallContext, Registration, ToolError, ToolFuture, ToolHandler};
use reqwest::Url;
use serde_json::{Map, Value};

use crate::error::SourceError;
use crate::route::HttpRoute;
use crate::signing::{GatewayKey, IDENTITY_HEADER, RequestToSign, unix_now};

/// Default bound on one forwarded call: 60 s.
pub const DEFAULT_APP_TIMEOUT: Duration = Duration::from_secs(60);

/// Default cap on a response body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Where and how to reach one application.
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// The application's name (in errors and logs).
    pub name: String,
    /// Its base URL, e.g. `http://127.0.0.1:9000` (a path prefix is kept).
    pub base_url: String,
    /// Bound on each call.
    pub timeout: Duration,
    /// Cap on a response body.
    pub max_response_bytes: usize,
    /// The key signing every request; `None` sends unsigned requests.
    pub key: Option<Arc<GatewayKey>>,
}

impl AppOptions {
    /// Options for `name` at `base_url` with the defaults (60 s, 16 MiB, unsigned).
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        AppOptions {
            name: name.into(),
            base_url: base_url.into(),
            timeout: DEFAULT_APP_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            key: None,
        }
    }

    /// Signs requests with `key`.
    pub fn with_key(mut self, key: Arc<GatewayKey>) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets the per-call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// An application reachable over HTTP.
#[derive(Debug)]
pub struct App {
    name: String,
    base: Url,
    prefix: String,
    timeout: Duration,
    max_response_bytes: usize,
    key: Option<Arc<GatewayKey>>,
    client: reqwest::Client,
}

impl App {
    /// Checks the base URL (absolute `http`/`https`, no credentials, no
    /// query or fragment) and builds the HTTP client.
    pub fn new(options: AppOptions) -> Result<Arc<Self>, SourceError> {
        let invalid = |reason: String| SourceError::InvalidApp {
            app: options.name.clone(),
            reason,
        };
        let base = Url::parse(&options.base_url).map_err(|e| invalid(format!("base_url: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid("base_url must be http or https".into()));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(invalid("base_url must not carry credentials".into()));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("base_url must not have a query or fragment".into()));
        }
        // Route paths are appended to the base path, which keeps no
        // trailing slash ("" for a bare origin: the URL type itself would
        // always answer "/").
        let prefix = base.path().trim_end_matches('/').to_owned();
        let client = reqwest::Client::builder()
            // The identity and signature must never follow a redirect to
            // another host, and an app on loopback needs no proxy.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            // reqwest's default, said here: a request's pieces must not wait
            // for the app's delayed ACK.
            .tcp_nodelay(true)
            .build()
            .map_err(|e| invalid(format!("HTTP client: {e}")))?;
        Ok(Arc::new(App {
            name: options.name,
            base,
            prefix,
            timeout: options.timeout,
            max_response_bytes: options.max_response_bytes,
            key: options.key,
            client,
        }))
    }

    /// The application's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One registration per route, each forwarding here; `source` names
    /// the route table or document in duplicate-id errors.
    pub fn registrations(
        self: &Arc<Self>,
        source: &str,
        routes: &[HttpRoute],
    ) -> Vec<Registration> {
        routes
            .iter()
            .map(|route| {
                let handler = RouteHandler {
                    app: self.clone(),
                    route: Arc::new(route.clone()),
                };
                Registration::new(route.tool(), handler)
                    .with_source(source.to_owned())
                    .with_access(route.access.clone())
            })
            .collect()
    }

    fn unavailable(&self) -> ToolError {
        ToolError::msg(format!(
            "{ERR_APP_RUNTIME_UNAVAILABLE}: app \"{}\" is not reachable",
            self.name
        ))
    }
}

/// Forwards one route's calls.
struct RouteHandler {
    app: Arc<App>,
    route: Arc<HttpRoute>,
}

impl ToolHandler for RouteHandler {
    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let app = self.app.clone();
        let route = self.route.clone();
        Box::pin(async move {
            let cancel = ctx.cancellation().clone();
            tokio::select! {
                result = forward(&app, &route, args, &ctx) => result,
                _ = cancel.cancelled() => Err(ToolError::msg("cancelled by the client")),
            }
        })
    }
}

async fn forward(
    app: &App,
    route: &HttpRoute,
    args: Value,
    ctx: &CallContext,
) -> Result<ToolResult, ToolError> {
    // The server's gate withholds these routes already; this is the
    // backstop, so an app never sees an auth route's call without identity.
    check_call(&route.access, ctx.identity()).map_err(ToolError::msg)?;

    let split = route.split(&args);
    let path = fill_path(&route.path, &split.path)?;
    let mut url = app.base.clone();
    let wanted = format!("{}{}", app.prefix, path);
    url.set_path(&wanted);
    // Backstop: the URL parser may rewrite a path (dot segments, `\`); what
    // is signed and sent must be exactly the route filled in, never a
    // neighbour of it.
    if url.path() != wanted {
        tracing::warn!(app = %app.name, route = %route.declared_id, "filled path rewritten by the URL parser; refused");
        return Err(ToolError::msg(format!(
            "{ERR_INVALID_ARGUMENTS}: the path arguments do not make a path inside route \"{}\"",
            route.declared_id
        )));
    }
    if !split.query.is_empty() {
        let mut pairs = url.query_pairs_mut();
        for (name, value) in &split.query {
            match value {
                Value::Array(items) => {
                    for item in items {
                        pairs.append_pair(name, &scalar_text(item));
                    }
                }
                other => {
                    pairs.append_pair(name, &scalar_text(other));
                }
            }
        }
    }

    let sends_body = !matches!(route.method, Method::GET | Method::HEAD)
        && (route.body.is_some() || !split.body.is_empty());
    let body = if sends_body {
        serde_json::to_vec(&Value::Object(split.body))?
    } else {
        Vec::new()
    };

    let mut request = app
        .client
        .request(route.method.clone(), url.clone())
        .timeout(app.timeout);
    for (name, value) in &split.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ToolError::msg(format!(
                "{ERR_INVALID_ARGUMENTS}: header \"{name}\" is not a valid header name"
            ))
        })?;
        let value = HeaderValue::from_str(&scalar_text(value)).map_err(|_| {
            ToolError::msg(format!(
                "{ERR_INVALID_ARGUMENTS}: header \"{name}\" has a value that cannot be sent"
            ))
        })?;
        request = request.header(name, value);
    }
    let identity = match ctx.identity() {
        Some(identity) => Some(serde_json::to_string(identity)?),
        None => None,
    };
    if let Some(identity) = &identity {
        request = request.header(IDENTITY_HEADER, identity.as_str());
    }
    if let Some(key) = &app.key {
        // What `Host` will say: the port only when it is not the scheme's
        // default, as the URL type keeps it.
        let host = url.host_str().unwrap_or_default();
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let signed = key
            .sign(
                &RequestToSign {
                    method: route.method.as_str(),
                    authority: &authority,
                    path: url.path(),
                    query: url.query(),
                    identity: identity.as_deref(),
                    body: &body,
                },
                unix_now(),
            )
            .map_err(|e| {
                tracing::error!(app = %app.name, error = %e, "cannot sign the request");
                ToolError::msg(format!("forwarding to app \"{}\" failed: {e}", app.name))
            })?;
        for (name, value) in signed.headers() {
            request = request.header(name, value);
        }
    }
    if sends_body {
        request = request
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
    }

    let mut response = request.send().await.map_err(|e| {
        tracing::warn!(app = %app.name, route = %route.declared_id, error = %e, "application unreachable");
        if e.is_connect() || e.is_timeout() || e.is_request() {
            app.unavailable()
        } else {
            ToolError::msg(format!("forwarding to app \"{}\" failed: {e}", app.name))
        }
    })?;
    let status = response.status();
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if bytes.len() + chunk.len() > app.max_response_bytes {
                    return Err(ToolError::msg(format!(
                        "app \"{}\" answered more than {} bytes",
                        app.name, app.max_response_bytes
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() => return Err(app.unavailable()),
            Err(e) => {
                return Err(ToolError::msg(format!(
                    "reading app \"{}\" response: {e}",
                    app.name
                )));
            }
        }
    }

    if !status.is_success() {
        let coded = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|body| {
                body.get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .filter(|message| message.starts_with("ERR_"));
        tracing::debug!(app = %app.name, route = %route.declared_id, %status, "application answered an error");
        return Err(ToolError::msg(
            coded.unwrap_or_else(|| format!("ERR_APP_HTTP_{}", status.as_u16())),
        ));
    }
    Ok(ToolResult::text(response_text(&bytes)))
}

/// The route path with `{name}` and `:name` filled in, each value
/// percent-encoded so it stays inside the one segment it fills.
///
/// A segment a value fills must not read as empty, `.` or `..` once
/// percent-decoded (however many times, in any case): the URL parser
/// resolves `%2E%2E` as `..` (WHATWG), and an application or proxy that
/// decodes before routing would too, so such a value would climb out of the
/// route (`/devices/{id}/{field}` with `..`/`admin` reaching `/admin`,
/// signed). An empty one would make `/devices//x`, which some servers
/// collapse into another route.
fn fill_path(template: &str, values: &Map<String, Value>) -> Result<String, ToolError> {
    let mut out = String::with_capacity(template.len());
    for (i, segment) in template.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let mut filled = String::with_capacity(segment.len());
        let mut names: Vec<&str> = Vec::new();
        if let Some(name) = segment.strip_prefix(':') {
            filled.push_str(&encode_segment(&path_value(values, name)?));
            names.push(name);
        } else {
            // `{name}` anywhere in the segment (`/files/{id}.json`).
            let mut rest = segment;
            while let Some(start) = rest.find('{') {
                let Some(len) = rest[start..].find('}') else {
                    break;
                };
                filled.push_str(&rest[..start]);
                let name = &rest[start + 1..start + len];
                filled.push_str(&encode_segment(&path_value(values, name)?));
                names.push(name);
                rest = &rest[start + len + 1..];
            }
            filled.push_str(rest);
        }
        if !names.is_empty() && leaves_its_segment(&filled) {
            return Err(ToolError::msg(format!(
                "{ERR_INVALID_ARGUMENTS}: path parameter {} must not make an empty, \".\" or \"..\" path segment",
                names
                    .iter()
                    .map(|name| format!("\"{name}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        out.push_str(&filled);
    }
    Ok(out)
}

/// Whether a filled segment, percent-decoded until nothing changes, is
/// empty or a dot segment. Decoding repeatedly covers `%252E` and an
/// application that decodes more than once.
fn leaves_its_segment(segment: &str) -> bool {
    let mut text = segment.as_bytes().to_vec();
    // Each round shortens the text; the bound only caps pathological input.
    for _ in 0..8 {
        let decoded: Vec<u8> = percent_decode(&text).collect();
        if decoded == text {
            break;
        }
        text = decoded;
    }
    matches!(text.as_slice(), b"" | b"." | b"..")
}

fn path_value(values: &Map<String, Value>, name: &str) -> Result<String, ToolError> {
    values.get(name).map(scalar_text).ok_or_else(|| {
        ToolError::msg(format!(
            "{ERR_INVALID_ARGUMENTS}: missing path parameter \"{name}\""
        ))
    })
}

/// Every byte but RFC 3986's unreserved ones is encoded, so `/`, `?`, `#`,
/// `%` and `\` (a separator to the URL parser) never act as syntax.
fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// JSON pretty-printed, anything else as (lossy) UTF-8 text.
fn response_text(bytes: &[u8]) -> String {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_are_filled_and_encoded() {
        let values = json!({"id": "a/b c", "n": 3, "dots": ".."});
        let values = values.as_object().unwrap();
        assert_eq!(
            fill_path("/devices/:id", values).unwrap(),
            "/devices/a%2Fb%20c"
        );
        assert_eq!(
            fill_path("/d/{id}/x/{n}.json", values).unwrap(),
            "/d/a%2Fb%20c/x/3.json"
        );
        assert_eq!(fill_path("/d/{dots}.json", values).unwrap(), "/d/...json");
        let missing = fill_path("/d/{ghost}", values).unwrap_err();
        assert_eq!(
            missing.message(),
            "ERR_INVALID_ARGUMENTS: missing path parameter \"ghost\""
        );
    }

    #[test]
    fn dot_and_empty_segments_are_refused() {
        for value in [
            "",
            ".",
            "..",
            "%2e",
            "%2E",
            "%2e%2e",
            ".%2E",
            "%2e.",
            "%252e%252E",
            "%25252e",
        ] {
            let values = json!({"id": value, "field": "admin"});
            let error =
                fill_path("/devices/{id}/{field}", values.as_object().unwrap()).expect_err(value);
            assert_eq!(
                error.message(),
                "ERR_INVALID_ARGUMENTS: path parameter \"id\" must not make an empty, \".\" or \"..\" path segment",
                "{value}"
            );
        }
        // Two values making one dot segment between them.
        let values = json!({"a": ".", "b": "."});
        assert!(fill_path("/x/{a}{b}", values.as_object().unwrap()).is_err());
        assert!(fill_path("/x/:a", values.as_object().unwrap()).is_err());
        // Dots inside a longer segment, and syntax characters, stay put.
        let values = json!({"id": "../admin?x=1#f\\y%2F.."});
        assert_eq!(
            fill_path("/d/{id}", values.as_object().unwrap()).unwrap(),
            "/d/..%2Fadmin%3Fx%3D1%23f%5Cy%252F.."
        );
        // A literal template segment is the route author's, not an argument.
        assert_eq!(fill_path("/d//x", &Map::new()).unwrap(), "/d//x");
    }

    #[test]
    fn responses_are_pretty_json_or_text() {
        assert_eq!(response_text(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(response_text(b"plain"), "plain");
        assert_eq!(response_text(b""), "");
    }

    #[test]
    fn base_urls_are_checked() {
        assert!(App::new(AppOptions::new("a", "ftp://x")).is_err());
        assert!(App::new(AppOptions::new("a", "http://u:p@127.0.0.1")).is_err());
        assert!(App::new(AppOptions::new("a", "not a url")).is_err());
        let error = App::new(AppOptions::new("a", "http://127.0.0.1/?q=1")).unwrap_err();
        assert!(error.to_string().starts_with("ERR_INVALID_MCP_APP: a: "));
        assert_eq!(
            App::new(AppOptions::new("a", "http://127.0.0.1:9/api/"))
                .unwrap()
                .prefix,
            "/api"
        );
        assert_eq!(
            App::new(AppOptions::new("a", "http://127.0.0.1:9"))
                .unwrap()
                .prefix,
            ""
        );
    }
}
