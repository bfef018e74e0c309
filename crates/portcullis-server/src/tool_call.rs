//! A `tools/call` answered in front of rmcp's service: the request read as
//! exactly that, the handler's `call_tool` wrapped in what rmcp's
//! `handle_request` does around it, and the answer written once. Shared by
//! the stateless 2026-07-28 path (`crate::direct_call`) and the session
//! path (`crate::session_call`).

use axum::body::Body;
use axum::response::Response;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorCode, RequestId, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};

use crate::media_type::{accepts_json_and_events, essence_is};

/// `MCP-Protocol-Version`.
pub(crate) const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// `Mcp-Method` (SEP-2243).
pub(crate) const METHOD_HEADER: &str = "mcp-method";
/// `Mcp-Name` (SEP-2243).
pub(crate) const NAME_HEADER: &str = "mcp-name";
/// `Mcp-Param-*` (SEP-2243): arguments promoted to headers.
pub(crate) const PARAM_HEADER_PREFIX: &str = "mcp-param-";
/// `Mcp-Session-Id`.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// Whether a request carries an argument promoted to an `Mcp-Param-*`
/// header.
pub(crate) fn promotes_params(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| name.as_str().starts_with(PARAM_HEADER_PREFIX))
}

/// The body headers both direct paths need: a declared length (the
/// guard has held it to the body limit), one JSON `Content-Type`, and an
/// `Accept` taking both answers a Streamable HTTP POST may get.
pub(crate) fn plain_json_post(headers: &HeaderMap) -> bool {
    headers.contains_key(CONTENT_LENGTH)
        && sole(headers, CONTENT_TYPE.as_str())
            .is_some_and(|value| essence_is(value, "application/json"))
        && accepts_json_and_events(headers)
}

/// The body of a JSON-RPC `tools/call`, read as exactly that. (rmcp reads
/// any client message into untagged enums, trying each request type in
/// turn; each miss builds and drops an error, several per call.)
#[derive(Debug, serde::Deserialize)]
pub(crate) struct PlainCall {
    pub(crate) jsonrpc: String,
    pub(crate) id: RequestId,
    pub(crate) method: String,
    pub(crate) params: CallToolRequestParams,
    /// Whether the message also has a `result` or an `error` member (of any
    /// value, `null` included): rmcp refuses a message that is both a
    /// request and an answer, so such a line is left to its reading.
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

impl PlainCall {
    /// `body` as a JSON-RPC 2.0 `tools/call`, or `None`.
    pub(crate) fn read(body: &[u8]) -> Option<PlainCall> {
        let call: PlainCall = serde_json::from_slice(body).ok()?;
        (call.jsonrpc == "2.0" && call.method == "tools/call" && !call.result && !call.error)
            .then_some(call)
    }
}

/// `true` for a member that is there, whatever its value.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    <serde::de::IgnoredAny as serde::Deserialize>::deserialize(deserializer).map(|_| true)
}

/// Which protocol era the caller speaks: what rmcp does to a result
/// depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28: cache hints filled, resource-not-found is invalid
    /// params.
    Stateless,
    /// An initialize-era session: the result keeps the older shape (no
    /// `resultType`, object structured output only) and an
    /// `InputRequiredResult` is an error.
    Session,
}

/// The handler's `call_tool`, with what rmcp's `handle_request` does
/// around it for a request of `era` (its `handler/server.rs`): a task the
/// client did not declare it can take is refused, the result is shaped for
/// the era, error codes mapped. Called directly rather than through
/// `handle_request`, whose future is as large as the largest of every MCP
/// method's (measured: 16 KiB for the gateway's handler, against 4 KiB for
/// its `call_tool`), and is copied whole into the call's task.
pub(crate) async fn call_tool<H: ServerHandler>(
    handler: &H,
    params: CallToolRequestParams,
    context: RequestContext<RoleServer>,
    era: Era,
) -> Result<ServerResult, rmcp::ErrorData> {
    let takes_tasks = context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks());
    match handler.call_tool(params, context).await {
        Ok(CallToolResponse::Task(_)) if !takes_tasks => {
            Err(rmcp::ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ))
        }
        Ok(CallToolResponse::InputRequired(_)) if era == Era::Session => {
            Err(rmcp::ErrorData::invalid_request(
                "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
                None,
            ))
        }
        Ok(response) => {
            let mut result = ServerResult::from(response);
            match era {
                Era::Stateless => result.fill_missing_cache_hints(),
                Era::Session => {
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                }
            }
            Ok(result)
        }
        Err(mut error) => {
            if era == Era::Stateless && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            Err(error)
        }
    }
}

/// The value of a header sent exactly once, as text.
pub(crate) fn sole<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    match values.next() {
        Some(_) => None,
        None => value.to_str().ok(),
    }
}

/// `body` answered `application/json` with `status`.
pub(crate) fn json_response(body: impl Into<Body>, status: StatusCode) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An empty answer with `status`.
pub(crate) fn status_only(status: StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}
