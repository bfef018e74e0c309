//! `portcullis import`: an existing `mcpServers` config (Claude Desktop,
//! Cursor, VS Code) becomes Portcullis TOML.
//!
//! The entries are read by the upstream crate's parser, which applies the
//! same checks `connect` does, so a server that would be refused at connect
//! time is reported here instead of being imported. Secrets never travel into
//! the TOML: an `env` value or header that looks like a credential is
//! replaced by a `${VAR}` reference and the variable is named on stderr, so
//! the user exports it instead of committing it. VS Code's `${env:VAR}`
//! becomes `${VAR}`.

use std::collections::BTreeMap;

use portcullis_catalog::TransportKind;
use portcullis_upstream::{McpServerConfig, parse_mcp_servers_json};
use serde::Serialize;

/// The TOML text and what the user must know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The config, ready to save as `portcullis.toml`.
    pub toml: String,
    /// Variables the user must export (replaced secrets), with where they came from.
    pub variables: Vec<(String, String)>,
    /// Entries that were skipped, and why.
    pub skipped: Vec<String>,
    /// Other things worth saying (unsupported placeholders and the like).
    pub notes: Vec<String>,
}

#[derive(Serialize)]
struct Document {
    upstreams: BTreeMap<String, Entry>,
}

#[derive(Serialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
}

/// The one entry to put in the client's config in place of the servers
/// that were imported, so the client starts Portcullis (over stdio, with
/// `config`) and Portcullis starts them: a JSON member the user pastes as
/// it is. `program` is the `portcullis` binary (a desktop client may not
/// share the shell's `PATH`, so an absolute path is best).
pub fn client_entry(client: crate::cli::Client, program: &str, config: &std::path::Path) -> String {
    let args = serde_json::json!(["serve", "--stdio", "--config", config.display().to_string()]);
    match client {
        crate::cli::Client::Vscode => format!(
            "\"servers\": {}",
            serde_json::json!({"portcullis": {"type": "stdio", "command": program, "args": args}})
        ),
        crate::cli::Client::Claude | crate::cli::Client::Cursor => format!(
            "\"mcpServers\": {}",
            serde_json::json!({"portcullis": {"command": program, "args": args}})
        ),
    }
}

/// Converts the JSON config `text` into Portcullis TOML.
pub fn import(text: &str) -> anyhow::Result<Imported> {
    let parsed = parse_mcp_servers_json(text)?;
    let mut imported = Imported {
        toml: String::new(),
        variables: Vec::new(),
        skipped: parsed
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect(),
        notes: Vec::new(),
    };
    let mut document = Document {
        upstreams: BTreeMap::new(),
    };
    for server in parsed.servers {
        let name = server.name().to_owned();
        let server_kind = server.transport();
        let entry = match server {
            McpServerConfig::Stdio(stdio) => {
                let mut env = BTreeMap::new();
                for (key, value) in stdio.env {
                    let value = if looks_secret(&key, &value) {
                        imported
                            .variables
                            .push((key.clone(), format!("upstreams.{name}.env.{key}")));
                        format!("${{{key}}}")
                    } else {
                        vscode_placeholders(&value, &mut imported.notes)
                    };
                    env.insert(key, value);
                }
                Entry {
                    kind: "stdio",
                    url: None,
                    command: Some(stdio.command),
                    args: stdio
                        .args
                        .iter()
                        .map(|a| vscode_placeholders(a, &mut imported.notes))
                        .collect(),
                    cwd: stdio.cwd.map(|c| c.display().to_string()),
                    env,
                    headers: BTreeMap::new(),
                }
            }
            McpServerConfig::StreamableHttp(remote) | McpServerConfig::Sse(remote) => {
                // The parser decided the transport exactly as `connect` would
                // for the same entry: an untyped `url` is Streamable HTTP. A
                // URL that looks like a legacy SSE endpoint is only flagged,
                // never guessed: an explicit `"type": "http"` means what it says.
                let kind = if matches!(server_kind, TransportKind::Sse) {
                    "sse"
                } else {
                    if looks_like_sse(&remote.url) {
                        imported.notes.push(format!(
                            "upstreams.{name} is imported as streamable-http, but its url looks like a legacy SSE endpoint; \
                             set type = \"sse\" if the server speaks HTTP+SSE"
                        ));
                    }
                    "streamable-http"
                };
                let mut headers = BTreeMap::new();
                for (key, value) in remote.headers {
                    let value = if value.contains("${") {
                        vscode_placeholders(&value, &mut imported.notes)
                    } else if looks_secret(&key, &value)
                        || key.eq_ignore_ascii_case("authorization")
                    {
                        let var = variable_name(&name, &key);
                        imported
                            .variables
                            .push((var.clone(), format!("upstreams.{name}.headers.{key}")));
                        match value.split_once(' ') {
                            Some((scheme, _))
                                if scheme.eq_ignore_ascii_case("bearer")
                                    || scheme.eq_ignore_ascii_case("basic") =>
                            {
                                format!("{scheme} ${{{var}}}")
                            }
                            _ => format!("${{{var}}}"),
                        }
                    } else {
                        value
                    };
                    headers.insert(key, value);
                }
                Entry {
                    kind,
                    url: Some(remote.url),
                    command: None,
                    args: Vec::new(),
                    cwd: None,
                    env: BTreeMap::new(),
                    headers,
                }
            }
        };
        document.upstreams.insert(name, entry);
    }
    imported.variables.sort();
    imported.toml = format!(
        "# Imported by `portcullis import`. Secrets are ${{VAR}} references: export them before `portcullis serve`.\n{}",
        toml::to_string(&document)?
    );
    Ok(imported)
}

/// True when `url`'s path ends in `/sse`, the usual endpoint of a legacy
/// HTTP+SSE server.
fn looks_like_sse(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.trim_end_matches('/').ends_with("/sse")
}

/// The seed's `secret-in-env` heuristic: a key ending in a credential word,
/// or a value with a well-known token prefix.
pub fn looks_secret(key: &str, value: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let key_says = [
        "apikey", "api_key", "api-key", "token", "secret", "password",
    ]
    .iter()
    .any(|word| key == *word || key.ends_with(&format!("_{word}")));
    let value = value.to_ascii_lowercase();
    let value_says = [
        "sk-", "fc-", "ghp_", "gho_", "xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-",
    ]
    .iter()
    .any(|prefix| value.starts_with(prefix));
    key_says || value_says
}

fn variable_name(server: &str, header: &str) -> String {
    format!("{server}_{header}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// `${env:VAR}` → `${VAR}`; other VS Code placeholders are kept and noted.
fn vscode_placeholders(value: &str, notes: &mut Vec<String>) -> String {
    let converted = value.replace("${env:", "${");
    if converted.contains("${input:") || converted.contains("${workspaceFolder") {
        notes.push(format!(
            "\"{value}\" uses a VS Code placeholder Portcullis cannot resolve; replace it with a value or ${{VAR}}"
        ));
    }
    converted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use std::path::Path;

    const CLAUDE: &str = r#"{
      "mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                  "env": {"GITHUB_TOKEN": "ghp_abc123", "LOG_LEVEL": "debug"}},
        "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer live-secret", "X-Team": "core"}},
        "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
        "broken": {"url": "http://example.com/mcp"}
      }
    }"#;

    #[test]
    fn the_entry_to_put_back_starts_portcullis_over_stdio() {
        use crate::cli::Client;
        let config = Path::new("/srv/gateway/portcullis.toml");
        let claude = client_entry(Client::Claude, "/usr/local/bin/portcullis", config);
        assert_eq!(
            claude,
            r#""mcpServers": {"portcullis":{"command":"/usr/local/bin/portcullis","args":["serve","--stdio","--config","/srv/gateway/portcullis.toml"]}}"#
        );
        let parsed: serde_json::Value =
            serde_json::from_str(&format!("{{{claude}}}")).expect("a JSON member");
        assert_eq!(parsed["mcpServers"]["portcullis"]["args"][1], "--stdio");
        let cursor = client_entry(Client::Cursor, "portcullis", config);
        assert!(
            cursor.starts_with(r#""mcpServers": {"portcullis":{"#)
                && cursor.contains(r#""command":"portcullis""#),
            "{cursor}"
        );
        let vscode = client_entry(Client::Vscode, "portcullis", config);
        let parsed: serde_json::Value =
            serde_json::from_str(&format!("{{{vscode}}}")).expect("a JSON member");
        assert_eq!(parsed["servers"]["portcullis"]["type"], "stdio");
    }

    #[test]
    fn secrets_become_variables_and_the_result_loads() {
        let imported = import(CLAUDE).unwrap();
        assert!(!imported.toml.contains("ghp_abc123"), "{}", imported.toml);
        assert!(!imported.toml.contains("live-secret"), "{}", imported.toml);
        assert!(
            imported.toml.contains("Bearer ${DOCS_AUTHORIZATION}"),
            "{}",
            imported.toml
        );
        assert!(imported.toml.contains("${GITHUB_TOKEN}"));
        assert!(imported.toml.contains("debug"));
        let names: Vec<_> = imported.variables.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(names, ["DOCS_AUTHORIZATION", "GITHUB_TOKEN"]);
        assert_eq!(imported.skipped.len(), 1, "{:?}", imported.skipped);
        assert!(imported.skipped[0].contains("broken"));

        let env = |name: &str| Some(format!("value-of-{name}"));
        let config = config::parse(Path::new("imported.toml"), &imported.toml, &env).unwrap();
        assert_eq!(config.upstreams.len(), 3);
        match &config.upstreams["legacy"].transport {
            config::UpstreamTransport::Remote { kind, .. } => assert_eq!(kind.as_str(), "sse"),
            other => panic!("{other:?}"),
        }
        match &config.upstreams["docs"].transport {
            config::UpstreamTransport::Remote { headers, .. } => {
                assert_eq!(
                    headers["Authorization"].expose(),
                    "Bearer value-of-DOCS_AUTHORIZATION"
                );
                assert_eq!(headers["X-Team"].expose(), "core");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn vscode_servers_and_env_placeholders() {
        let vscode = r#"{"servers": {"gh": {"type": "stdio", "command": "gh-mcp", "env": {"GH_HOST": "${env:GH_HOST}", "X": "${input:pick}"}}}}"#;
        let imported = import(vscode).unwrap();
        assert!(
            imported.toml.contains("GH_HOST = \"${GH_HOST}\""),
            "{}",
            imported.toml
        );
        assert_eq!(imported.notes.len(), 1);
        assert!(import("{}").is_err());
        assert!(import("not json").is_err());
    }

    #[test]
    fn the_parsers_transport_is_kept_and_an_sse_looking_url_is_flagged() {
        let text = r#"{"mcpServers": {
            "typed": {"type": "sse", "url": "https://old.example.com/events"},
            "untyped": {"url": "https://old.example.com/sse/"},
            "http": {"type": "http", "url": "https://new.example.com/mcp"}
        }}"#;
        let imported = import(text).unwrap();
        let env = |_: &str| None;
        let config = config::parse(Path::new("i.toml"), &imported.toml, &env).unwrap();
        let kind = |name: &str| match &config.upstreams[name].transport {
            config::UpstreamTransport::Remote { kind, .. } => kind.as_str(),
            other => panic!("{other:?}"),
        };
        assert_eq!(kind("typed"), "sse");
        assert_eq!(kind("untyped"), "streamable-http");
        assert_eq!(kind("http"), "streamable-http");
        assert_eq!(imported.notes.len(), 1, "{:?}", imported.notes);
        assert!(imported.notes[0].contains("upstreams.untyped"));
    }

    #[test]
    fn secret_heuristic_follows_the_seed() {
        assert!(looks_secret("OPENAI_API_KEY", "x"));
        assert!(looks_secret("token", "x"));
        assert!(looks_secret("DB_PASSWORD", "x"));
        assert!(looks_secret("ANYTHING", "sk-live"));
        assert!(!looks_secret("TOKENIZER", "bpe"));
        assert!(!looks_secret("LOG_LEVEL", "debug"));
    }
}

/// Property tests of the importer: whatever the file holds, the TOML it
/// writes parses back and declares no `[gateway]` keys (no injection through
/// names or values), or the import fails. `PROPTEST_CASES` sets the number
/// of cases (default 256).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    /// Any JSON, with the keys an `mcpServers` entry has among the others.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop::sample::select(vec![
                "stdio",
                "http",
                "sse",
                "streamable-http",
                "npx",
                "http://127.0.0.1:1/mcp",
                "https://example.com/mcp",
                "http://169.254.169.254/",
                "${input:token}",
                "${env:HOME}",
                "${VAR}",
                "\"]\n[gateway]\ntoken = \"x",
                "",
            ])
            .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "command",
                "args",
                "env",
                "cwd",
                "url",
                "type",
                "headers",
                "transport",
                "serverUrl",
                "disabled",
                "timeout",
                "envFile",
            ])
            .prop_map(str::to_owned),
            "\\PC{0,8}",
        ]
    }

    /// `{"mcpServers": {name: entry, …}}` (or `servers`), entries arbitrary.
    fn servers_file() -> impl Strategy<Value = Value> {
        (
            prop::sample::select(vec!["mcpServers", "servers"]),
            prop::collection::vec(("\\PC{0,12}", json()), 0..5),
        )
            .prop_map(|(root, entries)| {
                let entries: serde_json::Map<String, Value> = entries.into_iter().collect();
                serde_json::json!({ root: entries })
            })
    }

    proptest! {
        #[test]
        fn any_text_imports_or_errs(text in "\\PC{0,200}") {
            let _ = import(&text);
        }

        #[test]
        fn imported_toml_parses_and_injects_nothing(file in servers_file()) {
            if let Ok(imported) = import(&file.to_string()) {
                let parsed: toml::Table = imported.toml.parse().map_err(|e| {
                    TestCaseError::fail(format!("{e}: {}", imported.toml))
                })?;
                for key in parsed.keys() {
                    prop_assert!(key == "upstreams" || key == "gateway", "{}", imported.toml);
                }
                if let Some(gateway) = parsed.get("gateway").and_then(|g| g.as_table()) {
                    prop_assert!(!gateway.contains_key("token") && !gateway.contains_key("allow_write"), "{}", imported.toml);
                }
            }
        }
    }
}
