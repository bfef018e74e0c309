//! An existing `mcpServers` config (Claude Desktop, Cursor, VS Code)
//! becomes Portcullis TOML: what `portcullis import` and `client connect`
//! print and write.
//!
//! The entries are read by the upstream crate's parser, which applies the
//! same checks `connect` does, so a server that would be refused at connect
//! time is reported here instead of being imported. Secrets never travel into
//! the TOML: every value that looks like a credential becomes a `${VAR}`
//! reference and the variable is named on stderr, so the user exports it
//! instead of committing it:
//!
//! - an `env` entry whose name says credential (`…_TOKEN`, `…_SECRET_…`,
//!   `…_KEY`, `…PASSWORD`, `COOKIE`, …) or whose value looks like one (a
//!   known token prefix, a URL with a password or a secret query, a long
//!   random string) becomes `${NAME}`, its own name;
//! - a header (`Authorization`, `Cookie`, `X-API-Key`, any credential-named
//!   or credential-looking one) becomes `${SERVER_HEADER}`, keeping a
//!   `Bearer`/`Basic` scheme;
//! - a URL query value (`?api_key=…`) becomes `${SERVER_PARAM}`;
//! - an argument `--api-key VALUE`, `--token=VALUE` (any credential-named
//!   flag) becomes `${SERVER_FLAG}`, and any other argument that looks
//!   like a credential `${SERVER_ARG_N}`;
//! - every variable of a VS Code `envFile` becomes an env entry `${NAME}`
//!   (the file's values are never read into the TOML).
//!
//! VS Code's `${env:VAR}` becomes `${VAR}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use portcullis_catalog::TransportKind;
use portcullis_upstream::{McpServerConfig, parse_mcp_servers_json};
use serde::Serialize;
use serde_json::Value;

/// The TOML text and what the user must know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The config, ready to save as `portcullis.toml`.
    pub toml: String,
    /// Variables the user must export (replaced secrets), with where they
    /// came from; sorted, one row per place.
    pub variables: Vec<(String, String)>,
    /// Entries that were skipped, and why.
    pub skipped: Vec<String>,
    /// Other things worth saying (unsupported placeholders and the like).
    pub notes: Vec<String>,
    /// Each replaced secret's value by its variable, for `client connect`,
    /// which puts them in the client entry's `env` (where they were
    /// already). An `envFile`'s values are not read, so not here.
    pub values: BTreeMap<String, String>,
    /// Variables that stand for two different values (two servers with
    /// the same secret `env` name): one `${VAR}` cannot carry both.
    pub clashes: Vec<String>,
}

impl Imported {
    /// The variable names, each once, sorted.
    pub fn variable_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.variables.iter().map(|(v, _)| v.clone()).collect();
        names.dedup();
        names
    }
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

/// What one server's conversion needs to write into.
struct Ctx<'a> {
    server: &'a str,
    imported: &'a mut Imported,
}

impl Ctx<'_> {
    /// Records `var` as a variable to export for `field`; returns `${var}`.
    fn variable(&mut self, var: &str, field: String) -> String {
        self.imported.variables.push((var.to_owned(), field));
        format!("${{{var}}}")
    }

    /// [`Ctx::variable`] for a secret whose value was in the file.
    fn secret(&mut self, var: &str, field: String, value: &str) -> String {
        if let Some(previous) = self
            .imported
            .values
            .insert(var.to_owned(), value.to_owned())
            && previous != value
        {
            self.imported.clashes.push(var.to_owned());
        }
        self.variable(var, field)
    }

    /// The derived variable name for `part` of this server.
    fn derived(&self, part: &str) -> String {
        variable_name(self.server, part)
    }
}

/// Converts the JSON config `text` into Portcullis TOML. `file` is where
/// the text came from: a VS Code `envFile` is found relative to it.
pub fn import(text: &str, file: Option<&Path>) -> anyhow::Result<Imported> {
    let parsed = parse_mcp_servers_json(text)?;
    // The parser keeps no `envFile`; read it from the entry itself.
    let raw: Value = serde_json::from_str(text)?;
    let mut imported = Imported {
        toml: String::new(),
        variables: Vec::new(),
        skipped: parsed
            .diagnostics
            .iter()
            .map(|d| d.message.clone())
            .collect(),
        notes: Vec::new(),
        values: BTreeMap::new(),
        clashes: Vec::new(),
    };
    let mut document = Document {
        upstreams: BTreeMap::new(),
    };
    for server in parsed.servers {
        let name = server.name().to_owned();
        let server_kind = server.transport();
        let env_file = ["mcpServers", "servers"]
            .iter()
            .find_map(|key| raw[key][&name]["envFile"].as_str())
            .map(str::to_owned);
        let mut ctx = Ctx {
            server: &name,
            imported: &mut imported,
        };
        let entry = match server {
            McpServerConfig::Stdio(stdio) => {
                let mut env = BTreeMap::new();
                for (key, value) in stdio.env {
                    let value = if value.contains("${") {
                        vscode_placeholders(&value, &mut ctx.imported.notes)
                    } else if looks_secret(&key, &value) {
                        ctx.secret(&key, format!("upstreams.{name}.env.{key}"), &value)
                    } else {
                        value
                    };
                    env.insert(key, value);
                }
                if let Some(env_file) = env_file {
                    env_file_variables(&mut ctx, &env_file, file, &mut env);
                }
                let args = secret_args(&mut ctx, &stdio.args);
                Entry {
                    kind: "stdio",
                    url: None,
                    command: Some(stdio.command),
                    args,
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
                        ctx.imported.notes.push(format!(
                            "upstreams.{name} is imported as streamable-http, but its url looks like a legacy SSE endpoint; \
                             set type = \"sse\" if the server speaks HTTP+SSE"
                        ));
                    }
                    "streamable-http"
                };
                let mut headers = BTreeMap::new();
                for (key, value) in remote.headers {
                    let value = if value.contains("${") {
                        vscode_placeholders(&value, &mut ctx.imported.notes)
                    } else if secret_name(&key) || secret_value(&value) {
                        let var = ctx.derived(&key);
                        let field = format!("upstreams.{name}.headers.{key}");
                        match value.split_once(' ') {
                            Some((scheme, secret))
                                if scheme.eq_ignore_ascii_case("bearer")
                                    || scheme.eq_ignore_ascii_case("basic") =>
                            {
                                let reference = ctx.secret(&var, field, secret);
                                format!("{scheme} {reference}")
                            }
                            _ => ctx.secret(&var, field, &value),
                        }
                    } else {
                        value
                    };
                    headers.insert(key, value);
                }
                let url = secret_query(&mut ctx, &remote.url);
                Entry {
                    kind,
                    url: Some(url),
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
    imported.variables.dedup();
    imported.toml = format!(
        "# Imported by `portcullis import`. Secrets are ${{VAR}} references: export them before `portcullis serve`.\n{}",
        toml::to_string(&document)?
    );
    Ok(imported)
}

/// Arguments with credentials replaced: the value after a credential-named
/// flag (`--api-key VALUE`, `--token=VALUE`), and any argument that looks
/// like a credential by itself.
fn secret_args(ctx: &mut Ctx<'_>, args: &[String]) -> Vec<String> {
    let server = ctx.server.to_owned();
    let field = |i: usize| format!("upstreams.{server}.args[{i}]");
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg.contains("${") {
            out.push(vscode_placeholders(arg, &mut ctx.imported.notes));
            i += 1;
            continue;
        }
        let flag = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'));
        if let Some(flag) = flag {
            if let Some((name, value)) = flag.split_once('=') {
                if !value.is_empty() && (secret_name(name) || secret_value(value)) {
                    let var = ctx.derived(name);
                    let reference = ctx.secret(&var, field(i), value);
                    out.push(format!(
                        "{}={reference}",
                        &arg[..arg.len() - value.len() - 1]
                    ));
                } else {
                    out.push(arg.clone());
                }
                i += 1;
                continue;
            }
            if secret_name(flag)
                && let Some(value) = args.get(i + 1).filter(|v| !v.starts_with('-'))
                && !value.contains("${")
            {
                out.push(arg.clone());
                let var = ctx.derived(flag);
                out.push(ctx.secret(&var, field(i + 1), value));
                i += 2;
                continue;
            }
        }
        if secret_value(arg) {
            let var = ctx.derived(&format!("arg_{i}"));
            out.push(ctx.secret(&var, field(i), arg));
        } else {
            out.push(arg.clone());
        }
        i += 1;
    }
    out
}

/// `url` with each credential-looking query value (`?api_key=…`, or a
/// value that looks like a key) replaced by a derived variable.
fn secret_query(ctx: &mut Ctx<'_>, url: &str) -> String {
    let (before_fragment, fragment) = match url.find('#') {
        Some(at) => (&url[..at], &url[at..]),
        None => (url, ""),
    };
    let Some((base, query)) = before_fragment.split_once('?') else {
        return url.to_owned();
    };
    let name = ctx.server.to_owned();
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value))
                if !value.is_empty()
                    && !value.contains("${")
                    && (secret_name(key) || secret_value(value)) =>
            {
                let var = ctx.derived(key);
                let reference =
                    ctx.secret(&var, format!("upstreams.{name}.url (query {key})"), value);
                format!("{key}={reference}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}{fragment}", pairs.join("&"))
}

/// Most an `envFile` may hold (a dotenv file is a few lines).
const MAX_ENV_FILE_BYTES: u64 = 1024 * 1024;

/// A VS Code `envFile`'s variables, each added to `env` as `${NAME}` (an
/// explicit `env` entry of the same name wins, as in VS Code). The file's
/// values are never read into the TOML: the user exports them.
fn env_file_variables(
    ctx: &mut Ctx<'_>,
    env_file: &str,
    file: Option<&Path>,
    env: &mut BTreeMap<String, String>,
) {
    let name = ctx.server.to_owned();
    let path = env_file_path(env_file, file);
    // A regular file only, and bounded: the path comes from the imported
    // file, and `/dev/zero` or a FIFO named there would never end.
    let text = match portcullis_sources::files::read_regular_to_string(&path, MAX_ENV_FILE_BYTES) {
        Ok(text) => text,
        Err(error) => {
            ctx.imported.notes.push(format!(
                "upstreams.{name}: its envFile {} cannot be read ({error}); set its variables in env yourself",
                path.display()
            ));
            return;
        }
    };
    for line in text.lines() {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if !is_env_name(key) || env.contains_key(key) {
            continue;
        }
        let reference = ctx.variable(
            key,
            format!(
                "upstreams.{name}.env.{key} (from envFile {})",
                path.display()
            ),
        );
        env.insert(key.to_owned(), reference);
    }
}

/// Where an `envFile` is: `${workspaceFolder}` is the folder holding
/// `.vscode/` (or the config's own folder), and a relative path is relative
/// to that folder too.
fn env_file_path(env_file: &str, file: Option<&Path>) -> PathBuf {
    let dir = file
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let workspace = if dir.file_name().is_some_and(|n| n == ".vscode") {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        dir
    };
    let replaced = env_file.replace("${workspaceFolder}", &workspace.display().to_string());
    let path = PathBuf::from(replaced);
    if path.is_absolute() {
        path
    } else {
        workspace.join(path)
    }
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// True when `url`'s path ends in `/sse`, the usual endpoint of a legacy
/// HTTP+SSE server.
fn looks_like_sse(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.trim_end_matches('/').ends_with("/sse")
}

/// Whether an env entry holds a credential: its name says so, or its value
/// looks like one (the `secret-in-env` diagnostic's heuristic, widened to more names,
/// token prefixes and URLs with a password).
pub fn looks_secret(key: &str, value: &str) -> bool {
    secret_name(key) || secret_value(value)
}

/// A name (env variable, header, query parameter, flag) that says
/// credential: one of its words (split at `_`, `-`, `.`) is a credential
/// word, unless another word says it only points at one (`file`, `path`).
fn secret_name(name: &str) -> bool {
    const WORDS: [&str; 19] = [
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pass",
        "pwd",
        "passphrase",
        "key",
        "apikey",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "private",
        "signature",
        "sig",
        "dsn",
    ];
    const POINTERS: [&str; 4] = ["file", "path", "dir", "name"];
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().any(|w| WORDS.contains(w)) && !words.iter().any(|w| POINTERS.contains(w))
}

/// A value that looks like a credential whatever its name: a well-known
/// token prefix, an `Authorization` scheme, a URL carrying a password or a
/// credential-named query parameter, or a long random-looking string.
fn secret_value(value: &str) -> bool {
    const PREFIXES: [&str; 17] = [
        "sk-",
        "sk_",
        "pk_",
        "rk_",
        "fc-",
        "ghp_",
        "gho_",
        "ghs_",
        "ghu_",
        "github_pat_",
        "xoxb-",
        "xoxa-",
        "xoxp-",
        "xoxr-",
        "xoxs-",
        "glpat-",
        "AKIA",
    ];
    let value = value.trim();
    let lower = value.to_ascii_lowercase();
    // `AKIA` is upper case by definition; the others in any case.
    if PREFIXES
        .iter()
        .any(|p| value.starts_with(p) || lower.starts_with(p))
        || lower.starts_with("bearer ")
        || lower.starts_with("basic ")
        || value.contains("-----BEGIN")
        || (value.starts_with("eyJ") && value.matches('.').count() == 2)
    {
        return true;
    }
    if let Some(scheme_end) = value.find("://") {
        let rest = &value[scheme_end + 3..];
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if authority
            .rfind('@')
            .is_some_and(|at| authority[..at].contains(':'))
        {
            return true;
        }
        if let Some((_, query)) = rest.split_once('?') {
            return query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .any(|(k, v)| !v.is_empty() && secret_name(k));
        }
        return false;
    }
    value.len() >= 32
        && !value.contains(char::is_whitespace)
        && !value.contains('/')
        && value.chars().any(|c| c.is_ascii_digit())
        && value.chars().any(|c| c.is_ascii_alphabetic())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=_-.".contains(c))
}

fn variable_name(server: &str, part: &str) -> String {
    format!("{server}_{part}")
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

    /// Eleven secrets of the kinds real configs carry, each planted once.
    const PLANTED: &str = r#"{"mcpServers": {
      "aws": {"command": "aws-mcp",
               "args": ["--api-key", "PLANTED-1-apikey-arg", "--token=PLANTED-2-token-arg", "--region", "eu-west-1",
                        "sk-PLANTED-3-bare-key-arg"],
               "env": {"AWS_SECRET_ACCESS_KEY": "PLANTED-4/aws+secret", "AWS_REGION": "eu-west-1",
                       "DATABASE_URL": "postgres://app:PLANTED-5-db-password@db.internal:5432/app",
                       "GITHUB_TOKEN": "PLANTED-6-github-token"}},
      "docs": {"url": "https://mcp.example.com/mcp?api_key=PLANTED-7-query&team=core",
               "headers": {"X-API-Key": "PLANTED-8-x-api-key", "Cookie": "sid=PLANTED-9-cookie",
                           "Authorization": "Bearer PLANTED-10-bearer", "X-Team": "core",
                           "X-Client": "ghp_PLANTED11headerbyvalue"}}
    }}"#;

    #[test]
    fn every_planted_secret_becomes_a_variable() {
        let imported = import(PLANTED, None).unwrap();
        let toml = &imported.toml;
        assert!(!toml.contains("PLANTED"), "{toml}");
        for expected in [
            r#""--api-key", "${AWS_API_KEY}""#,
            r#""--token=${AWS_TOKEN}""#,
            r#""${AWS_ARG_5}""#,
            r#"AWS_SECRET_ACCESS_KEY = "${AWS_SECRET_ACCESS_KEY}""#,
            r#"DATABASE_URL = "${DATABASE_URL}""#,
            r#"GITHUB_TOKEN = "${GITHUB_TOKEN}""#,
            r#"url = "https://mcp.example.com/mcp?api_key=${DOCS_API_KEY}&team=core""#,
            r#"X-API-Key = "${DOCS_X_API_KEY}""#,
            r#"Cookie = "${DOCS_COOKIE}""#,
            r#"Authorization = "Bearer ${DOCS_AUTHORIZATION}""#,
            r#"X-Client = "${DOCS_X_CLIENT}""#,
            // Not secrets: kept as written.
            r#""--region", "eu-west-1""#,
            r#"AWS_REGION = "eu-west-1""#,
            r#"X-Team = "core""#,
        ] {
            assert!(toml.contains(expected), "{expected}: {toml}");
        }
        assert_eq!(
            imported.variable_names(),
            [
                "AWS_API_KEY",
                "AWS_ARG_5",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_TOKEN",
                "DATABASE_URL",
                "DOCS_API_KEY",
                "DOCS_AUTHORIZATION",
                "DOCS_COOKIE",
                "DOCS_X_API_KEY",
                "DOCS_X_CLIENT",
                "GITHUB_TOKEN"
            ]
        );
        // Every variable says where its secret was.
        assert!(
            imported
                .variables
                .contains(&("AWS_API_KEY".into(), "upstreams.aws.args[1]".into())),
            "{:?}",
            imported.variables
        );
        // And the result loads once they are set.
        let env = |name: &str| Some(format!("value-of-{name}"));
        let config = config::parse(Path::new("imported.toml"), toml, &env).unwrap();
        assert_eq!(config.upstreams.len(), 2);
    }

    #[test]
    fn a_vscode_env_file_becomes_variables_and_its_values_stay_out() {
        let dir = tempfile::tempdir().unwrap();
        let vscode = dir.path().join(".vscode");
        std::fs::create_dir(&vscode).unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "# secrets\nexport API_TOKEN=PLANTED-env-file\nPLAIN = PLANTED-too\n\nnot a line\nEXPLICIT=PLANTED-overridden\n",
        )
        .unwrap();
        let json = vscode.join("mcp.json");
        let text = r#"{"servers": {"gh": {"type": "stdio", "command": "gh-mcp",
            "envFile": "${workspaceFolder}/.env", "env": {"EXPLICIT": "kept"}}}}"#;
        let imported = import(text, Some(&json)).unwrap();
        let toml = &imported.toml;
        assert!(!toml.contains("PLANTED"), "{toml}");
        assert!(toml.contains(r#"API_TOKEN = "${API_TOKEN}""#), "{toml}");
        assert!(toml.contains(r#"PLAIN = "${PLAIN}""#), "{toml}");
        assert!(toml.contains(r#"EXPLICIT = "kept""#), "{toml}");
        assert_eq!(imported.variable_names(), ["API_TOKEN", "PLAIN"]);
        assert!(
            imported.variables[0].1.contains("envFile"),
            "{:?}",
            imported.variables
        );
        // A relative envFile is relative to the workspace; a missing one is
        // a note, not a failure.
        let text = r#"{"servers": {"gh": {"type": "stdio", "command": "gh-mcp", "envFile": "missing.env"}}}"#;
        let imported = import(text, Some(&json)).unwrap();
        assert_eq!(imported.notes.len(), 1, "{:?}", imported.notes);
        assert!(imported.notes[0].contains("missing.env"));
    }

    #[test]
    fn secrets_become_variables_and_the_result_loads() {
        let imported = import(CLAUDE, None).unwrap();
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
        let imported = import(vscode, None).unwrap();
        assert!(
            imported.toml.contains("GH_HOST = \"${GH_HOST}\""),
            "{}",
            imported.toml
        );
        assert_eq!(imported.notes.len(), 1);
        assert!(import("{}", None).is_err());
        assert!(import("not json", None).is_err());
    }

    #[test]
    fn the_parsers_transport_is_kept_and_an_sse_looking_url_is_flagged() {
        let text = r#"{"mcpServers": {
            "typed": {"type": "sse", "url": "https://old.example.com/events"},
            "untyped": {"url": "https://old.example.com/sse/"},
            "http": {"type": "http", "url": "https://new.example.com/mcp"}
        }}"#;
        let imported = import(text, None).unwrap();
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
    fn secret_heuristic_matches_names_prefixes_and_url_credentials() {
        assert!(looks_secret("OPENAI_API_KEY", "x"));
        assert!(looks_secret("token", "x"));
        assert!(looks_secret("DB_PASSWORD", "x"));
        assert!(looks_secret("ANYTHING", "sk-live"));
        assert!(!looks_secret("TOKENIZER", "bpe"));
        assert!(!looks_secret("LOG_LEVEL", "debug"));
        assert!(looks_secret("AWS_SECRET_ACCESS_KEY", "x"));
        assert!(looks_secret("DATABASE_URL", "postgres://u:pw@h/db"));
        assert!(!looks_secret("DATABASE_URL", "postgres://h/db"));
        assert!(!looks_secret("SSH_KEY_PATH", "~/.ssh/id_ed25519"));
    }
}

/// Property tests of the importer: whatever the file holds, the TOML it
/// writes parses back and declares no `[gateway]` keys (no injection through
/// names or values), or the import fails. `PROPTEST_CASES` sets the number
/// of cases (default 256).
#[cfg(test)]
mod fuzz {
    use super::*;
    use portcullis_upstream::strategies::servers_file;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_imports_or_errs(text in "\\PC{0,200}") {
            let _ = import(&text, None);
        }

        #[test]
        fn imported_toml_parses_and_injects_nothing(file in servers_file()) {
            if let Ok(imported) = import(&file.to_string(), None) {
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
