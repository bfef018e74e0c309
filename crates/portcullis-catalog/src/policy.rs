//! Policy: the only approval gate for whether a visible tool may run.
//!
//! `decide` sees the tool's qualified name, its arguments and its definition
//! and answers allow, ask or deny. Annotations such as `readOnlyHint` are
//! never consulted here: a malicious server can advertise a destructive tool
//! as read-only. A denied call never reaches its source; the model receives a
//! [`DeniedResult`] it can explain to the user.
//!
//! Policies are synchronous: a decision is a pure function of the request.
//! Asking a person is not the policy's job — it answers `ask`, and the surface
//! that can reach the person does the asking.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::result::ToolResult;
use crate::tool::Tool;

/// What a policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Decision {
    /// Run it.
    Allow,
    /// Ask the person at the client first.
    Ask {
        /// What to show them; defaults to `Approve tool: <name>`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// Refuse it.
    Deny {
        /// Why, in words the model can relay.
        reason: String,
    },
}

impl Decision {
    /// A denial with `reason`.
    pub fn deny(reason: impl Into<String>) -> Self {
        Decision::Deny {
            reason: reason.into(),
        }
    }

    /// The title to show for an `ask`, or `None` for other decisions.
    pub fn ask_title(&self, tool_name: &str) -> Option<String> {
        match self {
            Decision::Ask { title } => Some(
                title
                    .clone()
                    .unwrap_or_else(|| format!("Approve tool: {tool_name}")),
            ),
            _ => None,
        }
    }
}

/// One call, as a policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    /// The qualified name the model called.
    pub tool_name: &'a str,
    /// The arguments it passed.
    pub args: &'a Value,
    /// The tool's definition, when known.
    pub def: Option<&'a Tool>,
    /// Whether the tool's owner marked it as needing approval.
    pub needs_approval: bool,
}

impl<'a> PolicyRequest<'a> {
    /// A request for `tool_name` with `args` and nothing else known.
    pub fn new(tool_name: &'a str, args: &'a Value) -> Self {
        PolicyRequest {
            tool_name,
            args,
            def: None,
            needs_approval: false,
        }
    }
}

/// Decides, per call, whether it may run.
///
/// Any `Fn(&PolicyRequest) -> Decision` is a policy:
///
/// ```
/// use portcullis_catalog::policy::{Decision, Policy, PolicyRequest};
/// use serde_json::json;
///
/// let no_deletes = |req: &PolicyRequest<'_>| {
///     if req.tool_name.ends_with("__delete") { Decision::deny("deleting is off") } else { Decision::Allow }
/// };
/// let args = json!({});
/// assert_eq!(no_deletes.decide(&PolicyRequest::new("files__delete", &args)), Decision::deny("deleting is off"));
/// ```
pub trait Policy: Send + Sync {
    /// The decision for one call.
    fn decide(&self, request: &PolicyRequest<'_>) -> Decision;
}

impl<F> Policy for F
where
    F: Fn(&PolicyRequest<'_>) -> Decision + Send + Sync,
{
    fn decide(&self, request: &PolicyRequest<'_>) -> Decision {
        self(request)
    }
}

/// Allows everything: the default when no policy is configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn decide(&self, _request: &PolicyRequest<'_>) -> Decision {
        Decision::Allow
    }
}

/// Denies the listed tools to a read-only agent; asks for tools that need
/// approval; allows the rest. See [`read_only_policy`].
#[derive(Debug, Clone, Default)]
pub struct ReadOnlyPolicy {
    denied: BTreeSet<String>,
}

impl Policy for ReadOnlyPolicy {
    fn decide(&self, request: &PolicyRequest<'_>) -> Decision {
        if self.denied.contains(request.tool_name) {
            Decision::deny(format!(
                "{} is not available to a read-only agent.",
                request.tool_name
            ))
        } else if request.needs_approval {
            Decision::Ask { title: None }
        } else {
            Decision::Allow
        }
    }
}

/// A policy that denies each listed (qualified) tool name.
///
/// ```
/// use portcullis_catalog::policy::{read_only_policy, Decision, Policy, PolicyRequest};
/// use serde_json::json;
///
/// let policy = read_only_policy(["payments__charge_card"]);
/// let args = json!({});
/// assert!(matches!(policy.decide(&PolicyRequest::new("payments__charge_card", &args)), Decision::Deny { .. }));
/// assert_eq!(policy.decide(&PolicyRequest::new("payments__list", &args)), Decision::Allow);
/// ```
pub fn read_only_policy<I, S>(denied: I) -> ReadOnlyPolicy
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    ReadOnlyPolicy {
        denied: denied.into_iter().map(Into::into).collect(),
    }
}

/// Several policies as one: the first `deny` wins; otherwise any `ask` asks
/// (with the last ask's title); otherwise allow.
#[derive(Default)]
pub struct ComposedPolicy {
    policies: Vec<Box<dyn Policy>>,
}

impl ComposedPolicy {
    /// Adds a policy at the end.
    pub fn with(mut self, policy: impl Policy + 'static) -> Self {
        self.policies.push(Box::new(policy));
        self
    }
}

impl Policy for ComposedPolicy {
    fn decide(&self, request: &PolicyRequest<'_>) -> Decision {
        let mut ask: Option<Decision> = None;
        for policy in &self.policies {
            match policy.decide(request) {
                deny @ Decision::Deny { .. } => return deny,
                Decision::Ask { title } => {
                    let keep = match (ask.take(), title) {
                        (_, Some(title)) => Some(title),
                        (Some(Decision::Ask { title }), None) => title,
                        _ => None,
                    };
                    ask = Some(Decision::Ask { title: keep });
                }
                Decision::Allow => {}
            }
        }
        ask.unwrap_or(Decision::Allow)
    }
}

/// Composes policies: see [`ComposedPolicy`].
pub fn compose_policies(policies: Vec<Box<dyn Policy>>) -> ComposedPolicy {
    ComposedPolicy { policies }
}

/// What the model receives for a refused call: a shape it can act on.
///
/// Serialises as `{"__denied":true,"toolName":…,"deniedBy":…,"message":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeniedResult {
    /// Always true; lets a client recognise the shape.
    #[serde(rename = "__denied")]
    pub denied: bool,
    /// The tool that was refused.
    pub tool_name: String,
    /// Who refused it (`policy`, a guard, a person).
    pub denied_by: String,
    /// The sentence the model reads.
    pub message: String,
}

impl DeniedResult {
    /// A denial of `tool_name` by `denied_by` for `reason`.
    ///
    /// ```
    /// use portcullis_catalog::DeniedResult;
    ///
    /// let d = DeniedResult::new("files__rm", "policy", "deleting is off");
    /// assert_eq!(
    ///     d.message,
    ///     "The \"files__rm\" action was not approved by policy. Reason: deleting is off. Tell the user it was declined; do not retry it."
    /// );
    /// ```
    pub fn new(tool_name: &str, denied_by: &str, reason: &str) -> Self {
        DeniedResult {
            denied: true,
            tool_name: tool_name.to_owned(),
            denied_by: denied_by.to_owned(),
            message: format!(
                "The \"{tool_name}\" action was not approved by {denied_by}. Reason: {reason}. Tell the user it was declined; do not retry it."
            ),
        }
    }

    /// As an MCP result: the message as text, the shape as structured
    /// content, `isError: true`.
    pub fn to_tool_result(&self) -> ToolResult {
        let mut result = ToolResult::error_text(self.message.clone());
        result.structured_content = Some(json!({
            "__denied": true,
            "toolName": self.tool_name,
            "deniedBy": self.denied_by,
            "message": self.message,
        }));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolAnnotations;

    fn args() -> Value {
        json!({"path": "/etc/passwd"})
    }

    #[test]
    fn read_only_policy_ignores_annotations() {
        let policy = read_only_policy(["files__write"]);
        let lying = Tool::new("write").with_annotations(ToolAnnotations::read_only(true));
        let args = args();
        let request = PolicyRequest {
            tool_name: "files__write",
            args: &args,
            def: Some(&lying),
            needs_approval: false,
        };
        assert_eq!(
            policy.decide(&request),
            Decision::deny("files__write is not available to a read-only agent.")
        );
        let honest_write = Tool::new("read").with_annotations(ToolAnnotations::read_only(false));
        let request = PolicyRequest {
            tool_name: "files__read",
            args: &args,
            def: Some(&honest_write),
            needs_approval: false,
        };
        assert_eq!(policy.decide(&request), Decision::Allow);
    }

    #[test]
    fn read_only_policy_asks_when_approval_is_needed() {
        let policy = read_only_policy(Vec::<String>::new());
        let args = args();
        let request = PolicyRequest {
            needs_approval: true,
            ..PolicyRequest::new("files__move", &args)
        };
        let decision = policy.decide(&request);
        assert_eq!(decision, Decision::Ask { title: None });
        assert_eq!(
            decision.ask_title("files__move").as_deref(),
            Some("Approve tool: files__move")
        );
    }

    #[test]
    fn composition_first_deny_wins_then_any_ask() {
        let args = args();
        let req = PolicyRequest::new("t", &args);
        let ask = |title: &'static str| {
            move |_: &PolicyRequest<'_>| Decision::Ask {
                title: Some(title.into()),
            }
        };
        let composed = ComposedPolicy::default()
            .with(ask("first"))
            .with(|_: &PolicyRequest<'_>| Decision::deny("one"))
            .with(|_: &PolicyRequest<'_>| Decision::deny("two"));
        assert_eq!(composed.decide(&req), Decision::deny("one"));
        let composed = ComposedPolicy::default()
            .with(ask("first"))
            .with(AllowAll)
            .with(ask("last"));
        assert_eq!(
            composed.decide(&req),
            Decision::Ask {
                title: Some("last".into())
            }
        );
        let composed = compose_policies(vec![Box::new(AllowAll), Box::new(AllowAll)]);
        assert_eq!(composed.decide(&req), Decision::Allow);
        assert_eq!(ComposedPolicy::default().decide(&req), Decision::Allow);
    }

    #[test]
    fn denied_result_shape() {
        let denied = DeniedResult::new("stub__write", "policy", "no writes");
        let json = serde_json::to_value(&denied).unwrap();
        assert_eq!(json["__denied"], true);
        assert_eq!(json["toolName"], "stub__write");
        assert_eq!(json["deniedBy"], "policy");
        let result = denied.to_tool_result();
        assert!(result.is_error);
        assert_eq!(result.text_blocks().next(), Some(denied.message.as_str()));
        assert_eq!(result.structured_content.unwrap()["__denied"], true);
    }
}
