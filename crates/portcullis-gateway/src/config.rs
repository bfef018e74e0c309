//! The gateway config: `portcullis.toml`, read, validated, with secrets
//! expanded from the environment.
//!
//! The key names are a user-facing contract (see ARCHITECTURE.md): extend,
//! never rename. Loading is strict so a typo fails loudly instead of silently
//! disabling a guard: unknown keys are errors, and every error names the
//! file, the line and column, and the field (`upstreams.docs.type`).
//!
//! Secrets come from the environment only: `${VAR}` is expanded in the
//! values that may carry one (the token, header and env values, URLs,
//! arguments, the store URL). A missing variable is an error naming both the
//! field and the variable. Expanded values are held as [`Secret`]s, whose
//! `Debug` never prints them, so a config dumped to a log leaks nothing.
//! Relative paths are resolved against the directory of the config file.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use portcullis_catalog::classification::Classification;
use portcullis_catalog::error_mapping::codes::ERR_INVALID_MCP_TOKEN;
use portcullis_catalog::naming::Prefix;
use portcullis_catalog::{Budget, ToolFilter, TransportKind};
use portcullis_sources::files::read_regular_to_string;
use serde::Deserialize;
use serde_json::Value;

// The redaction rules own the type; the config is where secrets come from.
pub use crate::redact::Secret;

/// The default HTTP listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";

/// How long the person at the client has to answer an approval question
/// when `approval_timeout_ms` is not set.
pub const DEFAULT_APPROVAL_TIMEOUT_MS: u64 = 120_000;

/// How often remote upstreams are pinged when `health_interval_ms` is not
/// set: often enough for an alert within a minute, rare enough to cost the
/// upstream nothing.
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 30_000;

/// The longest delay between attempts to reopen an upstream whose
/// connection ended, when `reconnect_max_ms` is not set.
pub const DEFAULT_RECONNECT_MAX_MS: u64 = 30_000;

/// How long `serve` waits for its upstreams before it serves the tools of
/// those ready, when `start_timeout_ms` is not set: long enough that a
/// quick server is there from the first listing, short enough that a slow
/// one does not keep every client waiting.
pub const DEFAULT_START_TIMEOUT_MS: u64 = 5_000;

/// Days the audit trail is kept when `audit_retention_days` is not set: it
/// holds no argument values and answers "who called what", so a month.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u64 = 30;

/// Days the effect log is kept when `effects_retention_days` is not set: it
/// holds tool results (values) only so a replayed turn is not run twice,
/// which happens within hours, so a week.
pub const DEFAULT_EFFECTS_RETENTION_DAYS: u64 = 7;

/// The longest retention window accepted, in days (a century): longer is
/// `0`, keep forever.
pub const MAX_RETENTION_DAYS: u64 = 36_500;

/// `max_connections` when not set (the HTTP surface's default).
pub const DEFAULT_MAX_CONNECTIONS: usize = portcullis_server::http::DEFAULT_MAX_CONNECTIONS;

/// `header_read_timeout_ms` when not set.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 =
    portcullis_server::http::DEFAULT_HEADER_READ_TIMEOUT.as_millis() as u64;

/// `idle_timeout_ms` when not set.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 =
    portcullis_server::http::DEFAULT_IDLE_TIMEOUT.as_millis() as u64;

/// `max_sessions` when not set.
pub const DEFAULT_MAX_SESSIONS: usize = portcullis_server::http::DEFAULT_MAX_SESSIONS;

/// `session_idle_timeout_ms` when not set.
pub const DEFAULT_SESSION_IDLE_TIMEOUT_MS: u64 =
    portcullis_server::http::DEFAULT_SESSION_IDLE_TIMEOUT.as_millis() as u64;

/// A loaded, validated config.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// `[gateway]`.
    pub gateway: Gateway,
    /// `[disclosure]`.
    pub disclosure: Disclosure,
    /// `[upstreams.NAME]`, by name.
    pub upstreams: BTreeMap<String, Upstream>,
    /// `[[plugins]]`: Agent Plugins directories.
    pub plugins: Vec<PathBuf>,
    /// `[[tool_plugins]]`: native `mcp-plugin.json` directories.
    pub tool_plugins: Vec<PathBuf>,
    /// `[apps.NAME]`, by name.
    pub apps: BTreeMap<String, App>,
    /// Every value in this config that must never be printed or logged,
    /// with what to show instead: each `${VAR}` expansion (shown as
    /// `${VAR}`), header values, the token, URL query values (`***`).
    /// See [`crate::redact`].
    pub redactions: Vec<(Secret, String)>,
}

/// `[gateway]`.
#[derive(Debug, Clone)]
pub struct Gateway {
    /// The HTTP surface's address.
    pub listen: SocketAddr,
    /// Extra `Host` values to admit.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values to admit.
    pub allowed_origins: Vec<String>,
    /// Bearer token required on `/mcp`, if any.
    pub token: Option<Secret>,
    /// Take OAuth access tokens of an identity provider on `/mcp` instead
    /// of `token` (`[gateway.oauth]`); exclusive with `token`.
    pub oauth: Option<OAuth>,
    /// HTTP connections served at once (`max_connections`); `None` (`0`):
    /// no cap.
    pub max_connections: Option<usize>,
    /// How long a connection may take to send a request's headers
    /// (`header_read_timeout_ms`); `None` (`0`): no limit.
    pub header_read_timeout: Option<Duration>,
    /// How long a kept-alive connection may wait for its next request
    /// (`idle_timeout_ms`); `None` (`0`): no limit.
    pub idle_timeout: Option<Duration>,
    /// Initialize-era HTTP sessions alive at once (`max_sessions`); `None`
    /// (`0`): no cap.
    pub max_sessions: Option<usize>,
    /// How long such a session may go without a message
    /// (`session_idle_timeout_ms`); `None` (`0`): never closed for it.
    pub session_idle_timeout: Option<Duration>,
    /// Expose tools not declared read-only.
    pub allow_write: bool,
    /// Expose only these qualified names (writes included).
    pub allow_tools: Vec<String>,
    /// Whether an upstream's own `readOnlyHint` classifies its tools
    /// read-only (`trust_annotations`, default true); each upstream may say
    /// otherwise.
    pub trust_annotations: bool,
    /// Which calls ask the person at the client first.
    pub approval: Approval,
    /// How long the person has to answer an approval question
    /// (`approval_timeout_ms`); unanswered by then, the call is refused.
    pub approval_timeout: Duration,
    /// How often each remote upstream (Streamable HTTP, SSE) is pinged to
    /// tell whether it is up (`health_interval_ms`); `None` (`0`): never,
    /// only failed calls mark it down.
    pub health_interval: Option<Duration>,
    /// The longest delay between attempts to reopen an upstream whose
    /// connection ended (`reconnect_max_ms`; the first comes after 250 ms,
    /// doubling); `None` (`0`): never reopened.
    pub reconnect_max: Option<Duration>,
    /// How long `serve` waits at start for its upstreams before serving
    /// the tools of those ready (`start_timeout_ms`; `0`: serve at once);
    /// the others join when ready, and clients are told.
    pub start_timeout: Duration,
    /// How long `serve` keeps audit records (`audit_retention_days`);
    /// `None` (`0`): forever. See `crate::retention`.
    pub audit_retention: Option<Duration>,
    /// How long `serve` keeps effect-log records (`effects_retention_days`);
    /// `None` (`0`): forever.
    pub effects_retention: Option<Duration>,
    /// The identity sent with application calls.
    pub identity: Option<Identity>,
    /// Cap, in characters, on one call's output (every content kind and
    /// `structuredContent`).
    pub max_output_length: usize,
    /// Whether tool names carry their source's name.
    pub prefix: Prefix,
    /// The gateway's data directory (SQLite store, keys), absolute.
    pub data_dir: PathBuf,
    /// Where catalogues, baselines and the effect log live.
    pub store: StoreChoice,
}

/// Which calls need a person's approval.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Approval {
    /// None.
    #[default]
    Never,
    /// Every tool not declared read-only.
    Writes,
    /// These qualified names.
    Tools(Vec<String>),
}

/// The identity the gateway acts as towards applications.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// Who (e.g. `{ userId = "mcp-agent" }`).
    pub user: Value,
    /// What it may do.
    pub perms: Vec<String>,
}

/// `[gateway.oauth]`: the gateway as a protected resource of one identity
/// provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth {
    /// The authorization server's issuer identifier.
    pub issuer: String,
    /// The gateway's public URL of `/mcp`, the audience tokens must name.
    pub audience: String,
    /// Where the issuer's keys are, if not from its metadata.
    pub jwks_uri: Option<String>,
    /// Scopes every token must hold.
    pub required_scopes: Vec<String>,
}

impl OAuth {
    /// The HTTP surface's options for this table.
    pub fn options(&self) -> portcullis_server::oauth::OAuthOptions {
        let mut options = portcullis_server::oauth::OAuthOptions::new(&self.issuer, &self.audience);
        options.jwks_uri = self.jwks_uri.clone();
        options.required_scopes = self.required_scopes.clone();
        options
    }
}

/// Where the store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// An SQLite file in the data directory (the default).
    Sqlite,
    /// Nothing persists (tests, throwaway runs).
    Memory,
    /// A PostgreSQL database shared by replicas.
    Postgres(Secret),
}

/// `[disclosure]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disclosure {
    /// Tokens per server.
    pub budget: Budget,
    /// Servers that always inline their schemas.
    pub always_load: Vec<String>,
}

/// One `[upstreams.NAME]` table.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Its name (the table key).
    pub name: String,
    /// How to reach it.
    pub transport: UpstreamTransport,
    /// Per-connection timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// What the model may see of it.
    pub tools: ToolFilter,
    /// Which of its tools only read: the operator's `read_only` and
    /// `writes` lists, and whether its own `readOnlyHint` counts
    /// (`trust_annotations`, defaulting to `[gateway]`'s).
    pub classification: Classification,
    /// For a remote upstream: the only hosts it and its redirects may reach
    /// besides its own URL's host (`None`: any public host). A host listed
    /// here may also be on loopback, a private network or link-local.
    pub allowed_hosts: Option<Vec<String>>,
    /// `[upstreams.NAME.oauth]`: the gateway logs in to this (remote)
    /// upstream with OAuth 2.1 (`portcullis auth login NAME`).
    pub oauth: Option<UpstreamOAuth>,
}

/// The redirect port of `portcullis auth login` when `redirect_port` is not
/// set: fixed, so the redirect URI (`http://127.0.0.1:8766/callback`) can
/// be registered with an authorization server that matches it exactly;
/// the gateway's default port plus one.
pub const DEFAULT_REDIRECT_PORT: u16 = 8766;

/// The JWS algorithm of a `client_key_file` when `client_key_algorithm` is
/// not set: ECDSA P-256, the most widely supported asymmetric one.
pub const DEFAULT_CLIENT_KEY_ALGORITHM: &str = "ES256";

/// `[upstreams.NAME.oauth]`: how the gateway presents itself to the
/// upstream's authorization server. Every key is optional: with none, the
/// client registers itself (client ID metadata document or dynamic
/// registration) and asks for the scopes the server names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamOAuth {
    /// A client registered beforehand at the authorization server.
    pub client_id: Option<String>,
    /// Its secret (`${VAR}`), if it has one; never printed.
    pub client_secret: Option<Secret>,
    /// The issuer `client_id` belongs to; the client is not presented to
    /// another one.
    pub issuer: Option<String>,
    /// The HTTPS URL of the gateway's client ID metadata document.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for instead of the server's.
    pub scopes: Vec<String>,
    /// The loopback port the login's redirect comes back to (`0`: any free
    /// port).
    pub redirect_port: u16,
    /// The pre-registered client's private key (a PEM file, resolved
    /// against the config's directory): with it the client authenticates
    /// with signed assertions (`private_key_jwt`) instead of a secret.
    pub client_key_file: Option<PathBuf>,
    /// The JWS algorithm of `client_key_file` (`ES256` unless set).
    pub client_key_algorithm: String,
    /// DPoP-bound tokens: unset, when the servers ask for them; `true`
    /// always; `false` never.
    pub dpop: Option<bool>,
    /// How the grant is obtained: a person's login, or unattended.
    pub grant: UpstreamGrant,
}

impl UpstreamOAuth {
    /// Whether the grant is obtained without a person (a JWT bearer grant).
    pub fn unattended(&self) -> bool {
        !matches!(self.grant, UpstreamGrant::Login)
    }
}

/// How an OAuth upstream's grant is obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamGrant {
    /// A person logs in (`portcullis auth login`): the authorization code
    /// flow, or the client's own credentials where the server offers only
    /// those.
    Login,
    /// Workload identity: the JWT in `assertion_file` (issued by the
    /// platform the gateway runs on, re-read at each grant) is presented
    /// with the JWT bearer grant.
    Workload {
        /// The platform's token file.
        assertion_file: PathBuf,
    },
    /// Enterprise-managed authorization: the ID token in `id_token_file` is
    /// exchanged at the enterprise identity provider for an ID-JAG, which
    /// is presented with the JWT bearer grant.
    Enterprise {
        /// The ID token's file (re-read at each grant).
        id_token_file: PathBuf,
        /// The identity provider's issuer (its token endpoint discovered),
        /// exclusive with `idp_token_endpoint`.
        idp_issuer: Option<String>,
        /// The identity provider's token endpoint.
        idp_token_endpoint: Option<String>,
        /// The gateway's client id at the identity provider.
        idp_client_id: String,
        /// Its secret there (`${VAR}`), if it has one; never printed.
        idp_client_secret: Option<Secret>,
    },
}

impl UpstreamGrant {
    /// What `check` and `auth status` call it.
    pub fn describe(&self) -> &'static str {
        match self {
            UpstreamGrant::Login => "login",
            UpstreamGrant::Workload { .. } => "workload identity (jwt-bearer)",
            UpstreamGrant::Enterprise { .. } => "enterprise-managed (ID-JAG)",
        }
    }
}

/// How an upstream is reached.
#[derive(Debug, Clone)]
pub enum UpstreamTransport {
    /// A child process.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments (may carry expanded secrets).
        args: Vec<Secret>,
        /// Extra environment.
        env: BTreeMap<String, Secret>,
        /// Working directory, absolute.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP or legacy SSE.
    Remote {
        /// Which of the two.
        kind: TransportKind,
        /// The endpoint (may carry an expanded secret in its query).
        url: Secret,
        /// Headers sent with every request.
        headers: BTreeMap<String, Secret>,
    },
}

/// `[apps.NAME]`: an application's route table or OpenAPI document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// Its name.
    pub name: String,
    /// Where its routes are described.
    pub description: AppDescription,
    /// Where it listens.
    pub base_url: String,
    /// Per-call timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Where the gateway writes its public key, absolute.
    pub key_file: Option<PathBuf>,
}

/// An application's self-description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppDescription {
    /// An `mdk-plugin.json` route table, absolute.
    Routes(PathBuf),
    /// An OpenAPI document, absolute.
    OpenApi(PathBuf),
}

/// Why a config cannot be used: where, which field, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line and column, when known.
    pub position: Option<(usize, usize)>,
    /// The dotted field path, when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, column)) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

// ---- the file as written -------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    gateway: RawGateway,
    #[serde(default)]
    disclosure: RawDisclosure,
    #[serde(default)]
    upstreams: BTreeMap<String, RawUpstream>,
    #[serde(default)]
    plugins: Vec<RawPathEntry>,
    #[serde(default)]
    tool_plugins: Vec<RawPathEntry>,
    #[serde(default)]
    apps: BTreeMap<String, RawApp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    listen: Option<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    token: Option<String>,
    max_connections: Option<usize>,
    header_read_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_sessions: Option<usize>,
    session_idle_timeout_ms: Option<u64>,
    #[serde(default)]
    allow_write: bool,
    #[serde(default)]
    allow_tools: Vec<String>,
    trust_annotations: Option<bool>,
    approval: Option<RawApproval>,
    approval_timeout_ms: Option<u64>,
    health_interval_ms: Option<u64>,
    reconnect_max_ms: Option<u64>,
    start_timeout_ms: Option<u64>,
    audit_retention_days: Option<u64>,
    effects_retention_days: Option<u64>,
    identity: Option<RawIdentity>,
    oauth: Option<RawOAuth>,
    max_output_length: Option<usize>,
    prefix: Option<String>,
    data_dir: Option<PathBuf>,
    store: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawApproval {
    Word(String),
    Tools(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    user: Value,
    #[serde(default)]
    perms: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuth {
    issuer: String,
    audience: String,
    jwks_uri: Option<String>,
    #[serde(default)]
    required_scopes: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDisclosure {
    #[serde(default)]
    budget: Budget,
    #[serde(default)]
    always_load: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    #[serde(rename = "type")]
    kind: TransportKind,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    timeout_ms: Option<u64>,
    tools: Option<RawToolFilter>,
    allowed_hosts: Option<Vec<String>>,
    read_only: Option<Vec<String>>,
    writes: Option<Vec<String>>,
    trust_annotations: Option<bool>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<PathBuf>,
    oauth: Option<RawUpstreamOAuth>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstreamOAuth {
    client_id: Option<String>,
    client_secret: Option<String>,
    issuer: Option<String>,
    client_metadata_url: Option<String>,
    scopes: Option<Vec<String>>,
    redirect_port: Option<u16>,
    client_key_file: Option<PathBuf>,
    client_key_algorithm: Option<String>,
    dpop: Option<bool>,
    assertion_file: Option<PathBuf>,
    id_token_file: Option<PathBuf>,
    idp_issuer: Option<String>,
    idp_token_endpoint: Option<String>,
    idp_client_id: Option<String>,
    idp_client_secret: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolFilter {
    allow: Option<Vec<String>>,
    block: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPathEntry {
    path: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    routes: Option<PathBuf>,
    openapi: Option<PathBuf>,
    base_url: String,
    timeout_ms: Option<u64>,
    key_file: Option<PathBuf>,
}

/// A host as `allowed_hosts` lists it: a name or an address, nothing more.
fn is_bare_host(host: &str) -> bool {
    let inner = host.trim_start_matches('[').trim_end_matches(']');
    !inner.is_empty()
        && (inner.parse::<std::net::IpAddr>().is_ok()
            || inner
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
}

// ---- loading --------------------------------------------------------------

/// Far more than any config holds; a bigger file is refused, not read.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Reads and validates the config at `path`, expanding `${VAR}` from the
/// process environment.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    // A regular file only: a FIFO would block the read (and the signals
    // behind it) forever.
    let text = read_regular_to_string(path, MAX_CONFIG_BYTES).map_err(|e| ConfigError {
        file: path.to_owned(),
        position: None,
        field: None,
        message: if e.is_not_found() {
            "no such file; pass --config FILE or create ./portcullis.toml (see examples/portcullis.toml)"
                .to_owned()
        } else {
            e.to_string()
        },
    })?;
    parse(path, &text, &|name| std::env::var(name).ok())
}

/// Parses and validates config text. `env` looks variables up (the process
/// environment in production; a map in tests).
pub fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    // An unknown key is reported with the key that was probably meant.
    if let Some(first) = unknown_keys(path, text).into_iter().next() {
        return Err(first);
    }
    let raw: RawConfig = {
        let deserializer =
            toml::Deserializer::parse(text).map_err(|e| syntax_error(path, text, &e))?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            ConfigError {
                position: inner.span().map(|s| line_column(text, s.start)),
                field: (field != "." && !field.is_empty()).then_some(field),
                message: inner.message().to_owned(),
                file: path.to_owned(),
            }
        })?
    };
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let seen = RefCell::new(Vec::new());
    let validated = Validator {
        path,
        text,
        env,
        base: &base,
        seen: &seen,
    }
    .config(raw);
    let seen = seen.into_inner();
    match validated {
        Ok(mut config) => {
            config.redactions = seen;
            Ok(config)
        }
        // An error may quote a value; one that came from the environment
        // (or a header, a query) is shown as its `${VAR}` or `***`.
        Err(mut error) => {
            error.message = crate::redact::replace_known(&error.message, &seen).into_owned();
            Err(error)
        }
    }
}

// ---- every unknown key at once -------------------------------------------

/// The keys each table of the file accepts, by the table's place: what the
/// `Raw*` structs above deserialize (a unit test keeps the two in step).
/// `*` is any name (an upstream's, an app's), `[]` an array's element.
/// Tables not listed (`headers`, `env`) take any key.
const KNOWN_KEYS: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "gateway",
            "disclosure",
            "upstreams",
            "plugins",
            "tool_plugins",
            "apps",
        ],
    ),
    (
        "gateway",
        &[
            "listen",
            "allowed_hosts",
            "allowed_origins",
            "token",
            "max_connections",
            "header_read_timeout_ms",
            "idle_timeout_ms",
            "max_sessions",
            "session_idle_timeout_ms",
            "allow_write",
            "allow_tools",
            "trust_annotations",
            "approval",
            "approval_timeout_ms",
            "health_interval_ms",
            "reconnect_max_ms",
            "start_timeout_ms",
            "audit_retention_days",
            "effects_retention_days",
            "identity",
            "oauth",
            "max_output_length",
            "prefix",
            "data_dir",
            "store",
        ],
    ),
    ("gateway.identity", &["user", "perms"]),
    (
        "gateway.oauth",
        &["issuer", "audience", "jwks_uri", "required_scopes"],
    ),
    ("disclosure", &["budget", "always_load"]),
    (
        "upstreams.*",
        &[
            "type",
            "url",
            "headers",
            "timeout_ms",
            "tools",
            "allowed_hosts",
            "read_only",
            "writes",
            "trust_annotations",
            "command",
            "args",
            "env",
            "cwd",
            "oauth",
        ],
    ),
    ("upstreams.*.tools", &["allow", "block"]),
    (
        "upstreams.*.oauth",
        &[
            "client_id",
            "client_secret",
            "issuer",
            "client_metadata_url",
            "scopes",
            "redirect_port",
            "client_key_file",
            "client_key_algorithm",
            "dpop",
            "assertion_file",
            "id_token_file",
            "idp_issuer",
            "idp_token_endpoint",
            "idp_client_id",
            "idp_client_secret",
        ],
    ),
    ("plugins.[]", &["path"]),
    ("tool_plugins.[]", &["path"]),
    (
        "apps.*",
        &["routes", "openapi", "base_url", "timeout_ms", "key_file"],
    ),
];

/// Every key of the file that no table accepts, each with its file, line,
/// column and, when one is close, the key that was probably meant. Loading
/// stops at the first error; `check` lists them all with this. A file that
/// does not parse as TOML yields nothing here (loading reports that).
pub fn unknown_keys(path: &Path, text: &str) -> Vec<ConfigError> {
    let Ok(document) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    walk_table(path, text, document.get_ref(), "", "", &mut found);
    found
}

/// The schema place of a child: `upstreams` + `docs` is `upstreams.*`.
fn child_place(place: &str, key: &str) -> String {
    match place {
        "" => key.to_owned(),
        "upstreams" | "apps" => format!("{place}.*"),
        _ => format!("{place}.{key}"),
    }
}

fn walk_table(
    path: &Path,
    text: &str,
    table: &toml::de::DeTable<'_>,
    place: &str,
    dotted: &str,
    found: &mut Vec<ConfigError>,
) {
    let known = KNOWN_KEYS
        .iter()
        .find(|(p, _)| *p == place)
        .map(|(_, keys)| *keys);
    // The maps of upstreams and apps take any name; free-form tables
    // (headers, env) any key.
    let any_key = matches!(place, "upstreams" | "apps") || known.is_none();
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        let field = if dotted.is_empty() {
            name.to_owned()
        } else {
            format!("{dotted}.{name}")
        };
        if !any_key
            && let Some(known) = known
            && !known.contains(&name)
        {
            let suggestion = known
                .iter()
                .map(|k| (strsim::jaro_winkler(name, k), *k))
                .filter(|(score, _)| *score >= 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, k)| k);
            let hint = match suggestion {
                Some(k) => format!("unknown key `{name}`; did you mean `{k}`?"),
                None => format!("unknown key `{name}`; expected one of {}", known.join(", ")),
            };
            found.push(ConfigError {
                file: path.to_owned(),
                position: Some(line_column(text, key.span().start)),
                field: Some(field),
                message: hint,
            });
            continue;
        }
        let next = child_place(place, name);
        match value.get_ref() {
            toml::de::DeValue::Table(inner)
                if !any_key || place == "upstreams" || place == "apps" =>
            {
                walk_table(path, text, inner, &next, &field, found);
            }
            toml::de::DeValue::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    if let toml::de::DeValue::Table(inner) = item.get_ref() {
                        walk_table(
                            path,
                            text,
                            inner,
                            &format!("{next}.[]"),
                            &format!("{field}[{index}]"),
                            found,
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

fn syntax_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    ConfigError {
        file: path.to_owned(),
        position: e.span().map(|s| line_column(text, s.start)),
        field: None,
        message: e.message().to_owned(),
    }
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
    base: &'a Path,
    /// The values never to print, found so far.
    seen: &'a RefCell<Vec<(Secret, String)>>,
}

impl Validator<'_> {
    fn error(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let field = field.into();
        ConfigError {
            file: self.path.to_owned(),
            position: self.locate(&field),
            field: Some(field),
            message: message.into(),
        }
    }

    /// Best-effort position of a field after parsing (serde no longer has
    /// spans then): the line of its table header or key.
    fn locate(&self, field: &str) -> Option<(usize, usize)> {
        let mut parts = field.split('.');
        let table = parts.next()?;
        let key = parts.next();
        let header = match (table, key) {
            ("upstreams" | "apps", Some(name)) => format!("[{table}.{name}]"),
            _ => format!("[{table}]"),
        };
        // A sub-table of its own (`[upstreams.docs.oauth]`), when the
        // field is in one written as such.
        let nested = field
            .rsplit_once('.')
            .map(|(parent, _)| format!("[{parent}]"))
            .filter(|h| h.len() > header.len())
            .and_then(|h| self.text.find(&h));
        // The field is itself a table written as a header.
        if let Some(own) = self.text.find(&format!("[{field}]")) {
            return Some(line_column(self.text, own));
        }
        let start = match nested {
            Some(start) => start,
            None => self.text.find(&header)?,
        };
        let leaf = field.rsplit('.').next().unwrap_or(field);
        let within = &self.text[start..];
        let at = within
            .lines()
            .scan(0usize, |offset, line| {
                let here = *offset;
                *offset += line.len() + 1;
                Some((here, line))
            })
            .skip(1)
            .take_while(|(_, line)| !line.trim_start().starts_with('['))
            .find(|(_, line)| line.trim_start().starts_with(leaf))
            .map_or(0, |(offset, _)| offset);
        Some(line_column(self.text, start + at))
    }

    fn expand(&self, field: &str, value: &str) -> Result<Secret, ConfigError> {
        let recording = |name: &str| {
            let found = (self.env)(name);
            if let Some(found) = &found {
                self.hide(crate::redact::redaction(found, format!("${{{name}}}")));
            }
            found
        };
        expand_env(value, &recording)
            .map(Secret::new)
            .map_err(|var| {
                self.error(
                    field,
                    format!("environment variable {var} is not set (referenced as ${{{var}}})"),
                )
            })
    }

    /// Records a value never to print.
    fn hide(&self, redaction: Option<(Secret, String)>) {
        if let Some(redaction) = redaction {
            self.seen.borrow_mut().push(redaction);
        }
    }

    /// A remote URL checked, its userinfo and query values recorded as
    /// secrets. An error shows the URL as written (`${VAR}` unexpanded),
    /// query values masked.
    fn remote_url(&self, field: &str, raw: &str, url: &Secret) -> Result<(), ConfigError> {
        use portcullis_catalog::redact;
        match portcullis_upstream::config::check_remote_url(url.expose()) {
            Ok(parsed) => {
                for (_, value) in parsed.query_pairs() {
                    self.hide(crate::redact::masked(&value));
                }
                Ok(())
            }
            Err(message) => {
                let message = message.replace(&redact::url(url.expose()), &redact::url(raw));
                Err(self.error(field, message))
            }
        }
    }

    fn path(&self, relative: &Path) -> PathBuf {
        if relative.is_absolute() {
            relative.to_owned()
        } else {
            self.base.join(relative)
        }
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let gateway = self.gateway(raw.gateway)?;
        let mut upstreams = BTreeMap::new();
        for (name, upstream) in raw.upstreams {
            let trust = upstream.trust_annotations;
            let mut upstream = self.upstream(&name, upstream)?;
            upstream.classification.trust_claims = trust.unwrap_or(gateway.trust_annotations);
            upstreams.insert(name, upstream);
        }
        let mut apps = BTreeMap::new();
        for (name, app) in raw.apps {
            let app = self.app(&name, app)?;
            apps.insert(name, app);
        }
        Ok(Config {
            path: self.path.to_owned(),
            gateway,
            disclosure: Disclosure {
                budget: raw.disclosure.budget,
                always_load: raw.disclosure.always_load,
            },
            upstreams,
            plugins: raw.plugins.iter().map(|p| self.path(&p.path)).collect(),
            tool_plugins: raw
                .tool_plugins
                .iter()
                .map(|p| self.path(&p.path))
                .collect(),
            apps,
            redactions: Vec::new(),
        })
    }

    fn gateway(&self, raw: RawGateway) -> Result<Gateway, ConfigError> {
        let listen_text = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen: SocketAddr = listen_text.parse().map_err(|_| {
            self.error(
                "gateway.listen",
                format!(
                    "\"{listen_text}\" is not an IP address and port such as \"{DEFAULT_LISTEN}\""
                ),
            )
        })?;
        let token = match raw.token {
            None => None,
            Some(token) => {
                let token = self.expand("gateway.token", &token)?;
                self.hide(crate::redact::masked(token.expose()));
                if token.expose().is_empty() {
                    return Err(self.error(
                        "gateway.token",
                        format!("{ERR_INVALID_MCP_TOKEN}: the token is empty; set a non-empty token or remove the key"),
                    ));
                }
                Some(token)
            }
        };
        let oauth = match raw.oauth {
            None => None,
            Some(_) if token.is_some() => {
                return Err(self.error(
                    "gateway.oauth",
                    "cannot be used together with gateway.token: a request carries one bearer token; remove one of them",
                ));
            }
            Some(raw) => {
                let oauth = OAuth {
                    issuer: raw.issuer,
                    audience: raw.audience,
                    jwks_uri: raw.jwks_uri,
                    required_scopes: raw.required_scopes,
                };
                oauth
                    .options()
                    .validate()
                    .map_err(|e| self.error("gateway.oauth", e.to_string()))?;
                Some(oauth)
            }
        };
        let approval = match raw.approval {
            None => Approval::Never,
            Some(RawApproval::Word(word)) if word == "writes" => Approval::Writes,
            Some(RawApproval::Word(word)) => {
                return Err(self.error(
                    "gateway.approval",
                    format!("\"{word}\" is not understood; use \"writes\" or a list of qualified tool names"),
                ));
            }
            Some(RawApproval::Tools(tools)) if tools.is_empty() => Approval::Never,
            Some(RawApproval::Tools(tools)) => Approval::Tools(tools),
        };
        let approval_timeout_ms = raw
            .approval_timeout_ms
            .unwrap_or(DEFAULT_APPROVAL_TIMEOUT_MS);
        if approval_timeout_ms == 0 {
            return Err(self.error(
                "gateway.approval_timeout_ms",
                "must be at least 1 millisecond (the person needs time to answer)",
            ));
        }
        let health_interval = match raw.health_interval_ms.unwrap_or(DEFAULT_HEALTH_INTERVAL_MS) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        let reconnect_max = match raw.reconnect_max_ms.unwrap_or(DEFAULT_RECONNECT_MAX_MS) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        let start_timeout =
            Duration::from_millis(raw.start_timeout_ms.unwrap_or(DEFAULT_START_TIMEOUT_MS));
        // `0` turns a limit off, as for the intervals above.
        let millis = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        let count = |n: usize| (n > 0).then_some(n);
        let audit_retention = self.retention(
            "gateway.audit_retention_days",
            raw.audit_retention_days
                .unwrap_or(DEFAULT_AUDIT_RETENTION_DAYS),
        )?;
        let effects_retention = self.retention(
            "gateway.effects_retention_days",
            raw.effects_retention_days
                .unwrap_or(DEFAULT_EFFECTS_RETENTION_DAYS),
        )?;
        let prefix = match raw.prefix.as_deref() {
            None => Prefix::Auto,
            Some(text) => text
                .parse()
                .map_err(|e: String| self.error("gateway.prefix", e))?,
        };
        let store = match raw.store.as_deref() {
            None | Some("sqlite") => StoreChoice::Sqlite,
            Some("memory") => StoreChoice::Memory,
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                StoreChoice::Postgres(self.expand("gateway.store", url)?)
            }
            Some(other) => {
                return Err(self.error(
                    "gateway.store",
                    format!("\"{other}\" is not a store; use \"sqlite\", \"memory\" or a postgres:// URL"),
                ));
            }
        };
        let max_output_length = raw
            .max_output_length
            .unwrap_or(portcullis_catalog::framing::DEFAULT_MAX_OUTPUT_LENGTH);
        if max_output_length == 0 {
            return Err(self.error("gateway.max_output_length", "must be at least 1"));
        }
        Ok(Gateway {
            listen,
            allowed_hosts: raw.allowed_hosts,
            allowed_origins: raw.allowed_origins,
            token,
            oauth,
            max_connections: count(raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS)),
            header_read_timeout: millis(
                raw.header_read_timeout_ms
                    .unwrap_or(DEFAULT_HEADER_READ_TIMEOUT_MS),
            ),
            idle_timeout: millis(raw.idle_timeout_ms.unwrap_or(DEFAULT_IDLE_TIMEOUT_MS)),
            max_sessions: count(raw.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS)),
            session_idle_timeout: millis(
                raw.session_idle_timeout_ms
                    .unwrap_or(DEFAULT_SESSION_IDLE_TIMEOUT_MS),
            ),
            allow_write: raw.allow_write,
            allow_tools: raw.allow_tools,
            trust_annotations: raw.trust_annotations.unwrap_or(true),
            approval,
            approval_timeout: Duration::from_millis(approval_timeout_ms),
            health_interval,
            reconnect_max,
            start_timeout,
            audit_retention,
            effects_retention,
            identity: raw.identity.map(|i| Identity {
                user: i.user,
                perms: i.perms,
            }),
            max_output_length,
            prefix,
            data_dir: self.path(&raw.data_dir.unwrap_or_else(|| PathBuf::from(".portcullis"))),
            store,
        })
    }

    /// A retention window of `days` (`0`: forever) for `field`.
    fn retention(&self, field: &str, days: u64) -> Result<Option<Duration>, ConfigError> {
        match days {
            0 => Ok(None),
            days if days > MAX_RETENTION_DAYS => Err(self.error(
                field,
                format!(
                    "{days} days is more than {MAX_RETENTION_DAYS}; use 0 to keep records forever"
                ),
            )),
            days => Ok(Some(Duration::from_secs(days * 86_400))),
        }
    }

    fn upstream(&self, name: &str, raw: RawUpstream) -> Result<Upstream, ConfigError> {
        let at = |key: &str| format!("upstreams.{name}.{key}");
        if name.is_empty() {
            return Err(self.error("upstreams", "an upstream needs a non-empty name"));
        }
        let tools = match raw.tools {
            None => ToolFilter::All,
            Some(filter) => ToolFilter::from_lists(filter.allow, filter.block)
                .map_err(|e| self.error(at("tools"), e.to_string()))?,
        };
        let transport = match raw.kind {
            TransportKind::Stdio => {
                for (key, present) in [
                    ("url", raw.url.is_some()),
                    ("headers", raw.headers.is_some()),
                    ("allowed_hosts", raw.allowed_hosts.is_some()),
                    ("oauth", raw.oauth.is_some()),
                ] {
                    if present {
                        return Err(self.error(
                            at(key),
                            format!("a stdio upstream has no {key}; remove it, or set type = \"streamable-http\""),
                        ));
                    }
                }
                let Some(command) = raw.command.filter(|c| !c.trim().is_empty()) else {
                    return Err(
                        self.error(at("command"), "a stdio upstream needs a command to run")
                    );
                };
                let mut args = Vec::new();
                for (i, arg) in raw.args.unwrap_or_default().iter().enumerate() {
                    args.push(self.expand(&format!("{}[{i}]", at("args")), arg)?);
                }
                let mut env = BTreeMap::new();
                for (key, value) in raw.env.unwrap_or_default() {
                    let value = self.expand(&format!("{}.{key}", at("env")), &value)?;
                    env.insert(key, value);
                }
                UpstreamTransport::Stdio {
                    command,
                    args,
                    env,
                    cwd: raw.cwd.map(|c| self.path(&c)),
                }
            }
            kind => {
                for (key, present) in [
                    ("command", raw.command.is_some()),
                    ("args", raw.args.is_some()),
                    ("env", raw.env.is_some()),
                    ("cwd", raw.cwd.is_some()),
                ] {
                    if present {
                        return Err(self.error(
                            at(key),
                            format!(
                                "a {} upstream has no {key}; remove it, or set type = \"stdio\"",
                                kind.as_str()
                            ),
                        ));
                    }
                }
                let Some(url) = raw.url else {
                    return Err(self.error(
                        at("url"),
                        format!("a {} upstream needs a url", kind.as_str()),
                    ));
                };
                let expanded = self.expand(&at("url"), &url)?;
                self.remote_url(&at("url"), &url, &expanded)?;
                let url = expanded;
                let mut headers = BTreeMap::new();
                let mut seen = std::collections::BTreeSet::new();
                for (key, value) in raw.headers.unwrap_or_default() {
                    if !seen.insert(key.to_ascii_lowercase()) {
                        return Err(self.error(
                            format!("{}.{key}", at("headers")),
                            "this header is set twice (header names ignore case)",
                        ));
                    }
                    let value = self.expand(&format!("{}.{key}", at("headers")), &value)?;
                    // A header carries a credential more often than not:
                    // the value, and the part after `Bearer ` or `Basic `.
                    self.hide(crate::redact::masked(value.expose()));
                    if let Some((_, credential)) = value.expose().split_once(' ') {
                        self.hide(crate::redact::masked(credential.trim()));
                    }
                    headers.insert(key, value);
                }
                UpstreamTransport::Remote { kind, url, headers }
            }
        };
        if raw.timeout_ms == Some(0) {
            return Err(self.error(at("timeout_ms"), "must be at least 1 millisecond"));
        }
        if let Some(hosts) = &raw.allowed_hosts
            && let Some(bad) = hosts.iter().find(|h| !is_bare_host(h))
        {
            return Err(self.error(
                at("allowed_hosts"),
                format!(
                    "\"{}\" is not a host name or address; list bare hosts such as \"mcp.example.com\" (no scheme, port or path, no wildcards)",
                    bad.escape_debug()
                ),
            ));
        }
        let oauth = match raw.oauth {
            None => None,
            Some(oauth) => Some(self.upstream_oauth(name, oauth, &transport)?),
        };
        Ok(Upstream {
            name: name.to_owned(),
            oauth,
            transport,
            timeout_ms: raw.timeout_ms,
            tools,
            classification: Classification {
                read_only: raw.read_only.unwrap_or_default(),
                writes: raw.writes.unwrap_or_default(),
                trust_claims: true,
            },
            allowed_hosts: raw.allowed_hosts,
        })
    }

    /// `[upstreams.NAME.oauth]` of a remote upstream, checked.
    fn upstream_oauth(
        &self,
        name: &str,
        raw: RawUpstreamOAuth,
        transport: &UpstreamTransport,
    ) -> Result<UpstreamOAuth, ConfigError> {
        let at = |key: &str| format!("upstreams.{name}.oauth.{key}");
        if let UpstreamTransport::Remote { headers, .. } = transport
            && let Some(key) = headers
                .keys()
                .find(|k| k.eq_ignore_ascii_case("authorization"))
        {
            return Err(self.error(
                format!("upstreams.{name}.headers.{key}"),
                "cannot be used together with [upstreams.NAME.oauth]: the login supplies the Authorization header; remove one of them",
            ));
        }
        let text = |key: &str, value: Option<String>| -> Result<Option<String>, ConfigError> {
            match value {
                Some(v) if v.trim().is_empty() => {
                    Err(self.error(at(key), "must not be empty; remove it instead"))
                }
                other => Ok(other),
            }
        };
        let client_id = text("client_id", raw.client_id.clone())?;
        let grant = self.upstream_grant(name, &raw, client_id.is_some())?;
        let client_secret = match raw.client_secret {
            None => None,
            Some(raw_secret) => {
                if client_id.is_none() {
                    return Err(self.error(
                        at("client_secret"),
                        "a client_secret needs the client_id it belongs to",
                    ));
                }
                let secret = self.expand(&at("client_secret"), &raw_secret)?;
                // Written in the file rather than as `${VAR}`: still never
                // printed.
                self.hide(crate::redact::masked(secret.expose()));
                Some(secret)
            }
        };
        let client_key_file = raw.client_key_file.map(|file| self.path(&file));
        if client_key_file.is_some() {
            if client_id.is_none() {
                return Err(self.error(
                    at("client_key_file"),
                    "a client_key_file needs the client_id it belongs to",
                ));
            }
            if client_secret.is_some() {
                return Err(self.error(
                    at("client_key_file"),
                    "a client authenticates with a secret or with a key, not both; remove client_secret or client_key_file",
                ));
            }
        }
        let client_key_algorithm = match text("client_key_algorithm", raw.client_key_algorithm)? {
            Some(_) if client_key_file.is_none() => {
                return Err(self.error(
                    at("client_key_algorithm"),
                    "names the algorithm of client_key_file, which is not set",
                ));
            }
            Some(algorithm) => algorithm,
            None => DEFAULT_CLIENT_KEY_ALGORITHM.to_owned(),
        };
        let issuer = text("issuer", raw.issuer)?;
        if let Some(issuer) = &issuer {
            self.oauth_url(&at("issuer"), issuer, false)?;
        }
        let client_metadata_url = text("client_metadata_url", raw.client_metadata_url)?;
        if let Some(url) = &client_metadata_url {
            self.oauth_url(&at("client_metadata_url"), url, true)?;
        }
        let scopes = raw.scopes.unwrap_or_default();
        if let Some(bad) = scopes
            .iter()
            .find(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(self.error(
                at("scopes"),
                format!(
                    "\"{}\" is not a scope: list each scope on its own, without spaces",
                    bad.escape_debug()
                ),
            ));
        }
        Ok(UpstreamOAuth {
            client_id,
            client_secret,
            issuer,
            client_metadata_url,
            scopes,
            redirect_port: raw.redirect_port.unwrap_or(DEFAULT_REDIRECT_PORT),
            client_key_file,
            client_key_algorithm,
            dpop: raw.dpop,
            grant,
        })
    }

    /// The grant of `[upstreams.NAME.oauth]`: a person's login unless
    /// `assertion_file` (workload identity) or `id_token_file`
    /// (enterprise-managed, with its `idp_*` keys) is set.
    fn upstream_grant(
        &self,
        name: &str,
        raw: &RawUpstreamOAuth,
        has_client_id: bool,
    ) -> Result<UpstreamGrant, ConfigError> {
        let at = |key: &str| format!("upstreams.{name}.oauth.{key}");
        let both = |a: &str, b: &str, why: &str| {
            self.error(
                at(b),
                format!("cannot be used together with {a}: {why}; remove one of them"),
            )
        };
        let unattended = match (&raw.assertion_file, &raw.id_token_file) {
            (Some(_), Some(_)) => {
                return Err(both(
                    "assertion_file",
                    "id_token_file",
                    "the workload's own token and an enterprise ID token are two different grants",
                ));
            }
            (Some(_), None) => Some("assertion_file"),
            (None, Some(_)) => Some("id_token_file"),
            (None, None) => None,
        };
        if let Some(key) = unattended {
            // No person and no browser: the keys of a person's login make
            // no sense here.
            if raw.client_metadata_url.is_some() {
                return Err(both(
                    key,
                    "client_metadata_url",
                    "the client ID metadata document is for a person's login, and this grant has none",
                ));
            }
            if raw.redirect_port.is_some() {
                return Err(both(
                    key,
                    "redirect_port",
                    "no browser comes back to this grant",
                ));
            }
        }
        let idp_keys = [
            ("idp_issuer", raw.idp_issuer.is_some()),
            ("idp_token_endpoint", raw.idp_token_endpoint.is_some()),
            ("idp_client_id", raw.idp_client_id.is_some()),
            ("idp_client_secret", raw.idp_client_secret.is_some()),
        ];
        if raw.id_token_file.is_none()
            && let Some((key, _)) = idp_keys.iter().find(|(_, set)| *set)
        {
            return Err(self.error(
                at(key),
                "belongs to the enterprise-managed grant, which needs id_token_file (the ID token to exchange)",
            ));
        }
        if let Some(file) = &raw.assertion_file {
            return Ok(UpstreamGrant::Workload {
                assertion_file: self.path(file),
            });
        }
        let Some(file) = &raw.id_token_file else {
            return Ok(UpstreamGrant::Login);
        };
        let text = |key: &str, value: &Option<String>| -> Result<Option<String>, ConfigError> {
            match value {
                Some(v) if v.trim().is_empty() => {
                    Err(self.error(at(key), "must not be empty; remove it instead"))
                }
                other => Ok(other.clone()),
            }
        };
        let idp_issuer = text("idp_issuer", &raw.idp_issuer)?;
        let idp_token_endpoint = text("idp_token_endpoint", &raw.idp_token_endpoint)?;
        match (&idp_issuer, &idp_token_endpoint) {
            (Some(_), Some(_)) => {
                return Err(both(
                    "idp_issuer",
                    "idp_token_endpoint",
                    "the token endpoint is either discovered from the issuer or given",
                ));
            }
            (None, None) => {
                return Err(self.error(
                    at("id_token_file"),
                    "needs the identity provider that exchanges it: set idp_issuer (or idp_token_endpoint)",
                ));
            }
            (Some(url), None) => self.oauth_url(&at("idp_issuer"), url, false)?,
            (None, Some(url)) => self.oauth_url(&at("idp_token_endpoint"), url, false)?,
        }
        let Some(idp_client_id) = text("idp_client_id", &raw.idp_client_id)? else {
            return Err(self.error(
                at("id_token_file"),
                "needs idp_client_id, the client the identity provider knows the gateway by",
            ));
        };
        if !has_client_id {
            return Err(self.error(
                at("id_token_file"),
                "needs client_id, the client the ID-JAG is issued to at the upstream's authorization server",
            ));
        }
        let idp_client_secret = match &raw.idp_client_secret {
            None => None,
            Some(raw_secret) => {
                let secret = self.expand(&at("idp_client_secret"), raw_secret)?;
                self.hide(crate::redact::masked(secret.expose()));
                Some(secret)
            }
        };
        Ok(UpstreamGrant::Enterprise {
            id_token_file: self.path(file),
            idp_issuer,
            idp_token_endpoint,
            idp_client_id,
            idp_client_secret,
        })
    }

    /// An OAuth URL: `https://` (or, unless `https_only`, `http://` to a
    /// loopback host), with a host, no credentials and no fragment.
    fn oauth_url(&self, field: &str, raw: &str, https_only: bool) -> Result<(), ConfigError> {
        let url = portcullis_upstream::config::check_remote_url(raw)
            .map_err(|message| self.error(field, message))?;
        if https_only && url.scheme() != "https" {
            return Err(self.error(
                field,
                format!(
                    "\"{}\" must be an https URL",
                    portcullis_catalog::redact::url(raw)
                ),
            ));
        }
        Ok(())
    }

    fn app(&self, name: &str, raw: RawApp) -> Result<App, ConfigError> {
        let at = |key: &str| format!("apps.{name}.{key}");
        let description = match (raw.routes, raw.openapi) {
            (Some(routes), None) => AppDescription::Routes(self.path(&routes)),
            (None, Some(openapi)) => AppDescription::OpenApi(self.path(&openapi)),
            (Some(_), Some(_)) => {
                return Err(self.error(at("openapi"), "set either routes or openapi, not both"));
            }
            (None, None) => {
                return Err(self.error(
                    at("routes"),
                    "an app needs routes = \"…/mdk-plugin.json\" or openapi = \"…/openapi.yaml\"",
                ));
            }
        };
        let base_url = self.expand(&at("base_url"), &raw.base_url)?;
        self.remote_url(&at("base_url"), &raw.base_url, &base_url)?;
        Ok(App {
            name: name.to_owned(),
            description,
            base_url: base_url.expose().to_owned(),
            timeout_ms: raw.timeout_ms,
            key_file: raw.key_file.map(|k| self.path(&k)),
        })
    }
}

/// Expands `${VAR}` (VAR = `[A-Za-z_][A-Za-z0-9_]*`) in `value`. Anything
/// else that contains `$` is left as written. Returns the name of the first
/// variable that is not set.
pub fn expand_env(value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let name_len = after
            .find('}')
            .filter(|&end| is_env_name(&after[..end]))
            .map(|end| end + 1);
        match name_len {
            Some(len) => {
                let name = &after[..len - 1];
                out.push_str(&env(name).ok_or_else(|| name.to_owned())?);
                rest = &after[len..];
            }
            None => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys a `deny_unknown_fields` table accepts, read from the error
    /// serde gives for a key it does not know.
    fn keys_of<T: serde::de::DeserializeOwned + fmt::Debug>() -> Vec<String> {
        let probe = "not_a_key_of_any_table = 1";
        let message = match toml::from_str::<T>(probe) {
            Ok(parsed) => panic!("the probe key was accepted: {parsed:?}"),
            Err(e) => e.to_string(),
        };
        let expected = message
            .split_once("expected")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("no list of keys in: {message}"));
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn known_keys_match_what_deserializes() {
        let expected = [
            ("", keys_of::<RawConfig>()),
            ("gateway", keys_of::<RawGateway>()),
            ("gateway.identity", keys_of::<RawIdentity>()),
            ("gateway.oauth", keys_of::<RawOAuth>()),
            ("disclosure", keys_of::<RawDisclosure>()),
            ("upstreams.*", keys_of::<RawUpstream>()),
            ("upstreams.*.tools", keys_of::<RawToolFilter>()),
            ("upstreams.*.oauth", keys_of::<RawUpstreamOAuth>()),
            ("apps.*", keys_of::<RawApp>()),
        ];
        for (place, keys) in expected {
            let known = KNOWN_KEYS
                .iter()
                .find(|(p, _)| *p == place)
                .map(|(_, k)| k.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>());
            let mut keys = keys;
            keys.sort();
            let mut known = known.unwrap_or_default();
            known.sort();
            assert_eq!(known, keys, "KNOWN_KEYS[{place:?}]");
        }
    }

    #[test]
    fn every_unknown_key_is_reported_with_a_suggestion() {
        let text = "[gateway]\nallowed_host = [\"a\"]\nlisten = \"127.0.0.1:1\"\n\n[upstreams.x]\ntype = \"stdio\"\ncommand = \"c\"\ncomand2 = 1\nzzzz = 2\n[upstreams.x.headers]\nanything = \"ok\"\n";
        let found = unknown_keys(Path::new("p.toml"), text);
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 3, "{shown:?}");
        assert!(
            shown[0].starts_with("p.toml:2:1: gateway.allowed_host: "),
            "{shown:?}"
        );
        assert!(
            shown[0].contains("did you mean `allowed_hosts`"),
            "{shown:?}"
        );
        assert!(shown[1].contains("upstreams.x.comand2"), "{shown:?}");
        assert!(shown[1].contains("did you mean `command`"), "{shown:?}");
        assert!(
            shown[2].contains("upstreams.x.zzzz") && shown[2].contains("expected one of"),
            "{shown:?}"
        );
        // Loading reports the first, with its suggestion.
        let err = parse(Path::new("p.toml"), text, &|_| None).unwrap_err();
        assert_eq!(err.to_string(), shown[0]);
    }

    #[test]
    fn every_config_key_is_in_the_configuration_reference() {
        let reference = include_str!("../../../docs/configuration.md");
        let tables = [
            ("(top level)", keys_of::<RawConfig>()),
            ("[gateway]", keys_of::<RawGateway>()),
            ("[gateway] identity", keys_of::<RawIdentity>()),
            ("[gateway.oauth]", keys_of::<RawOAuth>()),
            ("[disclosure]", keys_of::<RawDisclosure>()),
            ("[upstreams.NAME]", keys_of::<RawUpstream>()),
            ("tools", keys_of::<RawToolFilter>()),
            ("[upstreams.NAME.oauth]", keys_of::<RawUpstreamOAuth>()),
            ("[[plugins]]", keys_of::<RawPathEntry>()),
            ("[apps.NAME]", keys_of::<RawApp>()),
        ];
        let mut missing = Vec::new();
        for (table, keys) in &tables {
            assert!(
                keys.len() >= 2 || *table == "[[plugins]]",
                "{table}: {keys:?}"
            );
            for key in keys {
                let documented = [
                    format!("| `{key}` |"),
                    format!("`[{key}]`"),
                    format!("`[[{key}]]`"),
                    format!("`[{key}.NAME]`"),
                    format!("`{key} = "),
                ]
                .iter()
                .any(|form| reference.contains(form.as_str()));
                if !documented {
                    missing.push(format!("{table} {key}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "docs/configuration.md does not document: {missing:?}"
        );
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "PORTCULLIS_TOKEN" => Some("s3cret-token".into()),
            "DOCS_TOKEN" => Some("docs-bearer".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn parse_text(text: &str) -> Result<Config, ConfigError> {
        parse(Path::new("conf/portcullis.toml"), text, &env)
    }

    const FULL: &str = r#"
[gateway]
listen = "127.0.0.1:9000"
allowed_hosts = ["proxy.local:9000"]
allowed_origins = ["http://localhost:3000"]
token = "${PORTCULLIS_TOKEN}"
allow_write = true
allow_tools = ["files__read_file"]
approval = "writes"
approval_timeout_ms = 45000
health_interval_ms = 0
identity = { user = { userId = "mcp-agent" }, perms = ["read"] }
max_output_length = 5000
prefix = "always"
data_dir = ".portcullis"
store = "sqlite"

[disclosure]
budget = "auto"
always_load = ["docs"]

[upstreams.docs]
type = "streamable-http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
timeout_ms = 30000
tools = { allow = ["search"] }

[upstreams.files]
type = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
env = { LOG = "debug" }
cwd = "work"

[[plugins]]
path = "./plugins/acme"

[[tool_plugins]]
path = "tools/site"

[apps.site]
routes = "./apps/site/mdk-plugin.json"
base_url = "http://127.0.0.1:9100"
key_file = ".portcullis/gateway.pub"
"#;

    #[test]
    fn the_documented_config_loads() {
        let config = parse_text(FULL).unwrap();
        let gateway = &config.gateway;
        assert_eq!(gateway.listen.to_string(), "127.0.0.1:9000");
        assert_eq!(
            gateway.token.as_ref().map(Secret::expose),
            Some("s3cret-token")
        );
        assert_eq!(gateway.approval, Approval::Writes);
        assert_eq!(gateway.approval_timeout, Duration::from_secs(45));
        assert_eq!(gateway.health_interval, None);
        assert_eq!(gateway.prefix, Prefix::Always);
        assert_eq!(gateway.data_dir, Path::new("conf/.portcullis"));
        assert_eq!(gateway.identity.as_ref().unwrap().perms, ["read"]);
        assert_eq!(config.disclosure.budget, Budget::Auto);
        let docs = &config.upstreams["docs"];
        match &docs.transport {
            UpstreamTransport::Remote { kind, headers, .. } => {
                assert_eq!(*kind, TransportKind::StreamableHttp);
                assert_eq!(headers["Authorization"].expose(), "Bearer docs-bearer");
            }
            other => panic!("{other:?}"),
        }
        assert!(docs.tools.admits("docs__search", "search"));
        assert!(!docs.tools.admits("docs__delete", "delete"));
        match &config.upstreams["files"].transport {
            UpstreamTransport::Stdio { cwd, args, .. } => {
                assert_eq!(cwd.as_deref(), Some(Path::new("conf/work")));
                assert_eq!(args.len(), 3);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(config.plugins, [PathBuf::from("conf/./plugins/acme")]);
        assert_eq!(
            config.apps["site"].description,
            AppDescription::Routes(PathBuf::from("conf/./apps/site/mdk-plugin.json"))
        );
    }

    #[test]
    fn an_empty_file_gives_safe_defaults() {
        let config = parse_text("").unwrap();
        assert_eq!(config.gateway.listen.to_string(), DEFAULT_LISTEN);
        assert!(config.gateway.listen.ip().is_loopback());
        assert!(!config.gateway.allow_write);
        assert!(config.gateway.token.is_none());
        assert_eq!(config.gateway.max_output_length, 100_000);
        assert_eq!(config.gateway.approval_timeout, Duration::from_secs(120));
        assert_eq!(
            config.gateway.health_interval,
            Some(Duration::from_secs(30))
        );
        assert_eq!(config.gateway.store, StoreChoice::Sqlite);
        assert!(config.upstreams.is_empty());
    }

    #[test]
    fn retention_windows_default_parse_and_are_bounded() {
        let day = Duration::from_secs(86_400);
        let config = parse_text("").unwrap();
        assert_eq!(config.gateway.audit_retention, Some(day * 30));
        assert_eq!(config.gateway.effects_retention, Some(day * 7));
        let config =
            parse_text("[gateway]\naudit_retention_days = 0\neffects_retention_days = 90\n")
                .unwrap();
        assert_eq!(config.gateway.audit_retention, None, "0 keeps forever");
        assert_eq!(config.gateway.effects_retention, Some(day * 90));
        let e = error("[gateway]\nallow_write = false\neffects_retention_days = 100000\n");
        assert_eq!(
            e.field.as_deref(),
            Some("gateway.effects_retention_days"),
            "{e}"
        );
        assert_eq!(e.position.map(|p| p.0), Some(3), "{e}");
        assert!(e.message.contains("use 0"), "{e}");
        let e = error("[gateway]\naudit_retention_days = -1\n");
        assert_eq!(e.position.map(|p| p.0), Some(2), "{e}");
    }

    #[test]
    fn connection_and_session_limits_default_parse_and_turn_off_with_0() {
        let config = parse_text("").unwrap();
        let g = &config.gateway;
        assert_eq!(g.max_connections, Some(256));
        assert_eq!(g.header_read_timeout, Some(Duration::from_secs(10)));
        assert_eq!(g.idle_timeout, Some(Duration::from_secs(60)));
        assert_eq!(g.max_sessions, Some(256));
        assert_eq!(g.session_idle_timeout, Some(Duration::from_secs(300)));
        let config = parse_text(
            "[gateway]\nmax_connections = 32\nheader_read_timeout_ms = 2500\nidle_timeout_ms = 0\nmax_sessions = 0\nsession_idle_timeout_ms = 60000\n",
        )
        .unwrap();
        let g = &config.gateway;
        assert_eq!(g.max_connections, Some(32));
        assert_eq!(g.header_read_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(g.idle_timeout, None, "0 turns it off");
        assert_eq!(g.max_sessions, None, "0 turns it off");
        assert_eq!(g.session_idle_timeout, Some(Duration::from_secs(60)));
        let e = error("[gateway]\nmax_connections = -1\n");
        assert_eq!(e.position.map(|p| p.0), Some(2), "{e}");
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let config = parse_text(FULL).unwrap();
        let dump = format!("{config:?}");
        assert!(!dump.contains("s3cret-token"), "{dump}");
        assert!(!dump.contains("docs-bearer"), "{dump}");
    }

    #[test]
    fn secrets_are_recorded_and_kept_out_of_errors() {
        let config = parse_text(
            "[gateway]\ntoken = \"${PORTCULLIS_TOKEN}\"\n\
             [upstreams.docs]\ntype = \"sse\"\nurl = \"https://h/sse?key=literal-key\"\n\
             headers = { Authorization = \"Bearer ${DOCS_TOKEN}\", X-Raw = \"raw-header-value\" }\n",
        )
        .unwrap();
        let hidden: Vec<(&str, &str)> = config
            .redactions
            .iter()
            .map(|(v, shown)| (v.expose(), shown.as_str()))
            .collect();
        for expected in [
            ("s3cret-token", "${PORTCULLIS_TOKEN}"),
            ("docs-bearer", "${DOCS_TOKEN}"),
            ("literal-key", "***"),
            ("raw-header-value", "***"),
        ] {
            assert!(hidden.contains(&expected), "{expected:?}: {hidden:?}");
        }
        // An error quoting an expanded value shows the variable instead.
        let env = |name: &str| (name == "URL").then(|| "ftp://h/hidden-path".to_owned());
        let e = parse(
            Path::new("p.toml"),
            "[upstreams.a]\ntype = \"sse\"\nurl = \"${URL}\"\n",
            &env,
        )
        .expect_err("ftp is refused");
        assert!(!e.to_string().contains("hidden-path"), "{e}");
        assert!(e.message.contains("\"${URL}\""), "{e}");
    }

    fn error(text: &str) -> ConfigError {
        parse_text(text).expect_err("should be refused")
    }

    #[test]
    fn the_oauth_table_parses_into_the_surface_options() {
        let config = parse_text(
            "[gateway.oauth]\nissuer = \"https://idp.example/realms/a\"\naudience = \"https://mcp.example/mcp\"\nrequired_scopes = [\"mcp:tools\"]\n",
        )
        .unwrap();
        let oauth = config.gateway.oauth.expect("the table is read");
        let options = oauth.options();
        assert_eq!(options.issuer, "https://idp.example/realms/a");
        assert_eq!(options.audience, "https://mcp.example/mcp");
        assert_eq!(options.jwks_uri, None);
        assert_eq!(options.required_scopes, ["mcp:tools"]);
        let e = error("[gateway.oauth]\nissuer = \"https://idp.example\"\n");
        assert!(e.message.contains("audience"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = error("[gateway]\nallow_write = true\nalow_tools = []\n");
        assert_eq!(e.position, Some((3, 1)), "{e}");
        assert!(e.message.contains("alow_tools"), "{e}");
        assert!(
            e.to_string().starts_with("conf/portcullis.toml:3:1: "),
            "{e}"
        );

        let e = error("[upstreams.docs]\ntype = \"http\"\nurl = \"https://x/mcp\"\n");
        assert_eq!(e.field.as_deref(), Some("upstreams.docs.type"), "{e}");
        assert_eq!(e.position.map(|p| p.0), Some(2), "{e}");

        let e = error("[gateway]\nlisten = \"localhost:80\"\n");
        assert_eq!(e.field.as_deref(), Some("gateway.listen"));
        assert_eq!(e.position.map(|p| p.0), Some(2), "{e}");

        let e = error("[gateway\n");
        assert!(e.position.is_some(), "{e}");
    }

    #[test]
    fn an_upstream_oauth_table_parses_and_is_checked() {
        let config = parse_text(
            "[upstreams.docs]\ntype = \"streamable-http\"\nurl = \"https://docs.example/mcp\"\n\
             [upstreams.docs.oauth]\nclient_id = \"gw\"\nclient_secret = \"${DOCS_TOKEN}\"\n\
             issuer = \"https://login.example\"\nscopes = [\"docs:read\", \"offline_access\"]\n\
             [upstreams.open]\ntype = \"sse\"\nurl = \"https://open.example/sse\"\noauth = {}\n",
        )
        .unwrap();
        let oauth = config.upstreams["docs"].oauth.clone().expect("oauth");
        assert_eq!(oauth.client_id.as_deref(), Some("gw"));
        assert_eq!(
            oauth.client_secret.as_ref().map(Secret::expose),
            Some("docs-bearer")
        );
        assert_eq!(oauth.scopes, ["docs:read", "offline_access"]);
        assert_eq!(oauth.redirect_port, DEFAULT_REDIRECT_PORT);
        // The secret is never printed, and is scrubbed from log lines.
        assert!(!format!("{config:?}").contains("docs-bearer"));
        assert!(
            config
                .redactions
                .iter()
                .any(|(v, shown)| v.expose() == "docs-bearer" && shown == "${DOCS_TOKEN}")
        );
        let open = config.upstreams["open"].oauth.clone().expect("oauth = {}");
        assert_eq!(open.client_id, None);
        // Refused, each with file:line:column and the field.
        let cases: &[(&str, &str, &str)] = &[
            (
                "[upstreams.a]\ntype = \"stdio\"\ncommand = \"x\"\n\n[upstreams.a.oauth]\nclient_id = \"c\"\n",
                ":5:1: upstreams.a.oauth:",
                "a stdio upstream has no oauth",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\nheaders = { authorization = \"Bearer x\" }\n[upstreams.a.oauth]\n",
                "upstreams.a.headers.authorization",
                "cannot be used together with [upstreams.NAME.oauth]",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n\n[upstreams.a.oauth]\nscopes = [\"a\"]\nclient_secret = \"s3cret-value\"\n",
                ":7:1: upstreams.a.oauth.client_secret:",
                "needs the client_id",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nissuer = \"http://login.example\"\n",
                "upstreams.a.oauth.issuer",
                "plain http",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nclient_metadata_url = \"http://127.0.0.1/c.json\"\n",
                "upstreams.a.oauth.client_metadata_url",
                "must be an https URL",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nscopes = [\"a b\"]\n",
                "upstreams.a.oauth.scopes",
                "is not a scope",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nredirect_port = 70000\n",
                "redirect_port",
                "",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nclient_ids = \"c\"\n",
                "upstreams.a.oauth.client_ids",
                "did you mean `client_id`",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nclient_key_file = \"k.pem\"\n",
                "upstreams.a.oauth.client_key_file",
                "needs the client_id",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nclient_id = \"c\"\nclient_secret = \"s3cret-value\"\nclient_key_file = \"k.pem\"\n",
                "upstreams.a.oauth.client_key_file",
                "not both",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\nclient_id = \"c\"\nclient_key_algorithm = \"ES256\"\n",
                "upstreams.a.oauth.client_key_algorithm",
                "client_key_file, which is not set",
            ),
        ];
        for (text, place, message) in cases {
            let shown = error(text).to_string();
            assert!(shown.contains(place), "{place}: {shown}");
            assert!(shown.contains(message), "{message}: {shown}");
            assert!(!shown.contains("s3cret-value"), "{shown}");
        }
    }

    #[test]
    fn unattended_oauth_grants_parse_and_their_exclusions_are_refused() {
        let config = parse_text(
            "[upstreams.w]\ntype = \"streamable-http\"\nurl = \"https://w.example/mcp\"\n\
             [upstreams.w.oauth]\nclient_id = \"workload\"\nassertion_file = \"run/token\"\n\
             [upstreams.e]\ntype = \"streamable-http\"\nurl = \"https://e.example/mcp\"\n\
             [upstreams.e.oauth]\nclient_id = \"gw\"\nclient_secret = \"${DOCS_TOKEN}\"\n\
             id_token_file = \"/var/run/id_token\"\nidp_issuer = \"https://idp.example\"\n\
             idp_client_id = \"gw-at-idp\"\nidp_client_secret = \"${DOCS_TOKEN}\"\n",
        )
        .unwrap();
        let w = config.upstreams["w"].oauth.clone().unwrap();
        assert!(w.unattended());
        assert_eq!(
            w.grant,
            UpstreamGrant::Workload {
                assertion_file: Path::new("conf/run/token").to_owned()
            }
        );
        let e = config.upstreams["e"].oauth.clone().unwrap();
        let UpstreamGrant::Enterprise {
            id_token_file,
            idp_issuer,
            idp_token_endpoint,
            idp_client_id,
            idp_client_secret,
        } = &e.grant
        else {
            panic!("{:?}", e.grant);
        };
        assert_eq!(id_token_file, Path::new("/var/run/id_token"));
        assert_eq!(idp_issuer.as_deref(), Some("https://idp.example"));
        assert_eq!(idp_token_endpoint, &None);
        assert_eq!(idp_client_id, "gw-at-idp");
        assert_eq!(
            idp_client_secret.as_ref().map(Secret::expose),
            Some("docs-bearer")
        );
        assert!(!format!("{config:?}").contains("docs-bearer"));
        assert_eq!(e.grant.describe(), "enterprise-managed (ID-JAG)");
        let head = "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://h/mcp\"\n[upstreams.a.oauth]\n";
        let enterprise = "client_id = \"c\"\nid_token_file = \"t\"\nidp_client_id = \"i\"\n";
        // Unattended grants bind their tokens with DPoP as a login does.
        let bound = parse_text(&format!(
            "{head}{enterprise}idp_issuer = \"https://i.example\"\ndpop = true\n"
        ))
        .expect("loads");
        let oauth = bound.upstreams["a"].oauth.as_ref().expect("oauth");
        assert_eq!(oauth.dpop, Some(true));
        let cases: Vec<(String, &str, &str)> = vec![
            (
                format!("{head}assertion_file = \"a\"\nid_token_file = \"t\"\n"),
                "upstreams.a.oauth.id_token_file",
                "cannot be used together with assertion_file",
            ),
            (
                format!("{head}assertion_file = \"a\"\nredirect_port = 0\n"),
                "upstreams.a.oauth.redirect_port",
                "cannot be used together with assertion_file",
            ),
            (
                format!(
                    "{head}{enterprise}idp_issuer = \"https://i\"\nclient_metadata_url = \"https://c/m.json\"\n"
                ),
                "upstreams.a.oauth.client_metadata_url",
                "cannot be used together with id_token_file",
            ),
            (
                format!("{head}idp_client_id = \"i\"\n"),
                "upstreams.a.oauth.idp_client_id",
                "needs id_token_file",
            ),
            (
                format!("{head}assertion_file = \"a\"\nidp_issuer = \"https://i\"\n"),
                "upstreams.a.oauth.idp_issuer",
                "needs id_token_file",
            ),
            (
                format!("{head}{enterprise}"),
                "upstreams.a.oauth.id_token_file",
                "set idp_issuer (or idp_token_endpoint)",
            ),
            (
                format!(
                    "{head}{enterprise}idp_issuer = \"https://i\"\nidp_token_endpoint = \"https://i/token\"\n"
                ),
                "upstreams.a.oauth.idp_token_endpoint",
                "cannot be used together with idp_issuer",
            ),
            (
                format!("{head}{enterprise}idp_token_endpoint = \"http://idp.example/token\"\n"),
                "upstreams.a.oauth.idp_token_endpoint",
                "http",
            ),
            (
                format!(
                    "{head}id_token_file = \"t\"\nidp_client_id = \"i\"\nidp_issuer = \"https://i\"\n"
                ),
                "upstreams.a.oauth.id_token_file",
                "needs client_id",
            ),
            (
                format!(
                    "{head}client_id = \"c\"\nid_token_file = \"t\"\nidp_issuer = \"https://i\"\nidp_client_secret = \"s3cret-value\"\n"
                ),
                "upstreams.a.oauth.id_token_file",
                "needs idp_client_id",
            ),
        ];
        for (text, place, message) in &cases {
            let shown = error(text).to_string();
            assert!(shown.contains(place), "{place}: {shown}");
            assert!(shown.contains(message), "{message}: {shown}");
            assert!(!shown.contains("s3cret-value"), "{shown}");
        }
    }

    #[test]
    fn semantic_errors() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "[gateway]\ntoken = \"${EMPTY}\"\n",
                "gateway.token",
                "ERR_INVALID_MCP_TOKEN",
            ),
            (
                "[gateway]\ntoken = \"\"\n",
                "gateway.token",
                "ERR_INVALID_MCP_TOKEN",
            ),
            (
                "[gateway]\ntoken = \"${NOPE}\"\n",
                "gateway.token",
                "NOPE is not set",
            ),
            (
                "[gateway]\napproval = \"sometimes\"\n",
                "gateway.approval",
                "\"writes\"",
            ),
            (
                "[gateway]\napproval_timeout_ms = 0\n",
                "gateway.approval_timeout_ms",
                "at least 1",
            ),
            ("[gateway]\nprefix = \"maybe\"\n", "gateway.prefix", "auto"),
            (
                "[gateway]\ntoken = \"t\"\n[gateway.oauth]\nissuer = \"https://idp.example\"\naudience = \"https://mcp.example/mcp\"\n",
                "gateway.oauth",
                "together with gateway.token",
            ),
            (
                "[gateway.oauth]\nissuer = \"http://idp.example\"\naudience = \"https://mcp.example/mcp\"\n",
                "gateway.oauth",
                "oauth issuer: must be https",
            ),
            (
                "[gateway.oauth]\nissuer = \"https://idp.example\"\naudience = \"https://mcp.example/mcp\"\nrequired_scopes = [\"a b\"]\n",
                "gateway.oauth",
                "required_scopes",
            ),
            (
                "[gateway]\nstore = \"mysql://x\"\n",
                "gateway.store",
                "postgres://",
            ),
            (
                "[upstreams.a]\ntype = \"stdio\"\ncommand = \"x\"\nurl = \"https://x/mcp\"\n",
                "upstreams.a.url",
                "stdio upstream has no url",
            ),
            (
                "[upstreams.a]\ntype = \"stdio\"\n",
                "upstreams.a.command",
                "needs a command",
            ),
            (
                "[upstreams.a]\ntype = \"sse\"\n",
                "upstreams.a.url",
                "needs a url",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"http://example.com/mcp\"\n",
                "upstreams.a.url",
                "not loopback",
            ),
            (
                "[upstreams.a]\ntype = \"streamable-http\"\nurl = \"https://x/mcp\"\ncommand = \"y\"\n",
                "upstreams.a.command",
                "type = \"stdio\"",
            ),
            (
                "[upstreams.a]\ntype = \"sse\"\nurl = \"https://x/sse\"\ntools = { allow = [\"a\"], block = [\"b\"] }\n",
                "upstreams.a.tools",
                "not both",
            ),
            (
                "[upstreams.a]\ntype = \"sse\"\nurl = \"https://x/sse\"\nheaders = { A = \"1\", a = \"2\" }\n",
                "upstreams.a.headers.a",
                "set twice",
            ),
            (
                "[apps.s]\nbase_url = \"http://127.0.0.1:1\"\n",
                "apps.s.routes",
                "routes",
            ),
        ];
        for (text, field, needle) in cases {
            let e = error(text);
            assert_eq!(e.field.as_deref(), Some(*field), "{text}: {e}");
            assert!(e.message.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn env_expansion() {
        assert_eq!(
            expand_env("Bearer ${DOCS_TOKEN}", &env).unwrap(),
            "Bearer docs-bearer"
        );
        assert_eq!(expand_env("${NOPE}", &env).unwrap_err(), "NOPE");
        assert_eq!(
            expand_env("cost: $5, ${not a var}, ${", &env).unwrap(),
            "cost: $5, ${not a var}, ${"
        );
        assert_eq!(
            expand_env("${PORTCULLIS_TOKEN}${DOCS_TOKEN}", &env).unwrap(),
            "s3cret-tokendocs-bearer"
        );
        // Expanded text is never rescanned.
        let tricky = |name: &str| (name == "A").then(|| "${B}".to_owned());
        assert_eq!(expand_env("${A}", &tricky).unwrap(), "${B}");
    }
}

/// Property tests of the loader: any text, and any value under every known
/// key, is a `Config` or a `ConfigError`, never a panic. `PROPTEST_CASES`
/// sets the number of cases (default 256).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// A TOML value, right or wrong for whatever key it lands under.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            Just("99999999999999999999999".to_owned()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<f64>().prop_map(|f| format!("{f:?}")),
            "\\PC{0,16}".prop_map(|s| toml::Value::String(s).to_string()),
            "[A-Z_]{0,6}".prop_map(|v| format!("\"${{{v}}}\"")),
            prop::sample::select(vec![
                "\"127.0.0.1:0\"",
                "\"stdio\"",
                "\"streamable-http\"",
                "\"sse\"",
                "\"http://127.0.0.1:1/mcp\"",
                "\"auto\"",
                "\"never\"",
                "\"memory\"",
                "\"writes\"",
                "\"${UNCLOSED\"",
                "\"${}\"",
            ])
            .prop_map(str::to_owned),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(", "))),
                prop::collection::vec((key(), inner), 0..4).prop_map(|kv| {
                    let fields: Vec<String> =
                        kv.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("{{ {} }}", fields.join(", "))
                }),
            ]
        })
    }

    /// Every key some table accepts, and a few no table does.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "listen",
                "allowed_hosts",
                "allowed_origins",
                "token",
                "allow_write",
                "allow_tools",
                "approval",
                "approval_timeout_ms",
                "max_connections",
                "header_read_timeout_ms",
                "idle_timeout_ms",
                "max_sessions",
                "session_idle_timeout_ms",
                "health_interval_ms",
                "reconnect_max_ms",
                "start_timeout_ms",
                "audit_retention_days",
                "effects_retention_days",
                "identity",
                "user",
                "perms",
                "oauth",
                "issuer",
                "audience",
                "jwks_uri",
                "required_scopes",
                "max_output_length",
                "prefix",
                "data_dir",
                "store",
                "budget",
                "always_load",
                "type",
                "url",
                "headers",
                "command",
                "args",
                "env",
                "cwd",
                "timeout_ms",
                "tools",
                "allow",
                "block",
                "path",
                "routes",
                "openapi",
                "base_url",
                "key_file",
            ])
            .prop_map(str::to_owned),
            "[a-z_]{1,8}",
        ]
    }

    fn table() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "[gateway]",
            "[disclosure]",
            "[upstreams.a]",
            "[upstreams.\"b c\"]",
            "[[plugins]]",
            "[[tool_plugins]]",
            "[apps.app]",
            "[gateway.identity]",
            "[gateway.oauth]",
            "[nowhere]",
            "",
        ])
        .prop_map(str::to_owned)
    }

    /// A config of known tables holding known (and unknown) keys.
    fn config() -> impl Strategy<Value = String> {
        prop::collection::vec(
            (table(), prop::collection::vec((key(), value()), 0..5)),
            0..5,
        )
        .prop_map(|tables| {
            let mut text = String::new();
            for (header, fields) in tables {
                text.push_str(&header);
                text.push('\n');
                for (key, value) in fields {
                    text.push_str(&format!("{key} = {value}\n"));
                }
            }
            text
        })
    }

    fn env(name: &str) -> Option<String> {
        name.len()
            .is_multiple_of(2)
            .then(|| format!("value-of-{name}"))
    }

    proptest! {
        #[test]
        fn any_text_is_a_config_or_an_error(text in "\\PC{0,200}") {
            let _ = parse(Path::new("/c/portcullis.toml"), &text, &env);
        }

        #[test]
        fn any_value_under_any_known_key_is_a_config_or_an_error(text in config()) {
            if let Err(error) = parse(Path::new("/c/portcullis.toml"), &text, &env) {
                // The error names the file, always.
                prop_assert!(error.to_string().contains("portcullis.toml"), "{}", error);
            }
        }

        #[test]
        fn expansion_takes_any_text(text in "(\\PC|\\$\\{|\\})*") {
            let _ = expand_env(&text, &env);
        }
    }
}
