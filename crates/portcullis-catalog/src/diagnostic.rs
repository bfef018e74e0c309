//! Diagnostics: structured reports `{rule, origin, message}`.
//!
//! A failing server, a bad manifest entry or a drifted tool produces a
//! diagnostic and never stops its siblings. The rule names are stable kebab-case
//! strings shared with other MCP connectors, so operators can grep for them
//! across implementations; `section`
//! is the Agent Plugins specification section a rule belongs to.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Every diagnostic rule: the ones MCP connectors commonly report, plus
/// Portcullis' own.
///
/// Serialises as its kebab-case name (`"tool-drift"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Rule {
    // Connecting to and projecting MCP servers.
    /// Unreachable server, SSRF block, bad URL, 401/403, credentials failure,
    /// no config on wake, type/URL mismatch on wake, re-list failure.
    ConnectionFailure,
    /// A transport this build cannot speak (stdio without the `stdio` feature).
    UnsupportedTransport,
    /// Two or more servers share a name; all are suffixed.
    ServerNameCollision,
    /// A server entry (or a projected tool name) that cannot be used.
    ServerEntryInvalid,
    /// A server's catalogue floor alone exceeds the disclosure budget.
    DisclosureBudgetExceeded,
    /// A server's listing differs from its trusted baseline.
    ToolDrift,
    /// Credentials and configured headers were stripped on a cross-origin redirect.
    CrossOriginHeadersWithheld,
    /// A path in a plugin resolves outside the plugin's root.
    PathEscapesPluginRoot,

    // Agent Plugins manifest (`plugin.json`).
    /// `plugin.json` does not exist.
    ManifestMissing,
    /// `plugin.json` exists but cannot be read.
    ManifestUnreadable,
    /// A JSON file does not parse.
    InvalidJson,
    /// `plugin.json` is not a JSON object.
    ManifestNotAnObject,
    /// An unknown top-level key (dropped, non-fatal).
    UnknownTopLevelField,
    /// A required field is missing.
    RequiredFieldMissing,
    /// `$schema` names a version this build does not support.
    UnsupportedSchemaVersion,
    /// The plugin name has characters outside `[a-z0-9.-]` or is too long.
    NameCharset,
    /// The plugin name does not start and end alphanumeric.
    NameBoundary,
    /// The plugin name contains `--` or `..`.
    NameRepetition,
    /// `author` has a key other than `name`, `email`, `url`.
    AuthorUnknownField,
    /// An optional field has the wrong type.
    InvalidFieldType,
    /// An `extensions` namespace is not an object (dropped, non-fatal).
    ExtensionsNotAnObject,

    // Agent Plugins `mcp.json`.
    /// `plugin.json` and `mcp.json` declare different spec versions.
    McpConfigVersionMismatch,
    /// `mcp.json` is unreadable, not JSON or the wrong shape.
    McpConfigInvalid,
    /// A server's `env` sets `PLUGIN_ROOT` or `PLUGIN_DATA`.
    EnvReservedName,
    /// Advisory: a server's `env` looks like it carries a plaintext secret.
    SecretInEnv,

    // Agent Plugins skills and flows (reported, not loaded, by Portcullis).
    /// A component path has the wrong kind (file vs directory).
    ComponentLocationWrongKind,
    /// A skill folder is invalid.
    SkillInvalid,
    /// A flow file cannot be read.
    FlowUnreadable,
    /// A flow file is not JSON.
    FlowInvalidJson,
    /// A flow file fails its envelope schema.
    FlowSchemaInvalid,
    /// A flow file is otherwise invalid.
    FlowInvalid,
}

impl Rule {
    /// The kebab-case name used in messages, logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::ConnectionFailure => "connection-failure",
            Rule::UnsupportedTransport => "unsupported-transport",
            Rule::ServerNameCollision => "server-name-collision",
            Rule::ServerEntryInvalid => "server-entry-invalid",
            Rule::DisclosureBudgetExceeded => "disclosure-budget-exceeded",
            Rule::ToolDrift => "tool-drift",
            Rule::CrossOriginHeadersWithheld => "cross-origin-headers-withheld",
            Rule::PathEscapesPluginRoot => "path-escapes-plugin-root",
            Rule::ManifestMissing => "manifest-missing",
            Rule::ManifestUnreadable => "manifest-unreadable",
            Rule::InvalidJson => "invalid-json",
            Rule::ManifestNotAnObject => "manifest-not-an-object",
            Rule::UnknownTopLevelField => "unknown-top-level-field",
            Rule::RequiredFieldMissing => "required-field-missing",
            Rule::UnsupportedSchemaVersion => "unsupported-schema-version",
            Rule::NameCharset => "name-charset",
            Rule::NameBoundary => "name-boundary",
            Rule::NameRepetition => "name-repetition",
            Rule::AuthorUnknownField => "author-unknown-field",
            Rule::InvalidFieldType => "invalid-field-type",
            Rule::ExtensionsNotAnObject => "extensions-not-an-object",
            Rule::McpConfigVersionMismatch => "mcp-config-version-mismatch",
            Rule::McpConfigInvalid => "mcp-config-invalid",
            Rule::EnvReservedName => "env-reserved-name",
            Rule::SecretInEnv => "secret-in-env",
            Rule::ComponentLocationWrongKind => "component-location-wrong-kind",
            Rule::SkillInvalid => "skill-invalid",
            Rule::FlowUnreadable => "flow-unreadable",
            Rule::FlowInvalidJson => "flow-invalid-json",
            Rule::FlowSchemaInvalid => "flow-schema-invalid",
            Rule::FlowInvalid => "flow-invalid",
        }
    }

    /// The Agent Plugins specification section this rule is usually reported
    /// under. A few rules are reported under more than one section (a
    /// `path-escapes-plugin-root` for a `cwd` is 7.2.1, for a command 4.1);
    /// callers override with [`Diagnostic::with_section`].
    pub fn default_section(self) -> &'static str {
        match self {
            Rule::PathEscapesPluginRoot => "4.1",
            Rule::ManifestMissing | Rule::ManifestUnreadable => "5.1",
            Rule::InvalidJson
            | Rule::ManifestNotAnObject
            | Rule::UnknownTopLevelField
            | Rule::UnsupportedSchemaVersion
            | Rule::InvalidFieldType => "5.2",
            Rule::RequiredFieldMissing => "5.3",
            Rule::AuthorUnknownField => "5.4",
            Rule::NameCharset | Rule::NameBoundary | Rule::NameRepetition => "5.5",
            Rule::ComponentLocationWrongKind => "6.2",
            Rule::SkillInvalid => "7.1",
            Rule::CrossOriginHeadersWithheld => "7.2.1",
            Rule::ExtensionsNotAnObject => "8.1",
            Rule::EnvReservedName | Rule::SecretInEnv => "9.2",
            Rule::McpConfigVersionMismatch => "10.1",
            Rule::FlowUnreadable
            | Rule::FlowInvalidJson
            | Rule::FlowSchemaInvalid
            | Rule::FlowInvalid => "flows",
            Rule::ConnectionFailure
            | Rule::UnsupportedTransport
            | Rule::ServerNameCollision
            | Rule::ServerEntryInvalid
            | Rule::DisclosureBudgetExceeded
            | Rule::ToolDrift
            | Rule::McpConfigInvalid => "7.2.2",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A structured report: which rule fired, where (`origin`: a server name, a
/// file such as `mcp.json`, a plugin directory) and a message for a person.
///
/// ```
/// use portcullis_catalog::{Diagnostic, Rule};
///
/// let d = Diagnostic::new(Rule::ToolDrift, "docs", "MCP server \"docs\" no longer publishes: search.");
/// assert_eq!(d.to_string(), "tool-drift [docs]: MCP server \"docs\" no longer publishes: search.");
/// assert_eq!(serde_json::to_value(&d).unwrap()["rule"], "tool-drift");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The rule that fired.
    pub rule: Rule,
    /// Where: a server name, a file, a plugin directory.
    pub origin: String,
    /// A message a person can act on.
    pub message: String,
    /// The Agent Plugins specification section.
    pub section: String,
}

impl Diagnostic {
    /// A diagnostic under the rule's default section.
    pub fn new(rule: Rule, origin: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            rule,
            origin: origin.into(),
            message: message.into(),
            section: rule.default_section().to_owned(),
        }
    }

    /// Overrides the specification section.
    pub fn with_section(mut self, section: impl Into<String>) -> Self {
        self.section = section.into();
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]: {}", self.rule, self.origin, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_serialises_as_its_name() {
        let rules = [
            Rule::ConnectionFailure,
            Rule::UnsupportedTransport,
            Rule::ServerNameCollision,
            Rule::ServerEntryInvalid,
            Rule::DisclosureBudgetExceeded,
            Rule::ToolDrift,
            Rule::CrossOriginHeadersWithheld,
            Rule::PathEscapesPluginRoot,
            Rule::ManifestMissing,
            Rule::ManifestUnreadable,
            Rule::InvalidJson,
            Rule::ManifestNotAnObject,
            Rule::UnknownTopLevelField,
            Rule::RequiredFieldMissing,
            Rule::UnsupportedSchemaVersion,
            Rule::NameCharset,
            Rule::NameBoundary,
            Rule::NameRepetition,
            Rule::AuthorUnknownField,
            Rule::InvalidFieldType,
            Rule::ExtensionsNotAnObject,
            Rule::McpConfigVersionMismatch,
            Rule::McpConfigInvalid,
            Rule::EnvReservedName,
            Rule::SecretInEnv,
            Rule::ComponentLocationWrongKind,
            Rule::SkillInvalid,
            Rule::FlowUnreadable,
            Rule::FlowInvalidJson,
            Rule::FlowSchemaInvalid,
            Rule::FlowInvalid,
        ];
        for rule in rules {
            let json = serde_json::to_value(rule).unwrap();
            assert_eq!(json, serde_json::Value::String(rule.as_str().to_owned()));
            let back: Rule = serde_json::from_value(json).unwrap();
            assert_eq!(back, rule);
        }
    }

    #[test]
    fn rules_name_their_specification_section() {
        assert_eq!(Rule::ToolDrift.default_section(), "7.2.2");
        assert_eq!(Rule::CrossOriginHeadersWithheld.default_section(), "7.2.1");
        assert_eq!(Rule::SecretInEnv.default_section(), "9.2");
        let cwd_escape =
            Diagnostic::new(Rule::PathEscapesPluginRoot, "srv", "m").with_section("7.2.1");
        assert_eq!(cwd_escape.section, "7.2.1");
    }
}
