//! Requests to `/mcp` that cannot be read as one JSON-RPC message, answered
//! as JSON-RPC errors.
//!
//! rmcp's service answers every body it cannot read as a client message
//! with `415 Unsupported Media Type` and a line of plain text, whatever was
//! wrong: a body that is not JSON, a batch, a wrong `jsonrpc` version, an
//! odd `id`. A client cannot tell those apart, and a 415 wrongly says its
//! `Content-Type` was the problem. This check sits in front of rmcp (after
//! the guards) on every POST, in both protocol eras and with or without a
//! session:
//!
//! - an `Accept` that does not name both JSON and event streams is `406`,
//!   a `Content-Type` other than JSON is `415`, each with a JSON-RPC error
//!   saying so (`-32600`);
//! - a body over the limit while it is read (chunked, so the guard saw no
//!   length) is `413`;
//! - a body rmcp refused to read is looked at once more and answered `400`
//!   with `-32700` (not JSON), `-32600` (JSON, but not one JSON-RPC message:
//!   a batch, another `jsonrpc` version, an `id` that is not a string or an
//!   integer, no or a non-string `method`) or `-32602` (`params` that are
//!   not an object), echoing the request's `id` when it has a usable one;
//! - any other refusal of rmcp's in plain text (a session required, an
//!   unknown session) keeps its status, its words in a JSON-RPC error.
//!
//! The body is read here once and handed on; a request rmcp reads is never
//! parsed twice, since the reason is only worked out after rmcp refused it.

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use rmcp::model::ErrorCode;
use serde_json::{Value, json};

use crate::media_type::{accepts_json_and_events, essence_is};

/// The check (see the module docs) of a request to `/mcp`, handed on to
/// `next` with its body read (bodies up to `max_body_bytes`).
pub(crate) async fn answer_malformed<F, Fut>(
    request: Request,
    max_body_bytes: usize,
    next: F,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    if request.method() != Method::POST {
        return next(request).await;
    }
    if !accepts_json_and_events(request.headers()) {
        return error(
            StatusCode::NOT_ACCEPTABLE,
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            "Not Acceptable: the Accept header must name both application/json and text/event-stream",
        );
    }
    if !json_content(request.headers()) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    let (parts, body) = request.into_parts();
    let bytes = match read_body(body, max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    let response = next(Request::from_parts(parts, Body::from(bytes.clone()))).await;
    // The media types were checked above, so rmcp's 415 here can only mean
    // that it could not read the body as a client message.
    if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        let (code, message, id) = unreadable(&bytes, "request body");
        return error(StatusCode::BAD_REQUEST, id, code, &message);
    }
    if response.status().is_client_error() && !json_content(response.headers()) {
        return as_jsonrpc(response).await;
    }
    response
}

/// rmcp's other refusals (a session required or unknown) keep their
/// status, their words put in a JSON-RPC error, so every answer to a POST
/// is one.
async fn as_jsonrpc(response: Response) -> Response {
    let status = response.status();
    // rmcp's own line of text; anything longer is not one of them.
    let words = match axum::body::to_bytes(response.into_body(), 1024).await {
        Ok(words) => String::from_utf8_lossy(&words).into_owned(),
        Err(_) => String::new(),
    };
    let words = match words.trim() {
        "" => status.canonical_reason().unwrap_or("Bad Request"),
        words => words,
    };
    error(status, Value::Null, ErrorCode::INVALID_REQUEST, words)
}

/// The body, at most `limit` bytes (else `413`).
async fn read_body(body: Body, limit: usize) -> Result<Bytes, Response> {
    let mut stream = body.into_data_stream();
    let mut collected = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            tracing::debug!(error = %e, "request body not read");
            error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                ErrorCode::INVALID_REQUEST,
                "Bad Request: the request body could not be read",
            )
        })?;
        if chunk.len() > limit.saturating_sub(collected.len()) {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                ErrorCode::INVALID_REQUEST,
                "Payload Too Large: the request body is over the limit",
            ));
        }
        collected.extend_from_slice(&chunk);
    }
    Ok(collected.freeze())
}

/// Why a body is not one JSON-RPC message rmcp reads: the error code, the
/// message, and the `id` to answer with (`null` unless the body has a
/// string or integer one). `what` names the body in the message (`request
/// body` over HTTP, `line` on stdio, which answers the same way).
pub(crate) fn unreadable(body: &[u8], what: &str) -> (ErrorCode, String, Value) {
    let invalid = |message: &str, id: Value| {
        (
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: {message}"),
            id,
        )
    };
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            // serde's words name a position and a kind, never the input.
            return (
                ErrorCode::PARSE_ERROR,
                format!("Parse error: the {what} is not JSON ({e})"),
                Value::Null,
            );
        }
    };
    let message = match value {
        Value::Object(message) => message,
        Value::Array(_) => {
            return invalid(
                "batches are not supported; send one JSON-RPC message per request",
                Value::Null,
            );
        }
        _ => {
            return invalid(
                &format!("the {what} must be a JSON-RPC object"),
                Value::Null,
            );
        }
    };
    let id = message.get("id");
    let usable_id = match id {
        Some(Value::String(_)) => id.cloned(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => id.cloned(),
        _ => None,
    };
    let echo = usable_id.clone().unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"", echo);
    }
    if id.is_some() && usable_id.is_none() {
        return invalid("\"id\" must be a string or an integer", echo);
    }
    match message.get("method") {
        None if message.contains_key("result") || message.contains_key("error") => {
            invalid("not a JSON-RPC response this server can read", echo)
        }
        None => invalid("\"method\" is missing", echo),
        Some(Value::String(_)) => match message.get("params") {
            Some(params) if !params.is_object() => (
                ErrorCode::INVALID_PARAMS,
                "Invalid params: \"params\" must be an object".to_owned(),
                echo,
            ),
            _ => invalid("not a JSON-RPC message this server can read", echo),
        },
        Some(_) => invalid("\"method\" must be a string", echo),
    }
}

/// A JSON-RPC error response with `status`.
fn error(status: StatusCode, id: Value, code: ErrorCode, message: &str) -> Response {
    let mut response = Response::new(Body::from(error_body(id, code, message).to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON-RPC error message (its `id` `null` when it answers no readable
/// one), as both surfaces write it.
pub(crate) fn error_body(id: Value, code: ErrorCode, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}})
}

/// A `Content-Type` of JSON, as rmcp checks it (the first value).
fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| essence_is(value, "application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> (i32, Value) {
        let (code, _, id) = unreadable(body.as_bytes(), "request body");
        (code.0, id)
    }

    #[test]
    fn each_kind_of_unreadable_body_gets_its_code() {
        for (body, want, id) in [
            ("not json", -32700, Value::Null),
            ("", -32700, Value::Null),
            ("[]", -32600, Value::Null),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                -32600,
                Value::Null,
            ),
            ("42", -32600, Value::Null),
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
                -32600,
                json!(3),
            ),
            (r#"{"id":"a","method":"ping"}"#, -32600, json!("a")),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
                -32600,
                Value::Null,
            ),
            (r#"{"jsonrpc":"2.0","id":4}"#, -32600, json!(4)),
            (r#"{"jsonrpc":"2.0","id":4,"method":7}"#, -32600, json!(4)),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[1]}"#,
                -32602,
                json!(5),
            ),
        ] {
            assert_eq!(code(body), (want, id), "{body}");
        }
    }

    #[test]
    fn the_parse_error_never_quotes_the_body() {
        let (_, message, _) = unreadable(b"secret-looking-words", "request body");
        assert!(!message.contains("secret"), "{message}");
    }
}
