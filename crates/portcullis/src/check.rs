//! `portcullis check`: validate the config and say what it sets up.
//!
//! A config that loads is summarised (what listens where, which guards are
//! on, which sources are declared). Every source is loaded as `serve` loads
//! it — Agent Plugins directories (`plugin.json`, `mcp.json`), native
//! `mcp-plugin.json` manifests (handlers resolved inside the plugin), route
//! tables and OpenAPI documents — and every diagnostic is printed: errors
//! (something would not load) make `check` exit 2, warnings (it loads, with
//! a remark) do not. Then every upstream (and every Agent Plugin's server)
//! is connected once, without retries, and each that fails is named with
//! why (`check` exits 1; one that needs an OAuth login is named as such);
//! `--offline` skips that. Nothing is written — no trust baseline is
//! recorded and no signing key is created — but an OAuth grant that the
//! connection refreshed, which is stored again (a rotated refresh token
//! must not be lost).

use std::fmt::Write as _;

use portcullis_catalog::ToolFilter;

use crate::config::{AppDescription, Approval, Config, StoreChoice, UpstreamTransport};
use crate::sources::{Severity, Signing, SourceKind};

/// A config URL as it may be printed: credentials masked, an expanded
/// `${VAR}` shown as the variable.
fn redacted(config: &Config, url: &str) -> String {
    let url = portcullis_catalog::redact::url(url);
    crate::redact::replace_known(&url, &config.redactions).into_owned()
}

/// A problem `check` found beyond what loading the config rejects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether it stops something from loading.
    pub severity: Severity,
    /// What, and where.
    pub text: String,
}

impl Finding {
    fn error(text: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Error,
            text: text.into(),
        }
    }

    /// Whether it makes `check` fail.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: {}", self.text)
    }
}

/// The human-readable summary of `config`, and the problems found.
pub fn summarize(config: &Config) -> (String, Vec<Finding>) {
    let mut out = String::new();
    let mut findings = Vec::new();
    let g = &config.gateway;
    let _ = writeln!(out, "{}: ok", config.path.display());
    let _ = writeln!(
        out,
        "  gateway: HTTP on {}{}; token {}; write tools {}; approval {}",
        g.listen,
        if g.listen.ip().is_loopback() {
            ""
        } else {
            " (NOT loopback: anything that can reach this address can call the tools)"
        },
        if g.token.is_some() {
            "required"
        } else {
            "not required"
        },
        if g.allow_write { "exposed" } else { "withheld" },
        match &g.approval {
            Approval::Never => "off".to_owned(),
            Approval::Writes => "for every write".to_owned(),
            Approval::Tools(tools) => format!("for {}", tools.join(", ")),
        }
    );
    let store = match &g.store {
        StoreChoice::Sqlite => format!("SQLite in {}", g.data_dir.display()),
        StoreChoice::Memory => {
            "memory (nothing persists: no trust baseline across restarts)".to_owned()
        }
        StoreChoice::Postgres(_) => "PostgreSQL".to_owned(),
    };
    let _ = writeln!(
        out,
        "  store: {store}; prefix {:?}; max output {} characters",
        g.prefix, g.max_output_length
    );
    if !g.allowed_hosts.is_empty() || !g.allowed_origins.is_empty() {
        let _ = writeln!(
            out,
            "  extra Host values: [{}]; admitted Origins: [{}]",
            g.allowed_hosts.join(", "),
            g.allowed_origins.join(", ")
        );
    }
    if !g.allow_tools.is_empty() {
        let _ = writeln!(
            out,
            "  only these tools are exposed: {}",
            g.allow_tools.join(", ")
        );
    }
    if let Some(identity) = &g.identity {
        let _ = writeln!(
            out,
            "  identity: {} with perms [{}]",
            identity.user,
            identity.perms.join(", ")
        );
    }
    if let Some(oauth) = &g.oauth {
        let _ = writeln!(
            out,
            "  callers: access tokens of {} for {} (scopes required: [{}])",
            redacted(config, &oauth.issuer),
            redacted(config, &oauth.audience),
            oauth.required_scopes.join(", ")
        );
    }
    for upstream in config.upstreams.values() {
        let how = match &upstream.transport {
            UpstreamTransport::Stdio {
                command, args, env, ..
            } => format!("stdio: {command} (+{} args, {} env)", args.len(), env.len()),
            UpstreamTransport::Remote { kind, url, headers } => format!(
                "{} {} ({} headers)",
                kind.as_str(),
                redacted(config, url.expose()),
                headers.len()
            ),
        };
        let listed = |names: &std::collections::BTreeSet<String>| {
            names.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        let filter = match &upstream.tools {
            ToolFilter::All => String::new(),
            ToolFilter::Allow(names) => format!("; shows only {}", listed(names)),
            ToolFilter::Block(names) => format!("; hides {}", listed(names)),
        };
        let timeout = upstream
            .timeout_ms
            .map_or_else(String::new, |ms| format!("; timeout {ms} ms"));
        // Whether it logs in, never with what (the secret stays out).
        let login = match &upstream.oauth {
            Some(o) if o.unattended() => format!("; logs in with OAuth: {}", o.grant.describe()),
            Some(o) if o.client_id.is_some() => {
                "; logs in with OAuth (pre-registered client)".into()
            }
            Some(_) => "; logs in with OAuth".into(),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  upstream {}: {how}{filter}{timeout}{login}",
            upstream.name
        );
        if let UpstreamTransport::Stdio { cwd: Some(cwd), .. } = &upstream.transport
            && !cwd.is_dir()
        {
            findings.push(Finding::error(format!(
                "upstreams.{}.cwd: {} is not a directory",
                upstream.name,
                cwd.display()
            )));
        }
    }
    for (kind, dirs) in [
        ("plugins", &config.plugins),
        ("tool_plugins", &config.tool_plugins),
    ] {
        for dir in dirs {
            let _ = writeln!(out, "  {kind}: {}", dir.display());
        }
    }
    for app in config.apps.values() {
        let file = match &app.description {
            AppDescription::Routes(path) | AppDescription::OpenApi(path) => path,
        };
        let _ = writeln!(
            out,
            "  app {}: {} → {}",
            app.name,
            file.display(),
            redacted(config, &app.base_url)
        );
    }
    // Load every source as `serve` would, without a key: what would not
    // load is an error, a remark is a warning.
    let loaded = crate::sources::load(config, &Signing::Unsigned);
    if !loaded.plugin_servers.is_empty() {
        let names: Vec<&str> = loaded.plugin_servers.iter().map(|s| s.name()).collect();
        let _ = writeln!(out, "  plugin MCP servers: {}", names.join(", "));
    }
    for source in &loaded.sources {
        let kind = match source.kind {
            SourceKind::ToolPlugin => "tool plugin",
            SourceKind::App => "app",
        };
        let tools: Vec<&str> = source
            .registrations
            .iter()
            .map(|r| r.tool.name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "  {kind} {}: {} tool(s): {}",
            source.name,
            tools.len(),
            tools.join(", ")
        );
    }
    findings.extend(loaded.findings.iter().map(|f| Finding {
        severity: f.severity,
        text: f.to_string(),
    }));
    let mut servers: std::collections::BTreeSet<&str> =
        config.upstreams.keys().map(String::as_str).collect();
    servers.extend(loaded.plugin_servers.iter().map(|s| s.name()));
    servers.extend(loaded.sources.iter().map(|s| s.name.as_str()));
    let unknown: Vec<&str> = config
        .disclosure
        .always_load
        .iter()
        .map(String::as_str)
        .filter(|s| !servers.contains(s))
        .collect();
    if !unknown.is_empty() {
        findings.push(Finding::error(format!(
            "disclosure.always_load names servers that are not upstreams or sources: {}",
            unknown.join(", ")
        )));
    }
    (out, findings)
}

/// How connecting one server went, for `check`.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The server's configured name.
    pub server: String,
    /// How many tools it listed (0 when it failed).
    pub tools: usize,
    /// Why it could not be connected, if it could not.
    pub failure: Option<String>,
    /// It logs in with OAuth and has no usable grant: a person must run
    /// `portcullis auth login NAME` (not an outage).
    pub needs_login: bool,
}

/// Connects every upstream and Agent Plugin server of `config` once, with
/// no retries, and closes them again. Nothing is trusted or recorded; an
/// upstream that logs in with OAuth uses its stored grant (refreshed and
/// stored again if it falls due: a refresh token the server rotated must
/// not be lost).
pub async fn connect_all(config: &Config) -> anyhow::Result<Vec<Connected>> {
    let mut servers = crate::gateway::server_configs(config)?;
    let loaded = crate::sources::load(config, &Signing::Unsigned);
    servers.extend(loaded.plugin_servers.iter().cloned());
    if servers.is_empty() {
        return Ok(Vec::new());
    }
    let mut options =
        crate::gateway::connect_options(config).with_reconnect(portcullis_upstream::Backoff::NEVER);
    let oauth = if config.upstreams.values().any(|u| u.oauth.is_some()) {
        let store = crate::trust::open_store(config).await?;
        let keeper = portcullis_gateway::oauth::keeper(config, &store)?;
        portcullis_gateway::oauth::OAuthUpstreams::open(config, keeper, false, None).await?
    } else {
        portcullis_gateway::oauth::OAuthUpstreams::default()
    };
    options = oauth.apply(options);
    let names: Vec<String> = servers.iter().map(|s| s.name().to_owned()).collect();
    let toolset = portcullis_upstream::connect(servers, options).await?;
    let missing: std::collections::HashMap<String, String> =
        crate::gateway::missing(&toolset).into_iter().collect();
    let needing_login = oauth.needing_login().await;
    let catalogue = toolset.catalogue();
    let rows = catalogue.status_rows();
    toolset.close().await;
    oauth.flush().await;
    Ok(names
        .into_iter()
        .map(|server| Connected {
            tools: rows.iter().filter(|r| r.source == server).count(),
            needs_login: needing_login.contains(&server),
            failure: missing.get(&server).cloned(),
            server,
        })
        .collect())
}
