//! Reading a direct call's answer when it comes as an event stream.
//!
//! Before the answer the server may send notifications (progress, log
//! messages, list changes: delivered as rmcp's path delivers them) and, on
//! an initialize-era session, requests of its own that belong to the call
//! (sampling, elicitation, roots, ping). Those are put to the call's
//! client ([`crate::relay::answer_for_call`]) while the stream is still
//! read, and each answer is POSTed back into the session; the server's
//! `notifications/cancelled` for one of them withdraws it (and it gets no
//! answer), and every one still open is withdrawn when the call ends. The
//! call's answer is handed back only once its withdrawn requests have
//! ended (at most a second), so the calling client hears of a withdrawal
//! before the call's answer, as through rmcp's path. A request rmcp's
//! types cannot read (`params` an array, or unfit for its method) is
//! answered with an error rather than skipped: the server may wait on it.
//!
//! A hostile server is held to bounds here: at most [`MAX_OPEN_ASKS`] of
//! its requests are open at once (reading the stream waits for one to end,
//! so a flood, or replies the server never takes, cannot grow tasks and
//! connections without bound); a request reusing the id of one still open
//! is dropped (it would otherwise orphan the first, left open with the
//! client past the call); a reply still being POSTed once the call is
//! answered is abandoned; every reply POST gives up after the reply
//! timeout. A call that ends unanswered (cancelled, timed out) still
//! answers the server's open requests, with an error: its tool may be
//! waiting on one before it can hear of the cancellation.
//!
//! An initialize-era server may also end the stream before the answer once
//! it has given an event id: the stream is then resumed with a `GET`
//! carrying `Last-Event-ID`, after the `retry` the server asked for (else
//! one second, as rmcp waits), at most [`MAX_RESUMES`] times a call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderValue, Method, StatusCode};
use rmcp::ErrorData;
use rmcp::model::{
    ClientJsonRpcMessage, ErrorCode, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
    ServerNotification,
};
use rmcp::service::ServiceError;
use serde::Deserialize;
use serde_json::Value;
use sse_stream::{Error as SseError, Sse};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Answer, Direct, Round, answer, answers, transport, unexpected};
use crate::http::{EVENT_STREAM, LAST_EVENT_ID_HEADER, content_type, interrupted, is_media};
use crate::relay::answer_for_call;

/// Resumptions of one call's answer stream. A server that closes its
/// stream again and again without answering is given up on after this
/// many, whatever its `retry`, instead of being polled until the call's
/// timeout.
pub(super) const MAX_RESUMES: usize = 32;

/// The wait before a resumption when the server named none (rmcp's first
/// retry interval).
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

type Events = BoxStream<'static, Result<Sse, SseError>>;

/// The server's requests of one call still waiting for the client's
/// answer, each withdrawn (its token cancelled) when the call ends.
#[derive(Default)]
struct Asked {
    open: HashMap<RequestId, Open>,
    /// Cancelled once the call is answered: a reply still being POSTed
    /// then is abandoned (the server no longer waits for it).
    abandon: CancellationToken,
}

/// One request being answered.
struct Open {
    /// Withdraws it from the calling client.
    cancel: CancellationToken,
    /// Set when the server withdrew it: it then gets no answer.
    withdrawn: CancellationToken,
    task: JoinHandle<()>,
}

impl Asked {
    /// Whether a request `id` is still being answered.
    fn is_open(&self, id: &RequestId) -> bool {
        self.open
            .get(id)
            .is_some_and(|open| !open.task.is_finished())
    }

    /// Notes a request being answered by `task`. Answered ones are
    /// forgotten from time to time, so a server that asks (pings) all
    /// through a long call does not grow the map for as long.
    fn insert(&mut self, id: RequestId, open: Open) {
        if self.open.len() >= PRUNE_AT {
            self.open.retain(|_, open| !open.task.is_finished());
        }
        self.open.insert(id, open);
    }

    /// Withdraws the request `id`, if it is still being answered. Its
    /// task stays noted until it ends, so [`Asked::settle`] waits for it.
    fn withdraw(&mut self, id: &RequestId) {
        if let Some(open) = self.open.get(id) {
            open.withdrawn.cancel();
            open.cancel.cancel();
        }
    }

    /// Before the call's answer is handed back: withdraws every request
    /// still open and waits (at most [`SETTLE`]) until each has ended, so
    /// the calling client hears of a withdrawn request before it gets the
    /// call's answer, as it would through rmcp's path. Replies still
    /// being POSTed get as long, then are abandoned.
    async fn settle(&mut self) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        for (_, open) in self.open.drain() {
            open.cancel.cancel();
            let _ = tokio::time::timeout_at(deadline, open.task).await;
        }
        self.abandon.cancel();
    }
}

/// How long a call's answer waits for its withdrawn requests to end.
const SETTLE: Duration = Duration::from_secs(1);

/// How many of a call's requests are noted before answered ones are
/// forgotten.
const PRUNE_AT: usize = 64;

/// A call's server requests open at once (being answered, or their answer
/// being POSTed); past it, the stream is not read until one ends.
pub(super) const MAX_OPEN_ASKS: usize = 64;

/// A call that ends without its answer (cancelled, timed out, failed)
/// withdraws its open requests from the client; the server still gets an
/// error answer for each (bounded by the reply timeout), since its tool may
/// be waiting on it before it can hear of the call's cancellation.
impl Drop for Asked {
    fn drop(&mut self) {
        for open in self.open.values() {
            open.cancel.cancel();
        }
    }
}

/// Reads the answer of the call `round` from `events`, the stream its POST
/// opened (`session`: the session it was posted into, if any).
pub(super) async fn read(
    direct: &Direct,
    mut events: Events,
    session: Option<Arc<str>>,
    round: Round<'_>,
) -> Result<Answer, ServiceError> {
    let mut asked = Asked::default();
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_OPEN_ASKS));
    let mut last_event: Option<String> = None;
    let mut retry: Option<Duration> = None;
    let mut resumes = 0;
    loop {
        let ended = loop {
            let event = match events.next().await {
                None => break None,
                Some(Err(e)) => break Some(e),
                Some(Ok(event)) => event,
            };
            if let Some(ms) = event.retry {
                retry = Some(Duration::from_millis(ms));
            }
            if event.id.is_some() {
                last_event = event.id;
            }
            // Only unnamed and `message` events carry JSON-RPC.
            if !matches!(event.event.as_deref(), None | Some("" | "message")) {
                continue;
            }
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            // Unreadable events are skipped, as rmcp skips them.
            let Ok(message) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if message.get("method").is_none() {
                if answers(&message, round.id) {
                    asked.settle().await;
                    return answer(message);
                }
                // An answer to another request has no business here.
                continue;
            }
            // Read borrowed, so that a request rmcp's types cannot read
            // (params an array, or unfit for a known method) can still be
            // answered: the server may be waiting on it.
            let parsed = match ServerJsonRpcMessage::deserialize(&message) {
                Ok(parsed) => Ok(parsed),
                Err(_) => Err(unreadable(&message)),
            };
            let asking = match parsed {
                Ok(JsonRpcMessage::Request(request)) => Some((request.id, Ok(request.request))),
                Err(Some((id, refusal))) => Some((id, Err(refusal))),
                Ok(other) => {
                    if let JsonRpcMessage::Notification(notification) = other {
                        if let ServerNotification::CancelledNotification(cancelled) =
                            &notification.notification
                        {
                            if let Some(id) = &cancelled.params.request_id {
                                asked.withdraw(id);
                            }
                            continue;
                        }
                        round.handler.observe(notification.notification).await;
                    }
                    None
                }
                Err(None) => None,
            };
            // Only a session has a way back for the answer.
            let Some((id, request)) = asking.filter(|_| direct.keeps_session()) else {
                continue;
            };
            if asked.is_open(&id) {
                tracing::debug!(
                    server = direct.http.server(),
                    "a server request reused the id of one still open; dropped"
                );
                continue;
            }
            // Never closed, so this only waits.
            let Ok(permit) = open.clone().acquire_owned().await else {
                continue;
            };
            let cancel = CancellationToken::new();
            let relay = round.relay.cloned();
            let reply = direct.replier(session.clone(), round.token);
            let withdrawn = CancellationToken::new();
            let noted = (id.clone(), cancel.clone(), withdrawn.clone());
            let abandon = asked.abandon.clone();
            let task = tokio::spawn(async move {
                let answered = match request {
                    Ok(request) => answer_for_call(relay, request, cancel.clone()).await,
                    Err(refusal) => Err(refusal),
                };
                // A request the server withdrew is not answered.
                if withdrawn.is_cancelled() {
                    return;
                }
                let message = match answered {
                    Ok(result) => ClientJsonRpcMessage::response(result, id),
                    Err(error) => ClientJsonRpcMessage::error(error, Some(id)),
                };
                // The call's end abandons a reply still on its way.
                tokio::select! {
                    () = reply.post(&message) => {}
                    () = abandon.cancelled() => {}
                }
                drop(permit);
            });
            let (id, cancel, withdrawn) = noted;
            asked.insert(
                id,
                Open {
                    cancel,
                    withdrawn,
                    task,
                },
            );
        };
        // The stream ended without the answer.
        let resumable = direct.keeps_session()
            && last_event.is_some()
            && resumes < MAX_RESUMES
            && ended.as_ref().is_none_or(interrupted);
        if !resumable {
            return Err(match ended {
                Some(e) => unexpected(format!("the event stream failed: {e}")),
                None => unexpected("the event stream ended without an answer".into()),
            });
        }
        // Asked requests stay open across a resumption: their answers are
        // POSTed whichever stream the server continues on.
        loop {
            resumes += 1;
            tokio::time::sleep(retry.unwrap_or(DEFAULT_RETRY)).await;
            match resume(
                direct,
                session.as_deref(),
                last_event.as_deref(),
                round.token,
            )
            .await
            {
                Ok(stream) => {
                    events = stream;
                    break;
                }
                Err(Resume::Fatal(error)) => return Err(error),
                Err(Resume::Again(error)) if resumes >= MAX_RESUMES => return Err(error),
                Err(Resume::Again(_)) => {}
            }
        }
    }
}

/// The id of a server request rmcp's types cannot read, and the error it
/// is answered with: "method not found" for a method the gateway does not
/// answer, "invalid params" for one it does. `None` when `message` is no
/// request (no string `method`, or no id that can be answered).
fn unreadable(message: &Value) -> Option<(RequestId, ErrorData)> {
    let method = message.get("method")?.as_str()?;
    let id = RequestId::deserialize(message.get("id")?).ok()?;
    let known = matches!(
        method,
        "ping" | "sampling/createMessage" | "elicitation/create" | "roots/list"
    );
    let refusal = if known {
        ErrorData::invalid_params(
            format!("the {method} request's params could not be read"),
            None,
        )
    } else {
        ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            "portcullis does not relay this request to the calling client",
            None,
        )
    };
    Some((id, refusal))
}

/// Why a resumption failed.
enum Resume {
    /// Trying again cannot help (refused, gone, not an event stream).
    Fatal(ServiceError),
    /// It may work after the next wait.
    Again(ServiceError),
}

/// Reopens the call's stream after `last_event` with a `GET`.
async fn resume(
    direct: &Direct,
    session: Option<&str>,
    last_event: Option<&str>,
    token: Option<&str>,
) -> Result<Events, Resume> {
    let mut headers = direct.protocol_headers(session, EVENT_STREAM);
    if let Some(id) = last_event.and_then(|id| HeaderValue::from_str(id).ok()) {
        headers.insert(LAST_EVENT_ID_HEADER, id);
    }
    let (response, _) = direct
        .http
        .send(Method::GET, direct.url.clone(), headers, None, token)
        .await
        .map_err(|e| match e {
            crate::http::HttpFailure::Http(_) => Resume::Again(transport(e)),
            other => Resume::Fatal(transport(other)),
        })?;
    let status = response.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return Err(Resume::Again(unexpected(format!(
            "HTTP {status} to the resumption GET"
        ))));
    }
    if !status.is_success() {
        return Err(Resume::Fatal(unexpected(format!(
            "HTTP {status} to the resumption GET"
        ))));
    }
    if !is_media(content_type(&response).as_deref(), EVENT_STREAM) {
        return Err(Resume::Fatal(unexpected(
            "the resumption GET was not answered with an event stream".into(),
        )));
    }
    let limit = rmcp::transport::streamable_http_client::StreamableHttpResponseLimits::default()
        .max_sse_event_size;
    Ok(crate::http::sse_events(response, limit))
}
