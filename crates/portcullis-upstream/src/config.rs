//! Server configs: what to connect to, and the parsers for configs users
//! already have.
//!
//! [`McpServerConfig`] is a union discriminated by `type` (`stdio`,
//! `streamable-http`, `sse`), as `mcpServers` configs spell it. [`parse_mcp_servers_json`] reads the
//! `mcpServers` JSON of Claude Desktop and Cursor and the `servers` JSON of VS
//! Code; a bad entry is skipped with a `server-entry-invalid` diagnostic and
//! its siblings load. [`check_remote_url`] is the remote URL rule: absolute
//! `http:`/`https:`, no userinfo, no fragment, plain `http:` only for
//! loopback.

use std::collections::BTreeMap;
use std::path::PathBuf;

use portcullis_catalog::{Diagnostic, Endpoint, Rule, ServerIdentity, TransportKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;
use url::Url;

/// One upstream MCP server.
///
/// ```
/// use portcullis_upstream::McpServerConfig;
///
/// let config: McpServerConfig = serde_json::from_str(
///     r#"{"type":"streamable-http","name":"docs","url":"https://mcp.example.com/mcp"}"#,
/// ).unwrap();
/// assert_eq!(config.name(), "docs");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum McpServerConfig {
    /// A local child process speaking MCP on stdin/stdout.
    Stdio(StdioConfig),
    /// A remote server speaking Streamable HTTP (either generation).
    StreamableHttp(RemoteConfig),
    /// A remote server speaking the 2024-11-05 HTTP+SSE transport.
    Sse(RemoteConfig),
}

/// A stdio server: the command line, its extra environment and directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdioConfig {
    /// The server's name (the first half of its tools' qualified names).
    pub name: String,
    /// The program to run; a bare name is looked up on `PATH`.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the minimal environment the child gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory; the host's current directory when absent (the
    /// plugin root for a server that came from a plugin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Set only for a server that came from an Agent Plugins directory
    /// ([`crate::plugins::load_agent_plugin`]): the launcher then creates and
    /// probes `PLUGIN_DATA`, re-checks containment with symlinks resolved,
    /// and sets `PLUGIN_ROOT` / `PLUGIN_DATA`. A hand-written config has
    /// none, and its child gets no `PLUGIN_*` variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginLaunch>,
}

/// Where a plugin's stdio server lives: what the launcher needs to enforce
/// the plugin's boundaries at launch (see [`crate::plugins`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginLaunch {
    /// The plugin directory (absolute); becomes `PLUGIN_ROOT`.
    pub root: PathBuf,
    /// `<parent of root>/data/<plugin name>`; becomes `PLUGIN_DATA`, created
    /// and probed for writing before the child starts.
    pub data_root: PathBuf,
    /// Which of the two roots the server's `cwd` must stay inside.
    pub cwd_root: CwdRoot,
}

/// The root a plugin server's `cwd` was declared against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CwdRoot {
    /// `./…`, `${PLUGIN_ROOT}/…` or no `cwd` at all.
    Plugin,
    /// `${PLUGIN_DATA}/…`.
    Data,
}

/// A remote server: its URL and headers sent with every request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteConfig {
    /// The server's name.
    pub name: String,
    /// The endpoint (`…/mcp` for Streamable HTTP, `…/sse` for HTTP+SSE).
    pub url: String,
    /// Headers for every request. Withheld on a cross-origin redirect; never
    /// stored or logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl McpServerConfig {
    /// A stdio config with no env and no cwd.
    pub fn stdio<I, S>(name: impl Into<String>, command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        McpServerConfig::Stdio(StdioConfig {
            name: name.into(),
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
            plugin: None,
        })
    }

    /// A Streamable HTTP config with no headers.
    pub fn streamable_http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig::StreamableHttp(RemoteConfig {
            name: name.into(),
            url: url.into(),
            headers: BTreeMap::new(),
        })
    }

    /// A legacy HTTP+SSE config with no headers.
    pub fn sse(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig::Sse(RemoteConfig {
            name: name.into(),
            url: url.into(),
            headers: BTreeMap::new(),
        })
    }

    /// Adds a header (remote configs only; a stdio config is unchanged).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpServerConfig::StreamableHttp(r) | McpServerConfig::Sse(r) = &mut self {
            r.headers.insert(name.into(), value.into());
        }
        self
    }

    /// Adds an environment variable (stdio configs only).
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpServerConfig::Stdio(s) = &mut self {
            s.env.insert(name.into(), value.into());
        }
        self
    }

    /// The configured name.
    pub fn name(&self) -> &str {
        match self {
            McpServerConfig::Stdio(s) => &s.name,
            McpServerConfig::StreamableHttp(r) | McpServerConfig::Sse(r) => &r.name,
        }
    }

    /// The transport it uses.
    pub fn transport(&self) -> TransportKind {
        match self {
            McpServerConfig::Stdio(_) => TransportKind::Stdio,
            McpServerConfig::StreamableHttp(_) => TransportKind::StreamableHttp,
            McpServerConfig::Sse(_) => TransportKind::Sse,
        }
    }

    /// Who the server is, as the catalogue keys it: its name and its URL or
    /// command line (never its headers or env, which may hold secrets).
    pub fn identity(&self) -> ServerIdentity {
        let endpoint = match self {
            McpServerConfig::Stdio(s) => Endpoint::Stdio {
                command: s.command.clone(),
                args: s.args.clone(),
            },
            McpServerConfig::StreamableHttp(r) => Endpoint::StreamableHttp { url: r.url.clone() },
            McpServerConfig::Sse(r) => Endpoint::Sse { url: r.url.clone() },
        };
        ServerIdentity {
            name: self.name().to_owned(),
            endpoint,
        }
    }
}

/// Whether `host` (as `Url::host_str` gives it) is a loopback host:
/// `localhost`, `127.d.d.d` or `::1`.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

/// Checks a remote server URL and parses it.
///
/// ```
/// use portcullis_upstream::config::check_remote_url;
///
/// assert!(check_remote_url("https://mcp.example.com/mcp").is_ok());
/// assert!(check_remote_url("http://127.0.0.1:3000/mcp").is_ok());
/// assert!(check_remote_url("http://mcp.example.com/mcp").is_err());
/// assert!(check_remote_url("https://user:pw@mcp.example.com/mcp").is_err());
/// ```
pub fn check_remote_url(raw: &str) -> Result<Url, String> {
    // What an error may say of the URL: its query and userinfo may be
    // credentials.
    let shown = portcullis_catalog::redact::url(raw);
    let url = Url::parse(raw).map_err(|_| format!("url \"{shown}\" is not an absolute URL"))?;
    match url.scheme() {
        "https" | "http" => {}
        other => {
            return Err(format!(
                "url \"{shown}\" has scheme \"{other}:\"; only http: and https: are allowed"
            ));
        }
    }
    let Some(host) = url.host_str() else {
        return Err(format!("url \"{shown}\" has no host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        // Never echo the userinfo back: it is usually a credential.
        return Err("url must not carry userinfo (user:password@)".to_owned());
    }
    if url.fragment().is_some() {
        return Err(format!("url \"{shown}\" must not carry a #fragment"));
    }
    if url.scheme() == "http" && !is_loopback_host(host) {
        return Err(format!(
            "url \"{shown}\" uses plain http: for a host that is not loopback; use https:"
        ));
    }
    Ok(url)
}

/// A config file that cannot be read as a whole.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not JSON.
    #[error("MCP config is not valid JSON: {0}")]
    InvalidJson(#[from] serde_json::Error),
    /// JSON, but with neither an `mcpServers` nor a `servers` object.
    #[error("MCP config has neither an \"mcpServers\" nor a \"servers\" object")]
    NoServers,
}

/// The servers a config file declares, and what was wrong with the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedServers {
    /// Every entry that passed its checks, in file order.
    pub servers: Vec<McpServerConfig>,
    /// One diagnostic per skipped entry.
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses the JSON config of Claude Desktop or Cursor (`{"mcpServers": …}`)
/// or VS Code (`{"servers": …}`, entries with `type` `stdio`, `http` or
/// `sse`).
///
/// An entry with a `command` is stdio; one with a `url` is Streamable HTTP
/// unless its `type` says `sse`. A bad entry is skipped with a
/// `server-entry-invalid` diagnostic (origin: the config file key) and the
/// others still load.
///
/// ```
/// use portcullis_upstream::{parse_mcp_servers_json, McpServerConfig};
///
/// let parsed = parse_mcp_servers_json(r#"{"mcpServers": {
///     "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]},
///     "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer x"}},
///     "bad": {"url": "http://example.com/mcp"}
/// }}"#).unwrap();
/// assert_eq!(parsed.servers.len(), 2);
/// assert!(matches!(parsed.servers[0], McpServerConfig::Stdio(_)));
/// assert_eq!(parsed.diagnostics[0].rule.as_str(), "server-entry-invalid");
/// ```
pub fn parse_mcp_servers_json(text: &str) -> Result<ParsedServers, ConfigError> {
    let root: Value = serde_json::from_str(text)?;
    let entries = root
        .get("mcpServers")
        .or_else(|| root.get("servers"))
        .and_then(Value::as_object)
        .ok_or(ConfigError::NoServers)?;
    let mut parsed = ParsedServers::default();
    for (name, entry) in entries {
        match parse_entry(name, entry) {
            Ok(config) => parsed.servers.push(config),
            Err(reason) => parsed.diagnostics.push(Diagnostic::new(
                Rule::ServerEntryInvalid,
                name.clone(),
                format!("MCP server \"{name}\" was skipped: {reason}."),
            )),
        }
    }
    Ok(parsed)
}

const STDIO_KEYS: &[&str] = &["type", "command", "args", "env", "cwd"];
const REMOTE_KEYS: &[&str] = &["type", "url", "headers"];
// Keys editors add that carry no meaning for a connection; accepted and
// ignored rather than failing an otherwise good entry.
const TOLERATED_KEYS: &[&str] = &[
    "disabled",
    "autoApprove",
    "alwaysAllow",
    "description",
    "envFile",
    "timeout",
];

fn parse_entry(name: &str, entry: &Value) -> Result<McpServerConfig, String> {
    let Value::Object(fields) = entry else {
        return Err("the entry is not an object".to_owned());
    };
    let kind = match fields.get("type") {
        None => None,
        Some(Value::String(kind)) => Some(kind.as_str()),
        Some(_) => return Err("\"type\" must be a string".to_owned()),
    };
    let transport = match (
        kind,
        fields.contains_key("command"),
        fields.contains_key("url"),
    ) {
        (Some("stdio"), _, _) | (None, true, false) => TransportKind::Stdio,
        (Some("http" | "streamable-http" | "streamableHttp"), _, _) | (None, false, true) => {
            TransportKind::StreamableHttp
        }
        (Some("sse"), _, _) => TransportKind::Sse,
        (Some(other), _, _) => {
            return Err(format!(
                "type \"{other}\" is not one of stdio, http, streamable-http, sse"
            ));
        }
        (None, true, true) => return Err("it sets both \"command\" and \"url\"".to_owned()),
        (None, false, false) => return Err("it sets neither \"command\" nor \"url\"".to_owned()),
    };
    let allowed = if transport == TransportKind::Stdio {
        STDIO_KEYS
    } else {
        REMOTE_KEYS
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !allowed.contains(&k.as_str()) && !TOLERATED_KEYS.contains(&k.as_str()))
    {
        return Err(format!(
            "key \"{key}\" does not belong to a {} entry",
            transport.as_str()
        ));
    }
    let name = name.to_owned();
    if transport == TransportKind::Stdio {
        let command = match fields.get("command") {
            Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
            _ => return Err("\"command\" must be a non-empty string".to_owned()),
        };
        let args = match fields.get("args") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| "\"args\" must be an array of strings".to_owned())?,
            Some(_) => return Err("\"args\" must be an array of strings".to_owned()),
        };
        let env = string_map(fields, "env")?;
        let cwd = match fields.get("cwd") {
            None => None,
            Some(Value::String(c)) => Some(PathBuf::from(c)),
            Some(_) => return Err("\"cwd\" must be a string".to_owned()),
        };
        return Ok(McpServerConfig::Stdio(StdioConfig {
            name,
            command,
            args,
            env,
            cwd,
            plugin: None,
        }));
    }
    let url = match fields.get("url") {
        Some(Value::String(u)) => u.clone(),
        _ => return Err("\"url\" must be a string".to_owned()),
    };
    check_remote_url(&url)?;
    let headers = string_map(fields, "headers")?;
    let mut seen = std::collections::BTreeSet::new();
    for key in headers.keys() {
        if !seen.insert(key.to_ascii_lowercase()) {
            return Err(format!(
                "header \"{key}\" appears twice (header names are case-insensitive)"
            ));
        }
    }
    let remote = RemoteConfig { name, url, headers };
    Ok(if transport == TransportKind::Sse {
        McpServerConfig::Sse(remote)
    } else {
        McpServerConfig::StreamableHttp(remote)
    })
}

fn string_map(fields: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, String>, String> {
    match fields.get(key) {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect::<Option<BTreeMap<_, _>>>()
            .ok_or_else(|| format!("\"{key}\" values must be strings")),
        Some(_) => Err(format!("\"{key}\" must be an object of strings")),
    }
}

/// The message for a stdio config in a build without the `stdio` feature.
pub(crate) fn unsupported_stdio_message(server: &str) -> String {
    format!(
        "MCP server \"{server}\" uses the stdio transport, which this build of portcullis-upstream does not include: enable the `stdio` cargo feature (on by default) to spawn local servers; remote transports (streamable-http, sse) work without it."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_errors_never_repeat_query_values() {
        for bad in [
            "http://example.com/mcp?api_key=SECRETVALUE",
            "ftp://127.0.0.1/mcp?token=SECRETVALUE",
            "https://h/mcp?SECRETVALUE#frag",
        ] {
            let error = check_remote_url(bad).expect_err(bad);
            assert!(!error.contains("SECRETVALUE"), "{error}");
            assert!(error.contains("***"), "{error}");
        }
    }

    #[test]
    fn remote_url_rules() {
        for ok in [
            "https://mcp.example.com/mcp",
            "http://localhost:3000/mcp",
            "http://127.0.0.2/mcp",
            "http://[::1]:8080/mcp",
        ] {
            assert!(check_remote_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "mcp.example.com/mcp",
            "ftp://mcp.example.com/",
            "http://example.com/mcp",
            "http://10.0.0.1/mcp",
            "https://u:p@mcp.example.com/",
            "https://mcp.example.com/mcp#frag",
        ] {
            assert!(check_remote_url(bad).is_err(), "{bad}");
        }
        let userinfo = check_remote_url("https://u:secretpw@mcp.example.com/").unwrap_err();
        assert!(!userinfo.contains("secretpw"));
    }

    #[test]
    fn vscode_servers_with_type() {
        let parsed = parse_mcp_servers_json(
            r#"{"servers": {
                "a": {"type": "stdio", "command": "node", "args": ["s.js"], "env": {"K": "v"}},
                "b": {"type": "http", "url": "https://b.example/mcp"},
                "c": {"type": "sse", "url": "http://127.0.0.1:3102/sse", "headers": {"X-A": "1"}},
                "d": {"type": "websocket", "url": "wss://d.example"}
            }, "inputs": []}"#,
        )
        .unwrap();
        assert_eq!(
            parsed
                .servers
                .iter()
                .map(McpServerConfig::transport)
                .collect::<Vec<_>>(),
            [
                TransportKind::Stdio,
                TransportKind::StreamableHttp,
                TransportKind::Sse
            ]
        );
        assert_eq!(parsed.diagnostics.len(), 1);
        assert_eq!(parsed.diagnostics[0].origin, "d");
    }

    #[test]
    fn bad_entries_are_skipped_one_by_one() {
        let parsed = parse_mcp_servers_json(
            r#"{"mcpServers": {
                "ok": {"command": "x"},
                "mixed": {"command": "x", "headers": {}},
                "both": {"command": "x", "url": "https://x"},
                "dup": {"url": "https://x.example/mcp", "headers": {"A": "1", "a": "2"}},
                "args": {"command": "x", "args": [1]},
                "notobj": 3
            }}"#,
        )
        .unwrap();
        assert_eq!(parsed.servers.len(), 1);
        assert_eq!(parsed.diagnostics.len(), 5);
        assert!(
            parsed
                .diagnostics
                .iter()
                .all(|d| d.rule == Rule::ServerEntryInvalid)
        );
    }

    #[test]
    fn whole_file_errors() {
        assert!(matches!(
            parse_mcp_servers_json("{"),
            Err(ConfigError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_mcp_servers_json(r#"{"other": {}}"#),
            Err(ConfigError::NoServers)
        ));
    }

    #[test]
    fn identity_never_includes_secrets() {
        let config = McpServerConfig::streamable_http("d", "https://d.example/mcp")
            .with_header("Authorization", "Bearer secret");
        let identity = serde_json::to_string(&config.identity()).unwrap();
        assert!(!identity.contains("secret"));
        let stdio = McpServerConfig::stdio("f", "node", ["a.js"]).with_env("TOKEN", "secret");
        assert!(
            !serde_json::to_string(&stdio.identity())
                .unwrap()
                .contains("secret")
        );
    }
}

/// Property tests of the `mcpServers` parser: any text and any entry shape
/// are servers and diagnostics or an error, never a panic. `PROPTEST_CASES`
/// sets the number of cases (default 256).
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::strategies::servers_file;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_parses_or_errs(text in "\\PC{0,200}") {
            let _ = parse_mcp_servers_json(&text);
        }

        #[test]
        fn every_entry_is_a_server_or_a_diagnostic(file in servers_file()) {
            let parsed = parse_mcp_servers_json(&file.to_string()).expect("a servers map");
            let entries = file.as_object().and_then(|o| o.values().next()).and_then(Value::as_object).map_or(0, |e| e.len());
            prop_assert_eq!(parsed.servers.len() + parsed.diagnostics.len(), entries);
        }

        #[test]
        fn any_url_is_checked_without_panic(url in "\\PC{0,40}") {
            let _ = check_remote_url(&url);
            let _ = check_remote_url(&format!("http://{url}"));
        }
    }
}
