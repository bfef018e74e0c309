//! Observing every call the gateway serves: one log line, the metrics, and
//! one audit record each — time, identity, qualified tool, the gate's
//! decision, duration, outcome and the *shape* of the arguments (keys and
//! JSON types, never values).
//!
//! Two places see a call. The served surface ([`crate::reload::LiveTools`])
//! sees all of them, with their timing and how the edge answered; the
//! handler behind the name sees what the source said — for an upstream tool
//! [`crate::gateway`]'s `forward` (whether the policy asked, the call was
//! cancelled or the upstream failed, which the edge folds into one
//! `ERR_TOOL_FAILED`), for a native plugin's or an app's tool
//! [`crate::sources`]' handler. The handler runs inside the surface's task,
//! so it leaves that verdict in a task-local slot ([`note`],
//! [`note_verdict`]) that the surface reads back once the call is answered;
//! every source kind is recorded the same way, under its source's name.
//! `portcullis call` makes its one call inside the same slot and writes its
//! record directly ([`audit_record`]).
//!
//! The audit record is the store's [`AuditRecord`], written through the
//! gateway's one store ([`crate::gateway::Gateway::store`], `Store::audit()`):
//! the trail is where the baselines are, whatever the backend. Its argument
//! shape is taken with the store's [`ArgumentShape::of`] before the
//! arguments move on to the upstream, so no value is ever held for the
//! trail.
//!
//! Recording never slows a call down: the audit record goes through a
//! bounded channel to one writer task, and when the store cannot keep up
//! records are dropped (and counted in the log), not queued without bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use portcullis_catalog::ToolResult;
use portcullis_catalog::error_mapping::codes;
use portcullis_server::ToolError;
use portcullis_store::Store;
use portcullis_store::audit::{ArgumentShape, AuditDecision, AuditOutcome, AuditRecord};
use portcullis_upstream::CallError;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use crate::metrics::{Metrics, Outcome};

/// What the gate decided about a call (the audit trail's `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every guard let it through to the upstream (or to the catalogue, for
    /// `mcp__describe_tool`).
    Allowed,
    /// The policy asked, the person at the client approved, and the call
    /// went through.
    Approved,
    /// Refused by the exposure gate or the policy: an unknown or withheld
    /// name, a denial, a missing permission.
    Denied,
    /// The policy asked for a person's approval, which could not be had.
    Declined,
    /// The tool's definition drifted since it was trusted.
    Quarantined,
    /// The arguments failed validation.
    Invalid,
}

impl Decision {
    /// The store's name for it.
    pub fn to_store(self) -> AuditDecision {
        match self {
            Decision::Allowed => AuditDecision::Allowed,
            Decision::Approved => AuditDecision::Approved,
            Decision::Denied => AuditDecision::Denied,
            Decision::Declined => AuditDecision::Declined,
            Decision::Quarantined => AuditDecision::Quarantined,
            Decision::Invalid => AuditDecision::Invalid,
        }
    }

    /// The name in logs and the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Approved => "approved",
            Decision::Denied => "denied",
            Decision::Declined => "declined",
            Decision::Quarantined => "quarantined",
            Decision::Invalid => "invalid",
        }
    }
}

tokio::task_local! {
    static VERDICT: Arc<Mutex<Option<Verdict>>>;
}

/// What the toolset said about a call, left by the forwarding handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The gate's decision.
    pub decision: Decision,
    /// How the call ended.
    pub outcome: Outcome,
    /// The error code the edge gives the client, for failures.
    pub code: Option<String>,
}

/// Called by the forwarding handler with the toolset's answer (`approved`:
/// the person at the client approved this call at the edge): leaves the
/// verdict for the surface observing this call. Outside an observed call
/// it does nothing.
pub fn note(answer: &Result<ToolResult, CallError>, approved: bool) {
    note_verdict(classify(answer).approved_if(approved));
}

/// Leaves `verdict` for the surface observing this call (a source tool's
/// handler, which knows better than the edge what happened). Outside an
/// observed call it does nothing.
pub fn note_verdict(verdict: Verdict) {
    let _ = VERDICT.try_with(|slot| {
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(verdict);
    });
}

/// Runs `call` with a slot for the forwarding handler's verdict; returns
/// the call's output and the verdict, if the handler was reached.
pub async fn with_verdict<F: std::future::Future>(call: F) -> (F::Output, Option<Verdict>) {
    let slot = Arc::new(Mutex::new(None));
    let output = VERDICT.scope(slot.clone(), call).await;
    let verdict = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    (output, verdict)
}

impl Verdict {
    /// The same verdict, `Approved` rather than `Allowed` when the person
    /// at the client approved the call.
    pub fn approved_if(mut self, approved: bool) -> Verdict {
        if approved && self.decision == Decision::Allowed {
            self.decision = Decision::Approved;
        }
        self
    }
}

/// The verdict on a toolset answer.
pub fn classify(answer: &Result<ToolResult, CallError>) -> Verdict {
    match answer {
        Ok(result) => classify_result(result),
        Err(CallError::ApprovalRequired { .. }) => declined(),
        Err(CallError::Cancelled { .. }) => Verdict {
            decision: Decision::Allowed,
            outcome: Outcome::Cancelled,
            code: Some(codes::ERR_TOOL_FAILED.to_owned()),
        },
        Err(_) => failed(codes::ERR_TOOL_FAILED),
    }
}

/// The verdict on a result a tool (or the gate in front of it) answered
/// with.
pub fn classify_result(result: &ToolResult) -> Verdict {
    answered(
        result.is_error,
        result.structured_content.as_ref(),
        result.text_blocks().next().unwrap_or_default(),
    )
}

/// The verdict on a result as the edge served it, for a call the
/// forwarding handler never saw (the edge refused it itself: validation,
/// approval, the identity backstop).
pub fn classify_served(result: &rmcp::model::CallToolResult) -> Verdict {
    let first_text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str())
        .unwrap_or_default();
    answered(
        result.is_error == Some(true),
        result.structured_content.as_ref(),
        first_text,
    )
}

/// The gate's own refusals are error results too; they are told apart by
/// what only the gate writes: a denial's structured marker (and who denied),
/// a validation failure's or an identity refusal's code.
fn answered(is_error: bool, structured: Option<&Value>, first_text: &str) -> Verdict {
    if !is_error {
        return Verdict {
            decision: Decision::Allowed,
            outcome: Outcome::Ok,
            code: None,
        };
    }
    let denied = structured.filter(|s| s.get("__denied") == Some(&Value::Bool(true)));
    let decision = match denied {
        Some(denial) => {
            let by = denial
                .get("deniedBy")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let message = denial
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or(first_text);
            if by.starts_with(DRIFT_GUARD) {
                Decision::Quarantined
            } else if by == "the user" || message.contains(APPROVAL_REFUSED) {
                // The person said no, did not answer in time, or could not
                // be asked.
                Decision::Declined
            } else {
                Decision::Denied
            }
        }
        None if first_text.starts_with(codes::ERR_INVALID_ARGUMENTS) => Decision::Invalid,
        None if first_text.starts_with(codes::ERR_MCP_AUTH_REQUIRED)
            || first_text.starts_with(codes::ERR_MCP_PERM_DENIED) =>
        {
            Decision::Denied
        }
        None => Decision::Allowed,
    };
    Verdict {
        decision,
        outcome: if decision == Decision::Allowed {
            Outcome::ToolError
        } else {
            Outcome::Refused
        },
        code: None,
    }
}

/// Who a quarantine refusal says denied the call
/// (`portcullis_catalog::drift::quarantine_denial`).
const DRIFT_GUARD: &str = "MCP tool-drift guard";

/// What the edge's refusals for want of approval say (timed out, no way to
/// ask, an unreadable answer): `portcullis_server::approval`.
const APPROVAL_REFUSED: &str = "needs the user's approval";

/// The verdict on a source tool's answer (a native plugin's command, an
/// app's route): its results read like any tool's; a failure is the
/// handler's, except the refusal of a call that needed approval it did not
/// have.
pub fn classify_source(answer: &Result<ToolResult, ToolError>) -> Verdict {
    match answer {
        Ok(result) => classify_result(result),
        Err(error) if error.to_string().contains(NEEDS_APPROVAL) => declined(),
        Err(error) => {
            // The handler's own `ERR_…` code when it gave one (a timeout, an
            // unreachable app), else the one the edge maps it to.
            let message = error.to_string();
            let code = message
                .split(':')
                .next()
                .filter(|c| {
                    c.starts_with("ERR_") && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                })
                .unwrap_or(codes::ERR_TOOL_FAILED);
            failed(code)
        }
    }
}

/// The phrase a source tool's refusal for want of approval carries (see
/// `crate::sources`).
pub const NEEDS_APPROVAL: &str = "needs approval first";

fn declined() -> Verdict {
    Verdict {
        decision: Decision::Declined,
        outcome: Outcome::Refused,
        code: Some(codes::ERR_TOOL_FAILED.to_owned()),
    }
}

fn failed(code: &str) -> Verdict {
    Verdict {
        decision: Decision::Allowed,
        outcome: Outcome::Failed,
        code: Some(code.to_owned()),
    }
}

/// Where observed calls go: metrics always, the log line always, the audit
/// trail when a store writer is attached.
pub struct Recorder {
    metrics: Arc<Metrics>,
    identity: Option<String>,
    trail: Option<Trail>,
    dropped: AtomicU64,
}

/// The writer task's inbox, and the store it writes to (swapped when a
/// reload brings a gateway with another store).
struct Trail {
    inbox: mpsc::Sender<TrailMessage>,
    store: watch::Sender<Arc<dyn Store>>,
}

/// How many records may wait for the store before new ones are dropped.
pub const TRAIL_CAPACITY: usize = 4096;

impl Recorder {
    /// A recorder feeding `metrics`; `identity` is the user id calls are
    /// made as.
    pub fn new(metrics: Arc<Metrics>, identity: Option<String>) -> Self {
        Recorder {
            metrics,
            identity,
            trail: None,
            dropped: AtomicU64::new(0),
        }
    }

    /// Writes every record to `store`'s audit trail as well: the gateway's
    /// own store (`Gateway::store`), so the trail lands where baselines and
    /// catalogues do, whatever the backend (with `store = "memory"` too).
    /// Records are written by one task, in order, off the request path.
    pub fn with_trail(mut self, store: Arc<dyn Store>) -> Self {
        let (store, watched) = watch::channel(store);
        self.trail = Some(Trail {
            inbox: spawn_writer(watched),
            store,
        });
        self
    }

    /// Points the trail at `store` from now on, if it is another store
    /// (a reload swapped in a gateway built on a new one). Records already
    /// queued may land in either.
    pub fn follow_store(&self, store: &Arc<dyn Store>) {
        if let Some(trail) = &self.trail {
            trail.store.send_if_modified(|current| {
                let other = !Arc::ptr_eq(current, store);
                if other {
                    *current = store.clone();
                }
                other
            });
        }
    }

    /// The metrics this recorder feeds.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether records go to an audit trail (so the argument shape is worth
    /// computing).
    pub fn keeps_trail(&self) -> bool {
        self.trail.is_some()
    }

    /// Records one call: `shape` is the arguments' shape when
    /// [`Recorder::keeps_trail`] (computed before the arguments moved on);
    /// `caller` the subject of the request's access token, when the surface
    /// authenticated one (it is the identity recorded, in place of the
    /// configured one).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        time: SystemTime,
        caller: Option<&str>,
        upstream: &str,
        tool: &str,
        verdict: Verdict,
        duration: Duration,
        shape: Option<ArgumentShape>,
    ) {
        self.metrics
            .record(upstream, tool, verdict.outcome, duration);
        log_call(upstream, tool, &verdict, duration);
        let (Some(trail), Some(shape)) = (&self.trail, shape) else {
            return;
        };
        let identity = caller.map(str::to_owned).or_else(|| self.identity.clone());
        let record = audit_record(time, identity, tool, verdict, duration, shape);
        if trail.inbox.try_send(TrailMessage::Record(record)).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // One line per thousand, not one per call, when the store lags.
            if dropped % 1000 == 1 {
                tracing::warn!(
                    dropped,
                    "the audit trail cannot keep up with the calls; records dropped"
                );
            }
        }
    }

    /// Waits until every record sent so far is written (at shutdown).
    pub async fn flush(&self) {
        let Some(trail) = &self.trail else { return };
        let (done, written) = oneshot::channel();
        if trail.inbox.send(TrailMessage::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// The `tool call` log line: one per call, never an argument value.
pub fn log_call(upstream: &str, tool: &str, verdict: &Verdict, duration: Duration) {
    // Whole milliseconds, as the audit record keeps them: a float here
    // printed `duration_ms=0.0079…`, noise for a person and a collector.
    let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    tracing::info!(
        target: "portcullis::call",
        upstream,
        tool,
        decision = verdict.decision.as_str(),
        outcome = verdict.outcome.as_str(),
        duration_ms,
        "tool call"
    );
}

/// The store's record of one call. `shape` was taken with
/// [`ArgumentShape::of`] (the store's own helper), so it holds no value.
pub fn audit_record(
    time: SystemTime,
    identity: Option<String>,
    tool: &str,
    verdict: Verdict,
    duration: Duration,
    shape: ArgumentShape,
) -> AuditRecord {
    AuditRecord {
        time,
        identity,
        tool: tool.to_owned(),
        decision: verdict.decision.to_store(),
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        outcome: match verdict.outcome {
            Outcome::Ok => AuditOutcome::Ok,
            // The gate's refusals reach the client as error results.
            Outcome::ToolError | Outcome::Refused => AuditOutcome::ToolError,
            Outcome::Failed | Outcome::Cancelled => AuditOutcome::Failed {
                code: verdict
                    .code
                    .unwrap_or_else(|| codes::ERR_TOOL_FAILED.to_owned()),
            },
        },
        argument_shape: shape,
    }
}

/// The user id calls are made as (`[gateway] identity`'s `userId`, or
/// `id`), for the audit trail.
pub fn identity(config: &crate::config::Config) -> Option<String> {
    let user = &config.gateway.identity.as_ref()?.user;
    user.get("userId")
        .or_else(|| user.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What the trail's writer task receives.
#[derive(Debug)]
pub enum TrailMessage {
    /// A record to write.
    Record(AuditRecord),
    /// Answered once everything before it is written.
    Flush(oneshot::Sender<()>),
}

/// The task writing audit records to the store `store` holds at the time
/// of each record; returns its inbox.
fn spawn_writer(store: watch::Receiver<Arc<dyn Store>>) -> mpsc::Sender<TrailMessage> {
    let (sender, mut inbox) = mpsc::channel::<TrailMessage>(TRAIL_CAPACITY);
    tokio::spawn(async move {
        let mut failures = 0u64;
        while let Some(message) = inbox.recv().await {
            let record = match message {
                TrailMessage::Record(record) => record,
                TrailMessage::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            let target = store.borrow().clone();
            if let Err(error) = target.audit().record(&record).await {
                failures += 1;
                if failures % 1000 == 1 {
                    tracing::warn!(%error, failures, "an audit record could not be written");
                }
            }
        }
    });
    sender
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_catalog::policy::DeniedResult;

    #[test]
    fn toolset_answers_are_classified() {
        let ok = classify(&Ok(ToolResult::text("fine")));
        assert_eq!((ok.decision, ok.outcome), (Decision::Allowed, Outcome::Ok));
        let error = classify(&Ok(ToolResult::error_text("upstream said no")));
        assert_eq!(
            (error.decision, error.outcome),
            (Decision::Allowed, Outcome::ToolError)
        );
        let denied = classify(&Ok(
            DeniedResult::new("t", "policy", "not today").to_tool_result()
        ));
        assert_eq!(
            (denied.decision, denied.outcome),
            (Decision::Denied, Outcome::Refused)
        );
        let invalid = classify(&Ok(ToolResult::error_text(
            "ERR_INVALID_ARGUMENTS: text is required",
        )));
        assert_eq!(invalid.decision, Decision::Invalid);
        let asked = classify(&Err(CallError::ApprovalRequired {
            tool: "t".into(),
            title: String::new(),
        }));
        assert_eq!(
            (asked.decision, asked.outcome),
            (Decision::Declined, Outcome::Refused)
        );
        let gone = classify(&Err(CallError::Unavailable { server: "s".into() }));
        assert_eq!(gone.outcome, Outcome::Failed);
        assert_eq!(gone.code.as_deref(), Some("ERR_TOOL_FAILED"));
    }

    #[test]
    fn the_gates_refusals_are_told_apart() {
        let quarantined = classify_result(
            &portcullis_catalog::drift::quarantine_denial("s__t", "s", "t").to_tool_result(),
        );
        assert_eq!(
            (quarantined.decision, quarantined.outcome),
            (Decision::Quarantined, Outcome::Refused)
        );
        let declined = classify_result(
            &DeniedResult::new("t", "the user", "the user declined it").to_tool_result(),
        );
        assert_eq!(declined.decision, Decision::Declined);
        // The edge's refusal when nobody answered in time says "policy" but
        // is a declined approval, not a policy denial.
        let unanswered = classify_result(
            &DeniedResult::new(
                "t",
                "policy",
                "it needs the user's approval, and no answer came within 1 s",
            )
            .to_tool_result(),
        );
        assert_eq!(unanswered.decision, Decision::Declined);
        let unknown_user = classify_result(&ToolResult::error_text(
            "ERR_MCP_PERM_DENIED: missing permission",
        ));
        assert_eq!(unknown_user.decision, Decision::Denied);
    }

    #[test]
    fn source_answers_are_classified() {
        let ok = classify_source(&Ok(ToolResult::text("fine")));
        assert_eq!(ok.outcome, Outcome::Ok);
        let asked = classify_source(&Err(ToolError::msg(format!(
            "ERR_TOOL_FAILED: tool \"t\" {NEEDS_APPROVAL}: Allow t?"
        ))));
        assert_eq!(
            (asked.decision, asked.outcome),
            (Decision::Declined, Outcome::Refused)
        );
        let slow = classify_source(&Err(ToolError::msg("ERR_TIMEOUT: no answer in 5 s")));
        assert_eq!(
            (slow.outcome, slow.code.as_deref()),
            (Outcome::Failed, Some("ERR_TIMEOUT"))
        );
        let broken = classify_source(&Err(ToolError::msg("exit status 3")));
        assert_eq!(broken.code.as_deref(), Some("ERR_TOOL_FAILED"));
    }

    #[test]
    fn an_audit_record_holds_the_shape_only() {
        let args = serde_json::json!({"path": "/srv/ana/taxes.pdf", "n": 2});
        let record = audit_record(
            SystemTime::UNIX_EPOCH,
            Some("agent".into()),
            "files__read",
            Verdict {
                decision: Decision::Allowed,
                outcome: Outcome::Failed,
                code: Some("ERR_TIMEOUT".into()),
            },
            Duration::from_millis(1500),
            ArgumentShape::of(&args),
        );
        assert_eq!(record.duration_ms, 1500);
        assert_eq!(record.outcome.code(), Some("ERR_TIMEOUT"));
        assert_eq!(
            record.argument_shape.as_value(),
            &serde_json::json!({"n": "integer", "path": "string"})
        );
    }

    #[tokio::test]
    async fn a_verdict_left_inside_the_scope_is_read_back() {
        let (value, verdict) = with_verdict(async {
            note(&Ok(ToolResult::text("x")), true);
            7
        })
        .await;
        assert_eq!(value, 7);
        assert_eq!(
            verdict.map(|v| (v.decision, v.outcome)),
            Some((Decision::Approved, Outcome::Ok))
        );
        let (_, none) = with_verdict(async {}).await;
        assert_eq!(none, None);
        // Outside any scope, noting is harmless.
        note(&Ok(ToolResult::text("x")), false);
    }
}
