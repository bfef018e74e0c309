//! Requests a direct session call sends its client (`crate::session_call`):
//! an upstream's sampling, elicitation or roots relayed, an approval form.
//!
//! rmcp's session worker puts such a request on the stream of the call it
//! comes from, but it never sees a direct call. So the call asks through a
//! [`ClientRequests`] in its context instead: the request gets an id of the
//! session's ([`ASK_ID_PREFIX`], never one of rmcp's), waits in the session
//! table, and goes out as an event on the call's answer, which becomes a
//! stream if it is not one yet. The client's response, POSTed to the
//! session, is taken on its way to rmcp and handed back here; only the
//! same session's response can complete it. The call being cancelled or
//! ending, or the session ending, fails the request; dropping the answer's
//! future (an upstream withdrawing its request, a timeout) withdraws it,
//! and the client is sent `notifications/cancelled` on the stream.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use portcullis_handler::{ClientRequests, RequestSink};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientResult, RequestId,
    ServerJsonRpcMessage, ServerNotification, ServerRequest,
};
use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_server::session::SessionId;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::sessions::{ASK_ID_PREFIX, BoundedSessions, Outbox};

/// Why a request still waiting is withdrawn, as rmcp words it.
const WITHDRAWN: &str = "cancelled by the server";
const TIMED_OUT: &str = "request timeout";

/// A direct call's way to ask its client: see the module docs.
pub(crate) fn for_call(
    sessions: Arc<BoundedSessions>,
    session: SessionId,
    call: RequestId,
    cancel: CancellationToken,
    outbox: &Arc<watch::Sender<Outbox>>,
) -> ClientRequests {
    ClientRequests::new(CallRequests {
        sessions,
        session,
        call,
        cancel,
        // Weak: the context may outlive the call (an upstream still
        // holding it); the call's end must still read as its end.
        outbox: Arc::downgrade(outbox),
    })
}

struct CallRequests {
    sessions: Arc<BoundedSessions>,
    session: SessionId,
    call: RequestId,
    cancel: CancellationToken,
    outbox: Weak<watch::Sender<Outbox>>,
}

/// Puts `message` on the call's stream unless its response is out already.
fn post(outbox: &watch::Sender<Outbox>, message: &ServerJsonRpcMessage) -> bool {
    let Ok(bytes) = serde_json::to_vec(message) else {
        return false;
    };
    outbox.send_if_modified(|outbox| {
        if outbox.answer.is_some() {
            return false;
        }
        outbox.events.push(Bytes::from(bytes));
        true
    })
}

impl RequestSink for CallRequests {
    fn send(
        &self,
        request: ServerRequest,
        timeout: Option<Duration>,
    ) -> BoxFuture<'static, Result<ClientResult, ServiceError>> {
        let Some(outbox) = self.outbox.upgrade() else {
            return Box::pin(async { Err(ServiceError::TransportClosed) });
        };
        let Some((id, answer)) = self.sessions.ask(&self.session, &self.call) else {
            return Box::pin(async { Err(ServiceError::TransportClosed) });
        };
        let pending = Pending {
            sessions: self.sessions.clone(),
            session: self.session.clone(),
            id: id.clone(),
            outbox: self.outbox.clone(),
            reason: WITHDRAWN,
        };
        if !post(&outbox, &ServerJsonRpcMessage::request(request, id)) {
            drop(pending);
            return Box::pin(async { Err(ServiceError::TransportClosed) });
        }
        drop(outbox);
        let cancel = self.cancel.clone();
        Box::pin(async move {
            let mut pending = pending;
            let expired = async {
                match timeout {
                    Some(timeout) => tokio::time::sleep(timeout).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // A dropped sender: the call or the session ended.
                answer = answer => answer.unwrap_or(Err(ServiceError::TransportClosed)),
                () = cancel.cancelled() => Err(ServiceError::Cancelled {
                    reason: Some("the call was cancelled".to_owned()),
                }),
                () = expired => {
                    pending.reason = TIMED_OUT;
                    Err(ServiceError::Timeout {
                        timeout: timeout.unwrap_or_default(),
                    })
                }
            }
        })
    }
}

/// A request on its way: withdrawn from the client if it is let go
/// before its answer came.
struct Pending {
    sessions: Arc<BoundedSessions>,
    session: SessionId,
    id: RequestId,
    outbox: Weak<watch::Sender<Outbox>>,
    reason: &'static str,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.sessions.withdraw(&self.session, &self.id) {
            return;
        }
        if let Some(outbox) = self.outbox.upgrade() {
            let param = CancelledNotificationParam::new(
                Some(self.id.clone()),
                Some(self.reason.to_owned()),
            );
            let notice =
                ServerNotification::CancelledNotification(CancelledNotification::new(param));
            post(&outbox, &ServerJsonRpcMessage::notification(notice));
        }
    }
}

/// A body POSTed to a session, read as the client's response to a request
/// of [`ASK_ID_PREFIX`]: its id and answer, or `None` (then it is rmcp's).
pub(crate) fn read_answer(body: &[u8]) -> Option<(RequestId, Result<ClientResult, ServiceError>)> {
    use rmcp::model::ClientJsonRpcMessage;
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        method: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        id: Option<RequestId>,
    }
    // The id first, cheaply: rmcp's own responses go on untouched.
    let head: Head = serde_json::from_slice(body).ok()?;
    match head.id? {
        RequestId::String(id) if head.method.is_none() && id.starts_with(ASK_ID_PREFIX) => {}
        _ => return None,
    }
    // Read as rmcp reads it, so the answer is what rmcp's path would hand
    // over.
    match serde_json::from_slice::<ClientJsonRpcMessage>(body).ok()? {
        ClientJsonRpcMessage::Response(response) => Some((response.id, Ok(response.result))),
        ClientJsonRpcMessage::Error(error) => {
            Some((error.id?, Err(ServiceError::McpError(error.error))))
        }
        _ => None,
    }
}
