//! Observing every call the gateway serves: one log line, the metrics, and
//! one audit record each — time, identity, qualified tool, the gate's
//! decision, duration, outcome and the *shape* of the arguments (keys and
//! JSON types, never values).
//!
//! What happened to a call is a value, never words read back: the tool
//! server answers every `tools/call` with a [`CallReport`]
//! (`ToolServer::call_tool_reported`), whose decision comes from the gate
//! (`portcullis_catalog::gate`), the approval round trip, or a guard behind
//! the handler that refused with a typed `ToolError::refused` (a toolset's
//! quarantine of a tool that drifted mid-session). The served tool server
//! hands that report to the [`Recorder`] (through `crate::reload`'s call
//! observer);
//! `portcullis call` writes its one record directly ([`audit_record`]).
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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use portcullis_catalog::error_mapping::codes;
use portcullis_catalog::gate::{CallOutcome, CallReport};
use portcullis_store::Store;
use portcullis_store::audit::{ArgumentShape, AuditOutcome, AuditRecord};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use crate::metrics::Metrics;

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
        report: CallReport,
        duration: Duration,
        shape: Option<ArgumentShape>,
    ) {
        self.metrics
            .record(upstream, tool, report.outcome, duration);
        log_call(upstream, tool, &report, duration);
        let (Some(trail), Some(shape)) = (&self.trail, shape) else {
            return;
        };
        let identity = caller.map(str::to_owned).or_else(|| self.identity.clone());
        let record = audit_record(time, identity, tool, report, duration, shape);
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
pub fn log_call(upstream: &str, tool: &str, report: &CallReport, duration: Duration) {
    // Whole milliseconds, as the audit record keeps them: a float here
    // printed `duration_ms=0.0079…`, noise for a person and a collector.
    let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    tracing::info!(
        target: "portcullis::call",
        upstream,
        tool,
        decision = report.decision.as_str(),
        outcome = report.outcome.as_str(),
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
    report: CallReport,
    duration: Duration,
    shape: ArgumentShape,
) -> AuditRecord {
    AuditRecord {
        time,
        identity,
        tool: tool.to_owned(),
        decision: report.decision,
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        outcome: match report.outcome {
            CallOutcome::Ok => AuditOutcome::Ok,
            // The gate's refusals reach the client as error results.
            CallOutcome::ToolError | CallOutcome::Refused => AuditOutcome::ToolError,
            CallOutcome::Failed | CallOutcome::Cancelled => AuditOutcome::Failed {
                code: report
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
    use portcullis_catalog::gate::CallDecision;

    #[test]
    fn an_audit_record_holds_the_shape_only() {
        let args = serde_json::json!({"path": "/srv/ana/taxes.pdf", "n": 2});
        let record = audit_record(
            SystemTime::UNIX_EPOCH,
            Some("agent".into()),
            "files__read",
            CallReport {
                decision: CallDecision::Allowed,
                outcome: CallOutcome::Failed,
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
}
