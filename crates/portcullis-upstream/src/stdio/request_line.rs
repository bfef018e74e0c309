//! One outgoing message as a line for a child's stdin.
//!
//! rmcp serialises a request's `params` by first turning them into a
//! `serde_json::Value` tree (a copy of every argument), taking `_meta` out
//! of it and merging it with the metadata rmcp keeps beside the request
//! (progress token, protocol version, client info), then writing the tree.
//! A `tools/call` is the message sent once per call, so it is written here
//! directly: the metadata is merged into the request's own `_meta` first,
//! with the same precedence (the request's own keys, then the legacy
//! [`MetaObject`], then the typed [`RequestMetaObject`], a later one winning
//! a key), and the parameters are written once, with no tree in between.
//! Every other message goes through rmcp's serialisation.

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, JsonRpcRequest, MetaObject,
    RequestMetaObject,
};

/// `message` as JSON followed by a newline.
pub(crate) fn encode(mut message: ClientJsonRpcMessage) -> serde_json::Result<Vec<u8>> {
    let JsonRpcMessage::Request(JsonRpcRequest {
        id,
        request: ClientRequest::CallToolRequest(call),
        ..
    }) = &mut message
    else {
        let mut bytes = serde_json::to_vec(&message)?;
        bytes.push(b'\n');
        return Ok(bytes);
    };
    let legacy = call.extensions.remove::<MetaObject>();
    let typed = call.extensions.remove::<RequestMetaObject>();
    for added in [legacy.map(|m| m.0), typed.map(|m| m.0.0)]
        .into_iter()
        .flatten()
    {
        call.params
            .meta
            .get_or_insert_with(RequestMetaObject::default)
            .0
            .0
            .extend(added);
    }
    let mut bytes = Vec::with_capacity(256);
    bytes.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut bytes, &*id)?;
    bytes.extend_from_slice(br#","method":"tools/call","params":"#);
    serde_json::to_writer(&mut bytes, &call.params)?;
    bytes.extend_from_slice(b"}\n");
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, RequestId};
    use serde_json::{Value, json};

    fn message(id: RequestId, request: CallToolRequest) -> ClientJsonRpcMessage {
        JsonRpcMessage::request(ClientRequest::CallToolRequest(request), id)
    }

    /// What rmcp would have written, and what we write, as values.
    fn both(message: ClientJsonRpcMessage) -> (Value, Value) {
        let theirs = serde_json::to_value(&message).unwrap();
        let bytes = encode(message).unwrap();
        assert_eq!(bytes.last(), Some(&b'\n'));
        assert!(!bytes[..bytes.len() - 1].contains(&b'\n'));
        (serde_json::from_slice(&bytes).unwrap(), theirs)
    }

    fn meta(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_call_is_written_as_rmcp_writes_it() {
        let mut params = CallToolRequestParams::new("echo");
        params.arguments = Some(meta(
            json!({"text": "hé \"quoted\"\n", "n": 1.5, "deep": {"a": [1, null]}}),
        ));
        let (ours, theirs) = both(message(RequestId::Number(7), CallToolRequest::new(params)));
        assert_eq!(ours, theirs);
        assert_eq!(ours["method"], "tools/call");
        assert_eq!(ours["id"], 7);
    }

    #[test]
    fn every_meta_is_merged_with_rmcps_precedence() {
        let mut params = CallToolRequestParams::new("echo");
        params.meta = Some(RequestMetaObject(MetaObject(meta(
            json!({"own": 1, "shared": "params", "both": "params"}),
        ))));
        params.input_responses =
            Some(serde_json::from_value(json!({"k": {"action": "decline"}})).unwrap());
        params.request_state = Some("opaque".to_owned());
        let mut request = CallToolRequest::new(params);
        request.extensions.insert(MetaObject(meta(
            json!({"legacy": 2, "shared": "legacy", "both": "legacy"}),
        )));
        request.extensions.insert(RequestMetaObject(MetaObject(meta(
            json!({"progressToken": 3, "both": "typed"}),
        ))));
        let id = RequestId::String("call-1".into());
        let (ours, theirs) = both(message(id, request));
        assert_eq!(ours, theirs);
        assert_eq!(ours["params"]["_meta"]["both"], "typed");
        assert_eq!(ours["params"]["_meta"]["shared"], "legacy");
        assert_eq!(ours["params"]["requestState"], "opaque");
        assert_eq!(ours["params"]["inputResponses"]["k"]["action"], "decline");
    }

    #[test]
    fn only_the_extensions_meta_or_none_at_all() {
        let mut request = CallToolRequest::new(CallToolRequestParams::new("bare"));
        request.extensions.insert(RequestMetaObject(MetaObject(meta(
            json!({"progressToken": "p"}),
        ))));
        let (ours, theirs) = both(message(RequestId::Number(1), request));
        assert_eq!(ours, theirs);
        let request = CallToolRequest::new(CallToolRequestParams::new("bare"));
        let (ours, theirs) = both(message(RequestId::Number(2), request));
        assert_eq!(ours, theirs);
        assert!(ours["params"].get("_meta").is_none());
    }

    #[test]
    fn other_messages_are_written_by_rmcp() {
        let ping = JsonRpcMessage::request(
            ClientRequest::PingRequest(Default::default()),
            RequestId::Number(4),
        );
        let (ours, theirs) = both(ping);
        assert_eq!(ours, theirs);
    }
}
