//! The direct call path for 2026-07-28 Streamable HTTP servers: a
//! stateless `tools/call` is POSTed through the guarded client and its
//! answer read straight into a result, without rmcp's client service in
//! between.
//!
//! Why: on such a server a call needs no session, so rmcp's request loop,
//! its transport worker task, its per-request header derivation (the whole
//! message serialised to a JSON value once more) and its two-pass message
//! parsing are pure overhead — measured on loopback they cost more gateway
//! CPU than the HTTP exchange itself.
//!
//! It is used only where it changes nothing a caller can see (see
//! [`Direct::serves`]): no progress to route (rmcp's path routes it), a tool
//! name that goes in the `Mcp-Name` header as it is, and a server none of
//! whose tools promotes arguments to `Mcp-Param-*` headers. Everything
//! else — the same guard, credentials, redirects and body limits
//! ([`GuardedHttp::send`]), the same `_meta` rmcp stamps on a 2026 request,
//! the same error mapping, cancellation by closing the request, an event
//! stream answer with its notifications delivered — is as on rmcp's path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use http::header::ACCEPT;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use portcullis_catalog::ToolResult;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ErrorData, Implementation, JsonRpcMessage,
    ProtocolVersion, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::ServiceError;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpResponseLimits;
use serde::Serialize;
use serde_json::Value;
use url::Url;

use crate::http::{EVENT_STREAM, GuardedHttp, HttpFailure, JSON, content_type, is_media};
use crate::progress::UpstreamHandler;

/// What a direct call answered.
pub(crate) enum Answer {
    /// A tool result, read straight from the wire.
    Result(ToolResult),
    /// Any other result (`input_required`, an empty or unexpected one), as
    /// rmcp reads it, for the caller's usual handling.
    Other(Box<ServerResult>),
}

/// A 2026 Streamable HTTP server's direct call path.
pub(crate) struct Direct {
    http: GuardedHttp,
    url: Url,
    /// `Mcp-Protocol-Version`.
    version: HeaderValue,
    /// The `_meta` rmcp puts on every 2026 request: protocol version,
    /// client info and capabilities.
    meta: RequestMetaObject,
    /// Set once any listing had a tool with `x-mcp-header` annotations:
    /// rmcp promotes those arguments to headers, so such a server is
    /// called through rmcp from then on.
    promotes_headers: AtomicBool,
    next_id: AtomicU64,
}

/// The request body, serialised straight from the borrowed parameters.
#[derive(Serialize)]
struct Envelope<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: &'a CallToolRequestParams,
}

impl Direct {
    /// The direct path for a server that negotiated `version` with the
    /// client described by `client`, or `None` when `version` still has a
    /// handshake (those calls belong to a session rmcp keeps).
    pub(crate) fn new(
        http: GuardedHttp,
        url: Url,
        version: &ProtocolVersion,
        client: Implementation,
        capabilities: ClientCapabilities,
    ) -> Option<Direct> {
        if version.has_initialize() {
            return None;
        }
        let header = HeaderValue::from_str(version.as_str()).ok()?;
        let mut meta = RequestMetaObject::default();
        meta.set_protocol_version(version.clone());
        meta.set_client_info(client);
        meta.set_client_capabilities(capabilities);
        Some(Direct {
            http,
            url,
            version: header,
            meta,
            promotes_headers: AtomicBool::new(false),
            // rmcp numbers its own requests from 0 on the same server;
            // these ids live in another range so the two never meet.
            next_id: AtomicU64::new(1 << 48),
        })
    }

    /// Notes a listing's input schemas: a tool that annotates
    /// `x-mcp-header` sends its calls through rmcp from now on.
    pub(crate) fn saw_schemas<'a, S: Serialize + 'a>(
        &self,
        schemas: impl IntoIterator<Item = &'a S>,
    ) {
        let promotes = schemas.into_iter().any(|schema| {
            serde_json::to_string(schema).is_ok_and(|schema| schema.contains("x-mcp-header"))
        });
        if promotes {
            self.promotes_headers.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a call of `remote_name` can go this way: no progress to
    /// route, no argument headers, a name that needs no header encoding.
    pub(crate) fn serves(&self, remote_name: &str, wants_progress: bool) -> bool {
        !wants_progress
            && !self.promotes_headers.load(Ordering::Relaxed)
            && plain_header_value(remote_name)
    }

    /// One `tools/call` round. Notifications in an event-stream answer
    /// are delivered through `handler`, as rmcp's path delivers them.
    pub(crate) async fn call(
        &self,
        mut params: CallToolRequestParams,
        token: Option<&str>,
        handler: &UpstreamHandler,
    ) -> Result<Answer, ServiceError> {
        // The call's own capabilities (what its client can answer), if it
        // names them, over the connection's.
        let capabilities = params.meta.as_ref().and_then(|m| m.client_capabilities());
        let mut meta = self.meta.clone();
        if let Some(capabilities) = capabilities {
            meta.set_client_capabilities(capabilities);
        }
        params.meta = Some(meta);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&Envelope {
            jsonrpc: "2.0",
            id,
            method: "tools/call",
            params: &params,
        })
        .map_err(|e| unexpected(format!("cannot encode the request: {e}")))?;
        let mut headers = HeaderMap::with_capacity(4);
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            self.version.clone(),
        );
        headers.insert(
            HeaderName::from_static("mcp-method"),
            HeaderValue::from_static("tools/call"),
        );
        let name = HeaderValue::from_str(&params.name)
            .map_err(|_| unexpected("the tool name is not a header value".into()))?;
        headers.insert(HeaderName::from_static("mcp-name"), name);
        let (response, _) = self
            .http
            .send(
                Method::POST,
                self.url.clone(),
                headers,
                Some(Bytes::from(body)),
                token,
            )
            .await
            .map_err(transport)?;
        let limits = StreamableHttpResponseLimits::default();
        let status = response.status();
        let kind = content_type(&response);
        if !status.is_success() {
            // A JSON-RPC error in the body is the server's answer; anything
            // else is a failed request, as rmcp reports it.
            let body = crate::http::read_bounded(response, limits.max_error_response_size)
                .await
                .unwrap_or_default();
            if let Ok(JsonRpcMessage::Error(error)) =
                serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Err(ServiceError::McpError(error.error));
            }
            return Err(unexpected(format!("HTTP {status}")));
        }
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            return Err(unexpected(format!("HTTP {status} to a request")));
        }
        if is_media(kind.as_deref(), JSON) {
            let body = crate::http::read_bounded(response, limits.max_json_response_size)
                .await
                .map_err(transport)?;
            return answer(&body);
        }
        if is_media(kind.as_deref(), EVENT_STREAM) {
            let mut events = crate::http::sse_events(response, limits.max_sse_event_size);
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| unexpected(e.to_string()))?;
                let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                    continue;
                };
                match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(JsonRpcMessage::Notification(notification)) => {
                        handler.observe(notification.notification).await;
                    }
                    Ok(JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)) => {
                        return answer(data.as_bytes());
                    }
                    // A 2026 server asks for input with `input_required`,
                    // never with a request on the call's stream.
                    Ok(_) | Err(_) => {}
                }
            }
            return Err(unexpected(
                "the event stream ended without an answer".into(),
            ));
        }
        Err(unexpected(format!(
            "unexpected content type {}",
            kind.as_deref().unwrap_or("(none)")
        )))
    }
}

/// Reads one JSON-RPC answer: a tool result straight into [`ToolResult`],
/// anything else through rmcp's types.
fn answer(body: &[u8]) -> Result<Answer, ServiceError> {
    let mut message: Value =
        serde_json::from_slice(body).map_err(|e| unexpected(format!("unreadable answer: {e}")))?;
    if let Some(error) = message.get_mut("error") {
        let error: ErrorData = serde_json::from_value(error.take())
            .map_err(|e| unexpected(format!("unreadable error: {e}")))?;
        return Err(ServiceError::McpError(error));
    }
    let Some(result) = message.get_mut("result").map(Value::take) else {
        return Err(ServiceError::UnexpectedResponse);
    };
    if is_tool_result(&result) {
        return serde_json::from_value::<ToolResult>(result)
            .map(Answer::Result)
            .map_err(|e| unexpected(format!("unreadable tool result: {e}")));
    }
    serde_json::from_value::<ServerResult>(result)
        .map(|other| Answer::Other(Box::new(other)))
        .map_err(|e| unexpected(format!("unreadable result: {e}")))
}

/// A complete tool result: content or structured content, and no other
/// result type (`input_required`) or task in its place.
fn is_tool_result(result: &Value) -> bool {
    let Some(object) = result.as_object() else {
        return false;
    };
    let complete = object
        .get("resultType")
        .is_none_or(|t| t.as_str() == Some("complete"));
    complete
        && !object.contains_key("task")
        && (object.contains_key("content") || object.contains_key("structuredContent"))
}

/// A value `Mcp-Name` carries as it is (rmcp would Base64-wrap others).
fn plain_header_value(value: &str) -> bool {
    !value.is_empty()
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
        && value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with("=?base64?")
}

fn transport(failure: HttpFailure) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "streamable-http",
        std::any::TypeId::of::<Direct>(),
        Box::new(failure),
    ))
}

fn unexpected(reason: String) -> ServiceError {
    ServiceError::McpError(ErrorData::internal_error(reason, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_results_are_read_directly_and_others_through_rmcp() {
        let body = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "text", "text": "hi"}], "isError": false}});
        match answer(body.to_string().as_bytes()) {
            Ok(Answer::Result(result)) => assert_eq!(result, ToolResult::text("hi")),
            _ => panic!("expected a tool result"),
        }
        let empty = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        assert!(matches!(
            answer(empty.to_string().as_bytes()),
            Ok(Answer::Other(_))
        ));
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}});
        match answer(error.to_string().as_bytes()) {
            Err(ServiceError::McpError(data)) => assert_eq!(data.message, "bad"),
            _ => panic!("expected the server's error"),
        }
    }

    #[test]
    fn only_plain_names_go_in_the_header_as_they_are() {
        assert!(plain_header_value("echo"));
        assert!(plain_header_value("get-weather_2"));
        assert!(!plain_header_value(" echo"));
        assert!(!plain_header_value("écho"));
        assert!(!plain_header_value(""));
    }
}
