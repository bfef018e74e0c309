//! Observing every call the gateway serves: one log line, the metrics, and
//! one audit record each — time, identity, qualified tool, the gate's
//! decision, duration, outcome and the *shape* of the arguments (keys and
//! JSON types, never values).
//!
//! Two places see a call. The served surface ([`crate::reload::LiveTools`])
//! sees all of them, with their timing and how the edge answered; the
//! handler that forwards to the toolset ([`crate::gateway`]'s `forward`)
//! sees what the toolset said — whether the policy asked, the call was
//! cancelled or the upstream failed — which the edge folds into one
//! `ERR_TOOL_FAILED`. The handler runs inside the surface's task, so it
//! leaves that verdict in a task-local slot ([`note`]) that the surface
//! reads back once the call is answered.
//!
//! The audit record is the store's [`AuditRecord`]: its argument shape is
//! taken with [`ArgumentShape::of`] before the arguments move on to the
//! upstream, so no value is ever held for the trail.
//!
//! Recording never slows a call down: the audit record goes through a
//! bounded channel to one writer task, and when the store cannot keep up
//! records are dropped (and counted in the log), not queued without bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use portcullis_catalog::ToolResult;
use portcullis_catalog::error_mapping::codes;
use portcullis_store::Store;
use portcullis_store::audit::{ArgumentShape, AuditDecision, AuditOutcome, AuditRecord};
use portcullis_upstream::CallError;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::{Metrics, Outcome};

/// What the gate decided about a call (the audit trail's `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every guard let it through to the upstream (or to the catalogue, for
    /// `mcp__describe_tool`).
    Allowed,
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

/// Called by the forwarding handler with the toolset's answer: leaves the
/// verdict for the surface observing this call. Outside an observed call
/// (`portcullis call`) it does nothing.
pub fn note(answer: &Result<ToolResult, CallError>) {
    let verdict = classify(answer);
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

/// The verdict on a toolset answer.
pub fn classify(answer: &Result<ToolResult, CallError>) -> Verdict {
    let failed = |code: &str| Verdict {
        decision: Decision::Allowed,
        outcome: Outcome::Failed,
        code: Some(code.to_owned()),
    };
    match answer {
        Ok(result) if !result.is_error => Verdict {
            decision: Decision::Allowed,
            outcome: Outcome::Ok,
            code: None,
        },
        Ok(result) => {
            // The toolset's own refusals are error results too; they are
            // told apart by what only the toolset writes: a denial's
            // structured marker, a validation failure's code.
            let denied = result
                .structured_content
                .as_ref()
                .filter(|s| s.get("__denied") == Some(&Value::Bool(true)));
            let first_text = result.text_blocks().next().unwrap_or_default();
            let decision = match denied {
                Some(d) if d.get("deniedBy").and_then(Value::as_str) == Some("policy") => {
                    Decision::Denied
                }
                Some(_) => Decision::Quarantined,
                None if first_text.starts_with(codes::ERR_INVALID_ARGUMENTS) => Decision::Invalid,
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
        Err(CallError::ApprovalRequired { .. }) => Verdict {
            decision: Decision::Declined,
            outcome: Outcome::Refused,
            code: Some(codes::ERR_TOOL_FAILED.to_owned()),
        },
        Err(CallError::Cancelled { .. }) => Verdict {
            decision: Decision::Allowed,
            outcome: Outcome::Cancelled,
            code: Some(codes::ERR_TOOL_FAILED.to_owned()),
        },
        Err(_) => failed(codes::ERR_TOOL_FAILED),
    }
}

/// Where observed calls go: metrics always, the log line always, the audit
/// trail when a store writer is attached.
pub struct Recorder {
    metrics: Arc<Metrics>,
    identity: Option<String>,
    trail: Option<mpsc::Sender<TrailMessage>>,
    dropped: AtomicU64,
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

    /// Sends every record to `trail` as well (see [`spawn_writer`]).
    pub fn with_trail(mut self, trail: mpsc::Sender<TrailMessage>) -> Self {
        self.trail = Some(trail);
        self
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
    /// [`Recorder::keeps_trail`] (computed before the arguments moved on).
    pub fn record(
        &self,
        time: SystemTime,
        upstream: &str,
        tool: &str,
        verdict: Verdict,
        duration: Duration,
        shape: Option<ArgumentShape>,
    ) {
        self.metrics
            .record(upstream, tool, verdict.outcome, duration);
        let duration_ms = duration.as_secs_f64() * 1000.0;
        tracing::info!(
            target: "portcullis::call",
            upstream,
            tool,
            decision = verdict.decision.as_str(),
            outcome = verdict.outcome.as_str(),
            duration_ms,
            "tool call"
        );
        let (Some(trail), Some(shape)) = (&self.trail, shape) else {
            return;
        };
        let record = AuditRecord {
            time,
            identity: self.identity.clone(),
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
        };
        if trail.try_send(TrailMessage::Record(record)).is_err() {
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
}

impl Recorder {
    /// Waits until every record sent so far is written (at shutdown).
    pub async fn flush(&self) {
        let Some(trail) = &self.trail else { return };
        let (done, written) = oneshot::channel();
        if trail.send(TrailMessage::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// What the trail's writer task receives.
#[derive(Debug)]
pub enum TrailMessage {
    /// A record to write.
    Record(AuditRecord),
    /// Answered once everything before it is written.
    Flush(oneshot::Sender<()>),
}

/// Attaches the audit trail of the store `config` names: records are
/// written by one task, in order, off the request path. A store that cannot
/// be opened leaves the trail off (said once in the log); calls still run.
pub async fn attach_trail(recorder: Recorder, config: &crate::config::Config) -> Recorder {
    match crate::trust::open_store(config).await {
        Ok(store) => recorder.with_trail(spawn_writer(store)),
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "no audit trail: the store cannot be opened");
            recorder
        }
    }
}

/// The task writing audit records to `store`; returns its inbox.
pub fn spawn_writer(store: Arc<dyn Store>) -> mpsc::Sender<TrailMessage> {
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
            if let Err(error) = store.audit().record(&record).await {
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

    #[tokio::test]
    async fn a_verdict_left_inside_the_scope_is_read_back() {
        let (value, verdict) = with_verdict(async {
            note(&Ok(ToolResult::text("x")));
            7
        })
        .await;
        assert_eq!(value, 7);
        assert_eq!(verdict.map(|v| v.outcome), Some(Outcome::Ok));
        let (_, none) = with_verdict(async {}).await;
        assert_eq!(none, None);
        // Outside any scope, noting is harmless.
        note(&Ok(ToolResult::text("x")));
    }
}
