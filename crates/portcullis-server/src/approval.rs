//! Human approval: what happens when the policy answers `ask`.
//!
//! The person at the client is asked before the handler runs, in the way
//! the client's protocol era allows:
//!
//! - **initialize-era clients** (2025-11-25 and older) that declared the
//!   `elicitation` capability get an `elicitation/create` request in form
//!   mode: one boolean field, `approve` (default `false`, so a client that
//!   fills in defaults never approves by accident), and a message naming
//!   the qualified tool with the arguments the call will carry, escaped so
//!   nothing in them can hide or forge part of the question
//!   ([`summarize_arguments`]). Over HTTP this needs a session
//!   ([`crate::HttpOptions::legacy_sessions`]): a stateless server never
//!   learns what an initialize-era client declared, and has nowhere to
//!   route its answer.
//! - **2026-07-28 clients** (stateless, which may not receive server
//!   requests) get the `input_required` round trip (SEP-2322): the call is
//!   answered with an `InputRequiredResult` carrying the same form as an
//!   input request under the key [`APPROVAL_INPUT_KEY`], and a
//!   `requestState`; the client asks the person and retries the call with
//!   the answer and that state. The state is only a handle: what was asked
//!   (tool, a digest of the arguments, the deadline) stays here, so a forged
//!   or replayed state, or a retry whose arguments differ from what the
//!   person saw, is refused with a protocol error (`-32602`), and a handle
//!   is used once.
//!
//! The same handles (and the same table of unanswered ones) park a call
//! whose handler asks the client for input mid-call ([`crate::input`]):
//! a retry's `requestState` names either an approval or a parked call, and
//! one this server is not waiting for is refused with `-32602` whatever
//! the tool.
//!
//! Approved, the handler runs exactly once and its
//! [`CallContext::approved`] is true (the call is recorded as approved;
//! nothing behind the handler rules it again).
//! Declined, cancelled, unanswered within the timeout (default
//! [`DEFAULT_APPROVAL_TIMEOUT`]), or a client that cannot ask: a
//! [`DeniedResult`] saying why, and the handler never runs.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis_catalog::ToolResult;
use portcullis_catalog::fingerprint::canonical_json;
use portcullis_catalog::policy::DeniedResult;
use portcullis_catalog::redact::{is_invisible, visible};
use rmcp::ErrorData;
use rmcp::model::{
    BooleanSchema, ClientCapabilities, ClientResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, PrimitiveSchemaDefinition, ProtocolVersion, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::handler::CallContext;

/// How long the person has to answer, by default.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

/// The key of the approval form among an `InputRequiredResult`'s input
/// requests (and of the answer among the retry's input responses).
pub const APPROVAL_INPUT_KEY: &str = "portcullis_approval";

/// The boolean field of the approval form.
pub const APPROVE_FIELD: &str = "approve";

/// Who refused, in the denied result: the person, or the policy that wanted
/// a person's answer and got none.
const BY_USER: &str = "the user";
const BY_POLICY: &str = "policy";

/// Approvals asked by 2026-07-28 round trips and not answered yet, at most;
/// one more is refused rather than letting unanswered questions grow the
/// process without bound.
const MAX_PENDING: usize = 1024;

/// The longest rendering of the arguments in a question, in characters:
/// enough for the arguments of most calls in full, short enough for a
/// client's dialog. Past it the question says how much is not shown.
pub const SHOWN_BUDGET: usize = 2000;

/// What the person (or the lack of one) decided.
pub(crate) enum Verdict {
    /// Run the handler, marked approved.
    Approved,
    /// Do not run it; answer this denied result.
    Refused(ToolResult),
    /// Answer the 2026-07-28 client with this and wait for its retry.
    InputRequired(InputRequiredResult),
}

/// The MRTR fields of the call being decided (empty on a first attempt).
#[derive(Default)]
pub(crate) struct Retry {
    pub(crate) input_responses: Option<InputResponses>,
    pub(crate) request_state: Option<String>,
}

/// One question asked by round trip and not answered yet.
struct Pending<P> {
    tool: String,
    args: [u8; 32],
    deadline: Instant,
    /// A call parked behind the client's input (`None`: an approval).
    parked: Option<P>,
}

/// The approval state of one tool server (shared by every clone and every
/// stateless request). `P` is a call parked behind its client's input
/// (the input module's run), held here until its retry claims it; dropping
/// one cancels it.
pub(crate) struct Approvals<P> {
    timeout: Duration,
    /// Shared with the timers that cancel parked calls not resumed.
    pending: Arc<Mutex<HashMap<String, Pending<P>>>>,
    ids: Ids,
}

impl<P: Send + 'static> Approvals<P> {
    pub(crate) fn new(timeout: Duration) -> Self {
        Approvals {
            timeout,
            pending: Arc::new(Mutex::new(HashMap::new())),
            ids: Ids::default(),
        }
    }

    /// Asks the person at the client whether `tool` may run with `args`.
    /// `Err` only for a retry whose `requestState` this server cannot
    /// honour (forged, replayed, or for other arguments).
    pub(crate) async fn decide(
        &self,
        tool: &str,
        title: Option<&str>,
        args: &Value,
        ctx: &CallContext,
        retry: Retry,
    ) -> Result<Verdict, ErrorData> {
        let Some(request) = ctx.request() else {
            return Ok(refused(
                tool,
                BY_POLICY,
                "it needs the user's approval, and this call has no client to ask",
            ));
        };
        let modern = request
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let capabilities = request.client_capabilities();
        if modern {
            return self.round_trip(tool, title, args, capabilities.as_ref(), retry);
        }
        if !asks_forms(capabilities.as_ref()) {
            return Ok(cannot_ask(tool));
        }
        Ok(self.elicit(tool, title, args, ctx).await)
    }

    /// The initialize era: an `elicitation/create` request on the call's
    /// session, bounded by the timeout and by the call's own cancellation.
    async fn elicit(
        &self,
        tool: &str,
        title: Option<&str>,
        args: &Value,
        ctx: &CallContext,
    ) -> Verdict {
        let question = ServerRequest::ElicitRequest(ElicitRequest::new(form(tool, title, args)));
        // A call the server answers in front of rmcp asks on its own stream;
        // one rmcp serves asks through the session's peer.
        let answer: futures::future::BoxFuture<'static, Result<ClientResult, ServiceError>> =
            if let Some(direct) = ctx.client_requests() {
                direct.send(question, Some(self.timeout))
            } else {
                let Some(peer) = ctx.peer() else {
                    return cannot_ask(tool);
                };
                match peer
                    .send_request_with_option(
                        question,
                        PeerRequestOptions::with_timeout(self.timeout),
                    )
                    .await
                {
                    Ok(handle) => Box::pin(handle.await_response()),
                    Err(error) => {
                        tracing::debug!(tool, %error, "approval request not sent");
                        return cannot_ask(tool);
                    }
                }
            };
        let answer = tokio::select! {
            answer = answer => answer,
            () = ctx.cancelled() => {
                return Verdict::Refused(
                    DeniedResult::new(tool, BY_POLICY, "the call was cancelled before the user answered")
                        .to_tool_result(),
                );
            }
        };
        match answer {
            Ok(ClientResult::ElicitResult(result)) => judge(tool, &result),
            Ok(_) => unreadable(tool),
            Err(ServiceError::Timeout { .. }) => timed_out(tool, self.timeout),
            Err(error) => {
                // A client that answers the request with an error (method
                // not found, a UI that failed) could not ask the person.
                tracing::debug!(tool, %error, "approval request failed");
                cannot_ask(tool)
            }
        }
    }

    /// The 2026-07-28 round trip: ask with an `InputRequiredResult`, judge
    /// the retry.
    fn round_trip(
        &self,
        tool: &str,
        title: Option<&str>,
        args: &Value,
        capabilities: Option<&ClientCapabilities>,
        retry: Retry,
    ) -> Result<Verdict, ErrorData> {
        let digest = digest(args);
        let Some(state) = retry.request_state else {
            // A first attempt (stray input responses without a state are
            // ignored: there is nothing they could answer).
            if !asks_forms(capabilities) {
                return Ok(cannot_ask(tool));
            }
            let deadline = Instant::now() + self.timeout;
            return Ok(self.ask(tool, title, args, digest, deadline));
        };
        let pending = self.take(&state).ok_or_else(|| {
            ErrorData::invalid_params(
                "requestState is not an approval this server is waiting for (unknown, already used, or altered)",
                None,
            )
        })?;
        if pending.tool != tool || pending.args != digest {
            return Err(ErrorData::invalid_params(
                "requestState belongs to another call: the tool or its arguments changed since the user was asked",
                None,
            ));
        }
        if Instant::now() > pending.deadline {
            return Ok(timed_out(tool, self.timeout));
        }
        let answer = retry
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get(APPROVAL_INPUT_KEY));
        match answer {
            // The retry did not carry the answer: ask again, same deadline.
            None => Ok(self.ask(tool, title, args, digest, pending.deadline)),
            Some(value) => match serde_json::from_value::<ElicitResult>(value.clone()) {
                Ok(result) => Ok(judge(tool, &result)),
                Err(_) => Ok(unreadable(tool)),
            },
        }
    }

    /// Records a question and returns the result that asks it.
    fn ask(
        &self,
        tool: &str,
        title: Option<&str>,
        args: &Value,
        digest: [u8; 32],
        deadline: Instant,
    ) -> Verdict {
        let id = self.ids.next();
        {
            let mut pending = lock(&self.pending);
            if pending.len() >= MAX_PENDING {
                // Keep an expired question one more timeout, so a late
                // answer is told it came too late rather than "unknown".
                let now = Instant::now();
                let keep = self.timeout;
                pending.retain(|_, p| p.deadline + keep > now);
            }
            if pending.len() >= MAX_PENDING {
                return Verdict::Refused(
                    DeniedResult::new(
                        tool,
                        BY_POLICY,
                        "it needs the user's approval, and too many approvals are already waiting for an answer",
                    )
                    .to_tool_result(),
                );
            }
            pending.insert(
                id.clone(),
                Pending {
                    tool: tool.to_owned(),
                    args: digest,
                    deadline,
                    parked: None,
                },
            );
        }
        let mut requests = InputRequests::new();
        requests.insert(
            APPROVAL_INPUT_KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(form(tool, title, args))),
        );
        Verdict::InputRequired(InputRequiredResult::new(Some(requests), Some(id)))
    }

    /// Takes the approval `state` names (never a parked call: those are
    /// claimed before the policy runs, see [`Approvals::claim`]).
    fn take(&self, state: &str) -> Option<Pending<P>> {
        let mut pending = lock(&self.pending);
        if pending.get(state).is_some_and(|p| p.parked.is_some()) {
            return None;
        }
        pending.remove(state)
    }

    /// What a retry's `requestState` names: a call parked for input (taken,
    /// to be resumed), an approval (`None`, left for [`Approvals::decide`]),
    /// or nothing this server is waiting for, or a parked call of another
    /// tool or other arguments (`-32602`; a swapped state leaves the call
    /// parked for its own client).
    pub(crate) fn claim(
        &self,
        state: &str,
        tool: &str,
        args: &Value,
    ) -> Result<Option<P>, ErrorData> {
        let mut pending = lock(&self.pending);
        let Some(entry) = pending.get(state) else {
            return Err(ErrorData::invalid_params(
                "requestState is not a call or approval this server is waiting for (unknown, already used, expired, or altered)",
                None,
            ));
        };
        if entry.parked.is_none() {
            return Ok(None);
        }
        if entry.tool != tool || entry.args != digest(args) {
            return Err(ErrorData::invalid_params(
                "requestState belongs to another call: the tool or its arguments changed since the input was asked for",
                None,
            ));
        }
        Ok(pending.remove(state).and_then(|p| p.parked))
    }

    /// Parks a call behind its client's input for at most the approval
    /// timeout and returns the handle; after that the call is dropped,
    /// which cancels it. Handed back when too many already wait.
    pub(crate) fn park(&self, tool: &str, args: &Value, parked: P) -> Result<String, P> {
        let id = self.ids.next();
        let now = Instant::now();
        {
            let mut pending = lock(&self.pending);
            if pending.len() >= MAX_PENDING {
                let keep = self.timeout;
                pending.retain(|_, p| p.deadline + keep > now);
            }
            if pending.len() >= MAX_PENDING {
                return Err(parked);
            }
            pending.insert(
                id.clone(),
                Pending {
                    tool: tool.to_owned(),
                    args: digest(args),
                    deadline: now + self.timeout,
                    parked: Some(parked),
                },
            );
        }
        let table = Arc::downgrade(&self.pending);
        let timeout = self.timeout;
        let handle = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let expired = table
                .upgrade()
                .and_then(|table| lock(&table).remove(&handle));
            if expired.is_some() {
                tracing::debug!(
                    "a call parked for its client's input was not resumed in time; cancelled"
                );
            }
            // Dropping it cancels the call (a parked run cancels on drop).
            drop(expired);
        });
        Ok(id)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The map stays consistent across a panic elsewhere (every change is
    // one insert or remove), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether the client can show a form: it declared `elicitation`, with
/// `form` or with no mode at all (which means form, for older clients).
fn asks_forms(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The approval form: one boolean, `approve`, off unless the person turns
/// it on.
fn form(tool: &str, title: Option<&str>, args: &Value) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .required_property(
            APPROVE_FIELD,
            PrimitiveSchemaDefinition::Boolean(
                BooleanSchema::new()
                    .title("Approve")
                    .description(format!("Let {tool} run with these arguments"))
                    .with_default(false),
            ),
        )
        .build_unchecked();
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: approval_message(tool, title, args),
        requested_schema: schema,
    }
}

/// The question the person reads: the policy's title if it gave one, the
/// qualified tool, and the arguments the call will carry
/// ([`summarize_arguments`]).
///
/// ```
/// use portcullis_server::approval::approval_message;
///
/// let message = approval_message("files__write", None, &serde_json::json!({"path": "a.txt"}));
/// assert_eq!(message, "Allow the tool \"files__write\" to run? Arguments: path=\"a.txt\"");
/// ```
pub fn approval_message(tool: &str, title: Option<&str>, args: &Value) -> String {
    let mut message = String::new();
    if let Some(title) = title {
        message.push_str(&visible(&truncate(title, 80)));
        message.push_str(". ");
    }
    message.push_str(&format!("Allow the tool \"{tool}\" to run?"));
    let summary = summarize_arguments(args);
    if summary.is_empty() {
        message.push_str(" No arguments.");
    } else {
        message.push_str(" Arguments: ");
        message.push_str(&summary);
    }
    message
}

/// The arguments of a call as the person approving it must see them: every
/// value the upstream will receive, nothing hidden or summarised away.
///
/// Top-level keys in order as `key=value` (a key outside `[A-Za-z0-9_.-]`
/// is quoted), each value as JSON. Strings are JSON-quoted, and every
/// character that would not show as itself (control characters, line
/// breaks, terminal escapes, bidirectional overrides, zero-width
/// characters) is written as a `\uXXXX` or `\n` escape, so the model
/// cannot make the question say something other than what the call
/// carries. Past [`SHOWN_BUDGET`] characters the rest is cut (never inside
/// an escape) and the question says how many characters were not shown and
/// gives the first 16 hex digits of the SHA-256 of the whole arguments'
/// canonical JSON, which the person can check against what they expect.
///
/// Credentials are not masked: whatever the model put in the call goes to
/// the upstream if approved, so the person must see it to decide.
///
/// ```
/// use portcullis_server::approval::summarize_arguments;
/// use serde_json::json;
///
/// let summary = summarize_arguments(&json!({
///     "path": "notes.txt",
///     "api_key": "sk-live-0123456789",
///     "lines": [1, 2, 3],
///     "note": "line one\nline two \u{202e}",
///     "force": true
/// }));
/// assert_eq!(
///     summary,
///     r#"path="notes.txt", api_key="sk-live-0123456789", lines=[1,2,3], note="line one\nline two \u202e", force=true"#
/// );
/// ```
pub fn summarize_arguments(args: &Value) -> String {
    let rendered = match args {
        Value::Null => return String::new(),
        Value::Object(object) => object
            .iter()
            .map(|(key, value)| format!("{}={}", shown_key(key), shown_json(value)))
            .collect::<Vec<_>>()
            .join(", "),
        other => shown_json(other),
    };
    let (kept, rest) = cut_at_escape_boundary(&rendered, SHOWN_BUDGET);
    if rest == 0 {
        return rendered;
    }
    let digest = digest(args);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{kept}… ({rest} more characters not shown; sha256 of the full arguments begins {hex})")
}

/// A key as written when it is plain, else quoted like a value.
fn shown_key(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if plain {
        key.to_owned()
    } else {
        shown_json(&Value::String(key.to_owned()))
    }
}

/// `value` as compact JSON with every invisible character escaped: JSON
/// escapes control characters below U+0020 itself; DEL, C1 controls and
/// format characters become `\uXXXX` (all of them are in the BMP), which
/// is still the same JSON.
fn shown_json(value: &Value) -> String {
    let json = value.to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_invisible(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The first `budget` characters of `text` without splitting a JSON escape
/// (`\x` or `\uXXXX`: a backslash occurs only inside JSON strings, always
/// starting one), and how many characters are left out.
fn cut_at_escape_boundary(text: &str, budget: usize) -> (&str, usize) {
    let total = text.chars().count();
    if total <= budget {
        return (text, 0);
    }
    let mut chars = text.char_indices();
    let mut taken = 0;
    let mut end = 0;
    while let Some((at, c)) = chars.next() {
        let unit = if c == '\\' {
            match chars.next() {
                Some((_, 'u')) => {
                    for _ in 0..4 {
                        chars.next();
                    }
                    6
                }
                _ => 2,
            }
        } else {
            1
        };
        if taken + unit > budget {
            end = at;
            break;
        }
        taken += unit;
        end = chars.clone().next().map_or(text.len(), |(next, _)| next);
    }
    (&text[..end], total - taken)
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The person's answer: only an accepted form with `approve: true` runs
/// the call.
fn judge(tool: &str, result: &ElicitResult) -> Verdict {
    let reason = match result.action {
        ElicitationAction::Accept => {
            let approved = result
                .content
                .as_ref()
                .and_then(|c| c.get(APPROVE_FIELD))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if approved {
                return Verdict::Approved;
            }
            "the user did not approve it"
        }
        ElicitationAction::Decline => "the user declined it",
        ElicitationAction::Cancel => "the user dismissed the approval request without answering",
        // An action this version does not know cannot be an approval.
        _ => "the client answered in a way that is not an approval",
    };
    Verdict::Refused(DeniedResult::new(tool, BY_USER, reason).to_tool_result())
}

fn refused(tool: &str, by: &str, reason: &str) -> Verdict {
    Verdict::Refused(DeniedResult::new(tool, by, reason).to_tool_result())
}

fn cannot_ask(tool: &str) -> Verdict {
    refused(
        tool,
        BY_POLICY,
        "it needs the user's approval, and the client cannot ask the user (it did not declare the elicitation capability, or has no session to ask on)",
    )
}

fn unreadable(tool: &str) -> Verdict {
    refused(
        tool,
        BY_POLICY,
        "it needs the user's approval, and the client's answer could not be read",
    )
}

fn timed_out(tool: &str, timeout: Duration) -> Verdict {
    let reason = format!(
        "it needs the user's approval, and no answer came within {}",
        human(timeout)
    );
    refused(tool, BY_POLICY, &reason)
}

fn human(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// What the person saw: a digest of the arguments in canonical form, so a
/// retry with other arguments (or the same ones in another key order —
/// harmless, and accepted) is recognised.
fn digest(args: &Value) -> [u8; 32] {
    Sha256::digest(canonical_json(args).as_bytes()).into()
}

/// Unguessable handles for pending approvals: a keyed SipHash over a
/// counter, keyed from the OS's randomness through `RandomState`. The
/// handle carries nothing; it only has to be impossible to guess, and the
/// state it names stays in this process.
struct Ids {
    key: std::collections::hash_map::RandomState,
    counter: AtomicU64,
}

impl Default for Ids {
    fn default() -> Self {
        Ids {
            key: std::collections::hash_map::RandomState::new(),
            counter: AtomicU64::new(0),
        }
    }
}

impl Ids {
    fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let high = self.key.hash_one((n, 0u8));
        let low = self.key.hash_one((n, 1u8));
        format!("approval-{high:016x}{low:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_value_the_upstream_receives_is_shown() {
        let args = json!({
            "Authorization": "Basic abc",
            "note": "sk-live-1234567890abcdef",
            "api_key": "hunter2",
            "path": "/srv/you/some/really/long/path/to/file/0123456789abcdef.txt",
            "lines": [1, 2, {"deep": "sk-nested-0123456789"}],
            "n": 3
        });
        let summary = summarize_arguments(&args);
        assert_eq!(
            summary,
            r#"Authorization="Basic abc", note="sk-live-1234567890abcdef", api_key="hunter2", path="/srv/you/some/really/long/path/to/file/0123456789abcdef.txt", lines=[1,2,{"deep":"sk-nested-0123456789"}], n=3"#
        );
        assert!(!summary.contains("<hidden>"));
    }

    #[test]
    fn invisible_characters_cannot_forge_the_question() {
        let value = "a\" , approve=true\nAllow? yes\r\u{1b}[2K\u{202e}txt.exe\u{85}\u{200b}\u{7f}";
        let summary = summarize_arguments(&json!({ "q": value, "bad key\n": 1 }));
        assert!(!summary.chars().any(is_invisible), "{summary:?}");
        for escape in [
            "\\n", "\\r", "\\u001b", "\\u202e", "\\u0085", "\\u200b", "\\u007f",
        ] {
            assert!(summary.contains(escape), "{escape}: {summary}");
        }
        // The shown value is JSON that reads back as exactly what is sent.
        let shown = summary
            .strip_prefix("q=")
            .and_then(|s| s.split(", \"bad key").next())
            .expect("q first");
        assert_eq!(
            serde_json::from_str::<Value>(shown).expect("JSON"),
            json!(value)
        );
        assert!(summary.ends_with(r#""bad key\n"=1"#), "{summary}");
        assert_eq!(summarize_arguments(&json!({})), "");
        assert_eq!(
            approval_message("t", Some("Approve\ntool: t"), &json!({})),
            "Approve\\ntool: t. Allow the tool \"t\" to run? No arguments."
        );
    }

    #[test]
    fn long_arguments_say_how_much_is_not_shown_and_give_a_digest() {
        let body = "x".repeat(5000);
        let args = json!({"path": "a.txt", "content": body});
        let summary = summarize_arguments(&args);
        let full = format!("path=\"a.txt\", content=\"{body}\"")
            .chars()
            .count();
        let hex: String = digest(&args)[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(
            summary.ends_with(&format!(
                "… ({} more characters not shown; sha256 of the full arguments begins {hex})",
                full - SHOWN_BUDGET
            )),
            "{summary}"
        );
        assert!(summary.starts_with("path=\"a.txt\", content=\"xxx"));
        // A cut never splits an escape.
        let summary = summarize_arguments(&json!("\u{202e}".repeat(1000)));
        let kept = summary.split('…').next().expect("kept");
        assert!(kept.ends_with("\\u202e"), "{kept}");
        assert_eq!(kept.chars().count(), 1 + (SHOWN_BUDGET - 1) / 6 * 6);
    }

    #[test]
    fn only_an_accepted_true_approves() {
        let accept =
            |content: Value| ElicitResult::new(ElicitationAction::Accept).with_content(content);
        assert!(matches!(
            judge("t", &accept(json!({"approve": true}))),
            Verdict::Approved
        ));
        for refused in [
            accept(json!({"approve": false})),
            accept(json!({"approve": "yes"})),
            accept(json!({})),
            ElicitResult::new(ElicitationAction::Accept),
            ElicitResult::new(ElicitationAction::Decline),
            ElicitResult::new(ElicitationAction::Cancel),
        ] {
            assert!(matches!(judge("t", &refused), Verdict::Refused(_)));
        }
    }

    #[test]
    fn handles_are_distinct() {
        let ids = Ids::default();
        let a = ids.next();
        let b = ids.next();
        assert_ne!(a, b);
        assert_eq!(a.len(), "approval-".len() + 32);
    }

    #[test]
    fn forms_are_asked_only_of_clients_that_can_show_them() {
        use rmcp::model::{ElicitationCapability, UrlElicitationCapability};
        let mut capabilities = ClientCapabilities::default();
        assert!(!asks_forms(Some(&capabilities)));
        assert!(!asks_forms(None));
        capabilities.elicitation = Some(ElicitationCapability::new());
        assert!(asks_forms(Some(&capabilities)));
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_url(UrlElicitationCapability::default()));
        assert!(!asks_forms(Some(&capabilities)));
    }
}
