//! Whether a tool only reads, and who said so.
//!
//! A server's `readOnlyHint` is a claim, not a fact: a server can call a
//! destructive tool read-only and have it exposed without `allow_write` and
//! run without the approval `approval = "writes"` asks for. The catalogue
//! therefore decides each tool's classification once, from what the operator
//! declared first and the server's claim second, writes the decision into the
//! definition every later stage reads (`readOnlyHint` of the entry), and
//! records where it came from ([`ClassifiedBy`]) for `tools` to show.
//!
//! The rules, in order, for a tool of a server with [`Classification`] `c`:
//! 1. named in `c.writes` (bare or qualified): a write, by the operator;
//! 2. named in `c.read_only`: read-only, by the operator;
//! 3. `c.trust_claims` is off: a write, by the operator (the server's claims
//!    are not taken);
//! 4. the server claims `readOnlyHint: true` and does not also claim
//!    `destructiveHint: true`: read-only, as the server claimed. The claim is
//!    part of the definition fingerprinted at first trust, so a server that
//!    changes it later is quarantined like any other drift;
//! 5. anything else: a write.
//!
//! ```
//! use portcullis_catalog::classification::{Classification, ClassifiedBy};
//! use portcullis_catalog::{Tool, ToolAnnotations};
//!
//! let claims_read_only = Tool::new("delete_repo").with_annotations(ToolAnnotations::read_only(true));
//! let trusting = Classification::default();
//! assert_eq!(trusting.classify(&claims_read_only, "gh__delete_repo"), (true, ClassifiedBy::Server));
//! let operator = Classification { writes: vec!["delete_repo".into()], ..Classification::default() };
//! assert_eq!(operator.classify(&claims_read_only, "gh__delete_repo"), (false, ClassifiedBy::Operator));
//! ```

use serde::Serialize;

use crate::tool::{Tool, ToolAnnotations};

/// The operator's word on one source's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// Tools declared read-only, by bare or qualified name.
    pub read_only: Vec<String>,
    /// Tools declared writes, by bare or qualified name; wins over
    /// `read_only`.
    pub writes: Vec<String>,
    /// Whether the server's own `readOnlyHint` counts for the tools neither
    /// list names. Off: every such tool is a write.
    pub trust_claims: bool,
}

impl Default for Classification {
    fn default() -> Self {
        Classification {
            read_only: Vec::new(),
            writes: Vec::new(),
            trust_claims: true,
        }
    }
}

/// Where a tool's read-only or write classification came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifiedBy {
    /// The operator's config (`read_only`, `writes`, `trust_annotations`).
    Operator,
    /// The server's own annotations, pinned at first trust.
    Server,
}

impl ClassifiedBy {
    /// The word `tools` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassifiedBy::Operator => "operator",
            ClassifiedBy::Server => "server",
        }
    }
}

impl Classification {
    /// Whether `tool` (projected as `projected`) only reads, and who said
    /// so. See the module docs for the rules.
    pub fn classify(&self, tool: &Tool, projected: &str) -> (bool, ClassifiedBy) {
        let named = |list: &[String]| list.iter().any(|n| n == &tool.name || n == projected);
        if named(&self.writes) {
            return (false, ClassifiedBy::Operator);
        }
        if named(&self.read_only) {
            return (true, ClassifiedBy::Operator);
        }
        if !self.trust_claims {
            return (false, ClassifiedBy::Operator);
        }
        let claims = tool.annotations.as_ref();
        let destructive = claims.and_then(|a| a.destructive_hint) == Some(true);
        (tool.is_read_only() && !destructive, ClassifiedBy::Server)
    }

    /// Classifies `tool` and writes the decision into its `readOnlyHint`,
    /// the one field every later stage (exposure, policy, the model) reads.
    pub fn apply(&self, tool: &mut Tool, projected: &str) -> ClassifiedBy {
        let (read_only, by) = self.classify(tool, projected);
        record(tool, read_only);
        by
    }
}

/// Writes a decision made by [`Classification::classify`] into `tool`'s
/// `readOnlyHint` (left as it is when it already says so).
pub(crate) fn record(tool: &mut Tool, read_only: bool) {
    if tool.is_read_only() != read_only {
        tool.annotations
            .get_or_insert_with(ToolAnnotations::default)
            .read_only_hint = Some(read_only);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claiming(read_only: Option<bool>, destructive: Option<bool>) -> Tool {
        Tool::new("wipe").with_annotations(ToolAnnotations {
            read_only_hint: read_only,
            destructive_hint: destructive,
            ..ToolAnnotations::default()
        })
    }

    #[test]
    fn the_operator_wins_over_the_server() {
        let c = Classification {
            read_only: vec!["srv__wipe".into()],
            writes: vec![],
            trust_claims: true,
        };
        assert_eq!(
            c.classify(&claiming(Some(false), None), "srv__wipe"),
            (true, ClassifiedBy::Operator)
        );
        let c = Classification {
            read_only: vec!["wipe".into()],
            writes: vec!["wipe".into()],
            trust_claims: true,
        };
        // Both lists: the stricter one.
        assert_eq!(
            c.classify(&claiming(Some(true), None), "srv__wipe"),
            (false, ClassifiedBy::Operator)
        );
    }

    #[test]
    fn claims_count_only_when_trusted_and_consistent() {
        let trusting = Classification::default();
        assert_eq!(
            trusting.classify(&claiming(Some(true), None), "wipe"),
            (true, ClassifiedBy::Server)
        );
        // Read-only and destructive at once is no read-only claim.
        assert_eq!(
            trusting.classify(&claiming(Some(true), Some(true)), "wipe"),
            (false, ClassifiedBy::Server)
        );
        assert_eq!(
            trusting.classify(&Tool::new("wipe"), "wipe"),
            (false, ClassifiedBy::Server)
        );
        let distrusting = Classification {
            trust_claims: false,
            ..Classification::default()
        };
        assert_eq!(
            distrusting.classify(&claiming(Some(true), None), "wipe"),
            (false, ClassifiedBy::Operator)
        );
    }

    #[test]
    fn apply_writes_the_decision_into_the_definition() {
        let c = Classification {
            writes: vec!["wipe".into()],
            ..Classification::default()
        };
        let mut tool = claiming(Some(true), None);
        assert_eq!(c.apply(&mut tool, "wipe"), ClassifiedBy::Operator);
        assert!(!tool.is_read_only());
        let c = Classification {
            read_only: vec!["wipe".into()],
            ..Classification::default()
        };
        let mut tool = Tool::new("wipe");
        c.apply(&mut tool, "wipe");
        assert!(tool.is_read_only());
    }
}
