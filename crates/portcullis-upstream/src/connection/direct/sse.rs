//! The direct call path for legacy HTTP+SSE servers: a `tools/call` is
//! posted to the session's endpoint by the call itself and its answer (a
//! `message` event on the stream) handed back by the transport's reader,
//! without rmcp's client service in between.
//!
//! Why: on rmcp's path a call goes through a channel to the service loop,
//! which spawns a task to post each message and matches the answer back
//! through another channel: two task hand-offs and a spawn a call, as for
//! stdio servers.
//!
//! What stays as on rmcp's path: the POST (the same guarded client, call
//! lane, credentials and redirect rules, to the endpoint the server last
//! named), the request's `_meta` (the progress token of a call that wants
//! progress, which is the call's request id), the reading of the answer
//! (`crate::answers`), requests the server sends during the call (rmcp's
//! handler, which finds the call by its relay slot), and cancellation by
//! `notifications/cancelled`. A stream that ends fails every call waiting
//! on it when the transport goes, as rmcp's pending requests fail.

use std::time::Duration;

use portcullis_catalog::redact::urls_in_text;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, Implementation, ProtocolVersion};
use rmcp::service::ServiceError;
use rmcp::transport::DynamicTransportError;

use super::{Answer, DirectRoute, Era, Lifecycle, MessageCalls, Round, cancelled, message_answer};
use crate::sse::{LegacySseError, SseMessages};

/// How long a cancellation may take to post: the caller does not wait for
/// it, and a server that never answers must not keep its task for ever.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// A legacy SSE server's direct call path.
pub(crate) struct SseDirect {
    messages: SseMessages,
    calls: MessageCalls,
}

impl SseDirect {
    /// The direct path over `messages`, for a server that negotiated
    /// `version` (through the handshake: 2024-11-05 servers know no
    /// other) with the client described by `client`.
    pub(crate) fn new(
        messages: SseMessages,
        version: &ProtocolVersion,
        client: Implementation,
        capabilities: ClientCapabilities,
    ) -> SseDirect {
        let era = Era::new(version, Lifecycle::Handshake, client, capabilities);
        SseDirect {
            messages,
            calls: MessageCalls::new(era),
        }
    }
}

impl DirectRoute for SseDirect {
    fn next_id(&self) -> u64 {
        self.calls.next_id()
    }

    fn relays_through_handler(&self) -> bool {
        true
    }

    async fn call(
        &self,
        params: &mut CallToolRequestParams,
        round: Round<'_>,
    ) -> Result<Answer, ServiceError> {
        let body = self.calls.encode(params, &round)?;
        let Some(mut answer) = self.messages.expect(round.id) else {
            return Err(ServiceError::TransportClosed);
        };
        if let Err(failure) = self.messages.post(body, round.token).await {
            // A server may answer on the stream before its POST fails (a
            // reset, a 5xx): the answer counts, as on rmcp's path.
            return match answer.arrived() {
                Some(message) => message_answer(Some(message)),
                None => Err(transport(failure)),
            };
        }
        message_answer(answer.answer().await)
    }

    fn cancel(&self, id: u64, reason: &str, token: Option<&str>) {
        let message = cancelled(id, reason);
        let messages = self.messages.clone();
        let token = token.map(str::to_owned);
        tokio::spawn(async move {
            let body = match serde_json::to_vec(&message) {
                Ok(body) => body,
                Err(error) => {
                    tracing::debug!("a cancellation could not be encoded: {error}");
                    return;
                }
            };
            let post = messages.post(body, token.as_deref());
            match tokio::time::timeout(CANCEL_TIMEOUT, post).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    // The endpoint's query (a session id) stays out of the log.
                    let error = urls_in_text(&error.to_string()).into_owned();
                    tracing::debug!("a cancellation could not be posted to the server: {error}");
                }
                Err(_) => tracing::debug!("a cancellation was not taken within 10 s"),
            }
        });
    }
}

/// A POST that failed, as rmcp's path reports a failed send.
fn transport(failure: LegacySseError) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "legacy-sse",
        std::any::TypeId::of::<SseDirect>(),
        Box::new(failure),
    ))
}
