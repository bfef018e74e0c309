//! The direct call path for stdio servers: a `tools/call` is written to
//! the child's stdin by the call itself and its answer handed back by the
//! transport's reader, without rmcp's client service in between.
//!
//! Why: on rmcp's path a call goes through a channel to the service loop,
//! which spawns a task to write each message and matches the answer back
//! through another channel: two task hand-offs and a spawn a call, on the
//! transport nearly every MCP server speaks.
//!
//! What stays as on rmcp's path: the request's `_meta` (a discovered
//! server's per-request metadata, the progress token of a call that wants
//! progress, which is the call's request id), the reading of the answer
//! (the transport's, see `crate::stdio`), requests the server sends during
//! the call (rmcp's handler, which finds the call by its relay slot), and
//! cancellation by `notifications/cancelled`. A child that exits fails
//! every call waiting on it at once, as rmcp does.

use rmcp::model::{CallToolRequestParams, ClientCapabilities, Implementation, ProtocolVersion};
use rmcp::service::ServiceError;

use super::{Answer, DirectRoute, Era, Lifecycle, MessageCalls, Round, cancelled, message_answer};
use crate::stdio::ChildLines;

/// A stdio server's direct call path.
pub(crate) struct StdioDirect {
    lines: ChildLines,
    calls: MessageCalls,
}

impl StdioDirect {
    /// The direct path over `lines`, for a server that negotiated
    /// `version` with the client described by `client`.
    pub(crate) fn new(
        lines: ChildLines,
        version: &ProtocolVersion,
        client: Implementation,
        capabilities: ClientCapabilities,
    ) -> StdioDirect {
        let lifecycle = if lines.handshook() {
            Lifecycle::Handshake
        } else {
            Lifecycle::Discover
        };
        StdioDirect {
            lines,
            calls: MessageCalls::new(Era::new(version, lifecycle, client, capabilities)),
        }
    }
}

impl DirectRoute for StdioDirect {
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
        let mut line = self.calls.encode(params, &round)?;
        line.push(b'\n');
        let Some(mut answer) = self.lines.expect(round.id) else {
            return Err(ServiceError::TransportClosed);
        };
        // A pipe that cannot be written to is a child that is gone.
        self.lines
            .send_line(line)
            .await
            .map_err(|_| ServiceError::TransportClosed)?;
        message_answer(answer.answer().await)
    }

    fn cancel(&self, id: u64, reason: &str, _token: Option<&str>) {
        let message = cancelled(id, reason);
        let lines = self.lines.clone();
        tokio::spawn(async move {
            if let Err(error) = lines.send(message).await {
                tracing::debug!("a cancellation could not be written to the server: {error}");
            }
        });
    }
}
