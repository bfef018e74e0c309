//! The gate: what happens to one call before any handler runs, decided once
//! and returned as a value.
//!
//! [`Gate::rule`] takes what a surface knows about a call (the tool, its
//! definition, the arguments as normalised, the compiled validator, whether
//! the caller's identity may use it) and rules in one fixed order:
//!
//! 1. the identity backstop (a tool that needs an identity or a permission
//!    the caller lacks is refused with its `ERR_…` code),
//! 2. argument validation (problems answered to the model, nothing runs),
//! 3. the policy: allow, deny, or ask the person at the client.
//!
//! The ruling is a [`Ruling`]; what finally happened to the call is a
//! [`CallDecision`], which the audit trail and the metrics record. Both are
//! types, never message text: rewording a refusal cannot change what the
//! trail says.
//!
//! ```
//! use portcullis_catalog::gate::{CallDecision, Gate, GateCall, Ruling};
//! use portcullis_catalog::{ArgumentValidator, Decision, PolicyRequest, Tool};
//! use serde_json::json;
//!
//! let tool = Tool::new("rm").with_input_schema(json!({
//!     "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]
//! }));
//! let validator = ArgumentValidator::compile("rm", tool.input_schema.as_ref().unwrap()).unwrap();
//! let policy = |_: &PolicyRequest<'_>| Decision::Ask { title: None };
//! let gate = Gate::new(Some(&policy));
//!
//! let empty = json!({});
//! let call = GateCall { tool: "rm", definition: &tool, arguments: &empty, validator: Some(&validator), backstop: Ok(()) };
//! match gate.rule(&call) {
//!     Ruling::Refuse { decision, .. } => assert_eq!(decision, CallDecision::Invalid),
//!     other => panic!("{other:?}"),
//! }
//! let root = json!({"path": "/"});
//! let call = GateCall { arguments: &root, ..call };
//! assert!(matches!(gate.rule(&call), Ruling::Ask { .. }));
//! ```

use serde_json::Value;

use crate::policy::{Decision, DeniedResult, Policy, PolicyRequest};
use crate::result::ToolResult;
use crate::tool::Tool;
use crate::validation::ArgumentValidator;

/// What finally happened to one call at the gate: the audit trail's
/// decision and the metrics' label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallDecision {
    /// Every guard let it through to the handler (or to the catalogue, for
    /// `mcp__describe_tool`).
    Allowed,
    /// The policy asked, the person at the client approved, and the call
    /// went through.
    Approved,
    /// Refused by the exposure gate, the identity backstop or the policy:
    /// an unknown or withheld name, a denial, a missing permission.
    Denied,
    /// The policy asked for a person's approval, which could not be had
    /// (declined, unanswered in time, or no way to ask).
    Declined,
    /// The tool's definition drifted since it was trusted.
    Quarantined,
    /// The arguments failed validation.
    Invalid,
}

impl CallDecision {
    /// Every decision, in declaration order.
    pub const ALL: [CallDecision; 6] = [
        CallDecision::Allowed,
        CallDecision::Approved,
        CallDecision::Denied,
        CallDecision::Declined,
        CallDecision::Quarantined,
        CallDecision::Invalid,
    ];

    /// The decision [`CallDecision::as_str`] names (as the audit trail
    /// stores it).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == text)
    }

    /// The name in logs, metrics and the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            CallDecision::Allowed => "allowed",
            CallDecision::Approved => "approved",
            CallDecision::Denied => "denied",
            CallDecision::Declined => "declined",
            CallDecision::Quarantined => "quarantined",
            CallDecision::Invalid => "invalid",
        }
    }

    /// Whether the call was let through to its handler.
    pub fn ran(self) -> bool {
        matches!(self, CallDecision::Allowed | CallDecision::Approved)
    }
}

impl std::fmt::Display for CallDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a call ended, as logs, metrics and the audit trail name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallOutcome {
    /// The tool answered with a result.
    Ok,
    /// The tool answered, with `isError: true`.
    ToolError,
    /// The gate refused the call before any tool saw it (unknown or
    /// withheld name, quarantine, policy, invalid arguments, no approval).
    Refused,
    /// The tool could not answer: unavailable, transport failure, timeout.
    Failed,
    /// The caller cancelled the call.
    Cancelled,
}

impl CallOutcome {
    /// Every outcome, in exposition order.
    pub const ALL: [CallOutcome; 5] = [
        CallOutcome::Ok,
        CallOutcome::ToolError,
        CallOutcome::Refused,
        CallOutcome::Failed,
        CallOutcome::Cancelled,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::Refused => "refused",
            CallOutcome::Failed => "failed",
            CallOutcome::Cancelled => "cancelled",
        }
    }

    /// Whether it counts as an error.
    pub fn is_error(self) -> bool {
        self != CallOutcome::Ok
    }
}

/// What the gate and the handler made of one call: produced where the call
/// is answered, recorded by whoever observes calls (the audit trail, the
/// metrics, the log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallReport {
    /// What the gate decided.
    pub decision: CallDecision,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// The `ERR_…` code the caller was given, for failures.
    pub code: Option<String>,
}

impl CallReport {
    /// A call the gate refused, recorded as `decision`.
    pub fn refused(decision: CallDecision) -> Self {
        CallReport {
            decision,
            outcome: CallOutcome::Refused,
            code: None,
        }
    }
}

/// What the gate knows about one call.
#[derive(Debug, Clone, Copy)]
pub struct GateCall<'a> {
    /// The qualified name the call was made under.
    pub tool: &'a str,
    /// The tool's definition as the model sees it (what the policy is shown).
    pub definition: &'a Tool,
    /// The arguments, normalised (`validation::normalize_arguments`).
    pub arguments: &'a Value,
    /// The tool's compiled validator; `None` when its schema is served
    /// unchecked.
    pub validator: Option<&'a ArgumentValidator>,
    /// The identity backstop's answer: `Err(code)` when the caller lacks the
    /// identity or a permission the tool needs.
    pub backstop: Result<(), &'static str>,
}

/// The gate's ruling on one call, before any handler runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Ruling {
    /// Run the handler.
    Run,
    /// Ask the person at the client first; run only when they approve.
    Ask {
        /// The policy's title for the question, if it gave one.
        title: Option<String>,
    },
    /// Never run: answer with `answer`, recorded as `decision`.
    Refuse {
        /// Why, as the trail records it.
        decision: CallDecision,
        /// What the model is told (written by the gate, no tool output).
        answer: ToolResult,
    },
}

/// The one gate a call passes: pure, no I/O; built per surface around its
/// policy.
#[derive(Clone, Copy)]
pub struct Gate<'a> {
    policy: Option<&'a dyn Policy>,
}

impl std::fmt::Debug for Gate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("policy", &self.policy.is_some())
            .finish()
    }
}

impl<'a> Gate<'a> {
    /// A gate around `policy` (`None`: every call that passes the backstop
    /// and validation runs).
    pub fn new(policy: Option<&'a dyn Policy>) -> Self {
        Gate { policy }
    }

    /// Rules on `call`: backstop, validation, policy, in that order.
    pub fn rule(&self, call: &GateCall<'_>) -> Ruling {
        if let Err(code) = call.backstop {
            return Ruling::Refuse {
                decision: CallDecision::Denied,
                answer: ToolResult::error_text(code),
            };
        }
        if let Some(validator) = call.validator
            && let Err(problems) = validator.validate(call.arguments)
        {
            return Ruling::Refuse {
                decision: CallDecision::Invalid,
                answer: problems.to_tool_result(),
            };
        }
        let Some(policy) = self.policy else {
            return Ruling::Run;
        };
        let request = PolicyRequest {
            tool_name: call.tool,
            args: call.arguments,
            def: Some(call.definition),
            needs_approval: false,
        };
        match policy.decide(&request) {
            Decision::Allow => Ruling::Run,
            Decision::Deny { reason } => Ruling::Refuse {
                decision: CallDecision::Denied,
                answer: DeniedResult::new(call.tool, "policy", &reason).to_tool_result(),
            },
            Decision::Ask { title } => Ruling::Ask { title },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_mapping::codes;
    use serde_json::json;

    fn tool() -> Tool {
        Tool::new("t").with_input_schema(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))
    }

    #[test]
    fn the_backstop_comes_before_validation_and_policy() {
        let tool = tool();
        let validator =
            ArgumentValidator::compile("t", tool.input_schema.as_ref().unwrap()).unwrap();
        let deny = |_: &PolicyRequest<'_>| Decision::Deny {
            reason: "no".into(),
        };
        let call = GateCall {
            tool: "t",
            definition: &tool,
            arguments: &json!({}),
            validator: Some(&validator),
            backstop: Err(codes::ERR_MCP_PERM_DENIED),
        };
        match Gate::new(Some(&deny)).rule(&call) {
            Ruling::Refuse { decision, answer } => {
                assert_eq!(decision, CallDecision::Denied);
                assert_eq!(
                    answer.text_blocks().next(),
                    Some(codes::ERR_MCP_PERM_DENIED)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_arguments_never_reach_the_policy() {
        let tool = tool();
        let validator =
            ArgumentValidator::compile("t", tool.input_schema.as_ref().unwrap()).unwrap();
        let asked = std::sync::atomic::AtomicBool::new(false);
        let policy = |_: &PolicyRequest<'_>| {
            asked.store(true, std::sync::atomic::Ordering::SeqCst);
            Decision::Allow
        };
        let call = GateCall {
            tool: "t",
            definition: &tool,
            arguments: &json!({"n": "x"}),
            validator: Some(&validator),
            backstop: Ok(()),
        };
        assert!(matches!(
            Gate::new(Some(&policy)).rule(&call),
            Ruling::Refuse {
                decision: CallDecision::Invalid,
                ..
            }
        ));
        assert!(!asked.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn the_policy_rules_last_and_its_denial_is_typed() {
        let tool = tool();
        let deny = |_: &PolicyRequest<'_>| Decision::Deny {
            reason: "off".into(),
        };
        let call = GateCall {
            tool: "t",
            definition: &tool,
            arguments: &json!({"n": 1}),
            validator: None,
            backstop: Ok(()),
        };
        assert!(matches!(
            Gate::new(Some(&deny)).rule(&call),
            Ruling::Refuse {
                decision: CallDecision::Denied,
                ..
            }
        ));
        assert_eq!(Gate::new(None).rule(&call), Ruling::Run);
    }

    #[test]
    fn every_decision_reads_back_from_its_name() {
        for decision in CallDecision::ALL {
            assert_eq!(CallDecision::parse(decision.as_str()), Some(decision));
        }
        assert_eq!(CallDecision::parse("ALLOWED"), None);
    }

    #[test]
    fn only_allowed_and_approved_calls_ran() {
        assert!(CallDecision::Allowed.ran());
        assert!(CallDecision::Approved.ran());
        for refused in [
            CallDecision::Denied,
            CallDecision::Declined,
            CallDecision::Quarantined,
            CallDecision::Invalid,
        ] {
            assert!(!refused.ran(), "{}", refused.as_str());
        }
    }
}
