//! The command line (documented in `docs/cli.md`).
//!
//! The CLI contract: commands, flags, positionals, config keys, `--json`
//! shapes and exit codes are public; extend, never rename. Renaming any of
//! them is a breaking change for every user's scripts and client configs.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;
use serde_json::{Map, Value};

/// Where `--config` points when it is not given.
pub const DEFAULT_CONFIG: &str = "./portcullis.toml";

/// The parsed command line of `portcullis`.
#[derive(Debug, Parser)]
#[command(
    name = "portcullis",
    version,
    about = "Portcullis is a secure MCP gateway: it connects many upstream MCP servers, puts \
             every guard in between, and serves the result as one MCP endpoint.",
    after_help = "Examples:\n  \
                  portcullis check                        validate ./portcullis.toml, connect every upstream\n  \
                  portcullis -c gw.toml serve             serve MCP on http://127.0.0.1:8765/mcp\n  \
                  portcullis tools -j                     the catalogue as one JSON array\n  \
                  portcullis call files__read '{\"path\":\"a.txt\"}'\n  \
                  portcullis client connect claude        put Portcullis in front of Claude Desktop's servers\n  \
                  portcullis completions bash > ~/.local/share/bash-completion/completions/portcullis\n\n\
                  Exit codes: 0 success, 1 the tool answered with an error or was refused, \
                  2 usage or configuration error.",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// The gateway config file; paths inside it are relative to the file.
    /// Accepted before or after the subcommand (every subcommand but
    /// `import`, which reads no gateway config).
    #[arg(short = 'c', long, global = true, value_name = "FILE", default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// How log lines on stderr are written: `text` for people, `json` (one
    /// object a line) for log collectors. Accepted before or after the
    /// subcommand.
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The format of the log lines on stderr (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, message and fields.
    Json,
}

/// One subcommand of `portcullis`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The gateway: serve every source behind every guard as one MCP endpoint, over HTTP on 127.0.0.1 or over stdio.
    #[command(
        after_help = "Over HTTP the gateway answers /mcp (MCP, Streamable HTTP), /healthz (up or \
                      degraded, upstreams and tools counted; no token needed) and /metrics \
                      (Prometheus text; the token is required when one is configured). The \
                      config is re-read when the file changes or on SIGHUP (kill -HUP <pid>); \
                      SIGINT or SIGTERM drains and exits 0. Logs go to stderr at INFO; RUST_LOG \
                      overrides the filter (RUST_LOG=debug, RUST_LOG=info,rmcp=debug).\n\n\
                      Examples:\n  \
                      portcullis serve                         HTTP on [gateway] listen (127.0.0.1:8765)\n  \
                      portcullis serve -c gw.toml --listen 127.0.0.1:9000\n  \
                      portcullis serve --stdio -c /abs/portcullis.toml   what a desktop client starts\n  \
                      curl http://127.0.0.1:8765/healthz\n  \
                      RUST_LOG=debug portcullis --log-format json serve"
    )]
    Serve(ServeArgs),
    /// The catalogue as the model sees it, and what is held back.
    #[command(after_help = "Examples:\n  \
                            portcullis tools                 one line per tool, with what is held back and why\n  \
                            portcullis tools -j | jq '.[] | select(.status != \"available\")'\n  \
                            portcullis -c gw.toml tools")]
    Tools(ToolsArgs),
    /// One call through every guard.
    #[command(after_help = "Examples:\n  \
                            portcullis call files__read '{\"path\":\"notes.txt\"}'\n  \
                            portcullis call -j demo__add '{\"a\":1,\"b\":2}'   the CallToolResult as JSON\n  \
                            portcullis call demo__count                  no arguments: {}\n\n\
                            Exit codes: 0 the tool answered, 1 the tool answered with an error or \
                            a guard refused the call, 2 unknown tool (the closest names are \
                            listed), bad JSON-ARGS or configuration error.")]
    Call(CallArgs),
    /// What changed since a server was trusted, as a diff.
    #[command(after_help = "Examples:\n  \
                            portcullis drift                 every trusted server\n  \
                            portcullis drift files           one server, as a line diff\n  \
                            portcullis drift -j files        one JSON object, for scripts\n\n\
                            Exit codes: 0 nothing drifted, 1 drift found (a tool is quarantined, \
                            withheld as new, or removed; or a prompt, resource or resource \
                            template changed, was added or removed since it was pinned), \
                            2 configuration error, unknown SERVER, or a server in scope that \
                            could not be reached (not checked).")]
    Drift(DriftArgs),
    /// Accept a server's current definitions as its new baseline.
    #[command(after_help = "Examples:\n  \
                            portcullis retrust files         show the drift, then ask y/N\n  \
                            portcullis retrust -y files      no question (scripts, no terminal)\n\n\
                            Shows the drift first and asks y/N on the terminal; without a terminal \
                            it refuses unless --yes is given. Exit codes: 0 re-trusted (or nothing \
                            to re-trust), 1 declined, or the server changed again since it was \
                            shown, 2 configuration error, unknown SERVER, no terminal without \
                            --yes, or the server could not be reached.")]
    Retrust(RetrustArgs),
    /// Validate config, plugins and manifests, connect every upstream; print diagnostics.
    #[command(after_help = "Examples:\n  \
                      portcullis check                 config, plugins, manifests, then every upstream\n  \
                      portcullis check --offline       the files only (CI without upstreams)\n  \
                      portcullis check -c gw.toml\n\n\
                      Exit codes: 0 usable and every upstream answered, 1 an upstream could \
                      not be connected (each is named, with why), 2 configuration error \
                      (every unknown key is listed).")]
    Check(CheckArgs),
    /// Turn an existing mcpServers config (Claude, Cursor, VS Code) into Portcullis TOML, on stdout by default.
    #[command(
        after_help = "Examples:\n  \
                      portcullis import claude ~/.config/Claude/claude_desktop_config.json\n  \
                      portcullis import cursor ~/.cursor/mcp.json --output portcullis.toml\n  \
                      portcullis import vscode .vscode/mcp.json --output portcullis.toml --force\n\n\
                      Secrets become ${VAR} references; the variables to export are listed on stderr.",
        // `--config` is global, but import reads no gateway config: this
        // arg (same id, so the global one is not added here) refuses it
        // as before, hidden from help.
        arg = clap::Arg::new("config")
            .long("config")
            .value_name("FILE")
            .hide(true)
            .value_parser(clap::builder::ValueParser::new(refuse_config))
    )]
    Import(ImportArgs),
    /// Put Portcullis in front of a desktop client's MCP servers (or take it out), editing the client's own config.
    #[command(
        subcommand,
        after_help = "Examples:\n  \
                      portcullis client connect claude                 Claude Desktop's default file\n  \
                      portcullis client connect cursor -c ~/portcullis.toml\n  \
                      portcullis client connect vscode --client-config .vscode/mcp.json\n  \
                      portcullis client disconnect claude              its own servers back"
    )]
    Client(ClientCommand),
    /// Log in to an upstream that needs OAuth, see where each login stands, log out.
    #[command(
        subcommand,
        after_help = "Examples:\n  \
                      portcullis auth login docs                 opens the browser; waits for its redirect\n  \
                      portcullis auth login docs --no-browser    prints the URL to open instead\n  \
                      portcullis auth login docs --scope docs:write   step up: ask for more scope\n  \
                      portcullis auth status                     every upstream with [upstreams.NAME.oauth]\n  \
                      portcullis auth status -j docs\n  \
                      portcullis auth logout docs\n\n\
                      A running `portcullis serve` takes up a new login (or a logout) within a few \
                      seconds. Exit codes: 0 done (status: every login shown is usable), 1 the login \
                      failed or was refused (status: one needs a login), 2 configuration error or \
                      an upstream that does not log in with OAuth."
    )]
    Auth(AuthCommand),
    /// Print a shell completion script on stdout (bash, zsh, fish, powershell, elvish).
    #[command(after_help = "Examples:\n  \
                            portcullis completions bash > ~/.local/share/bash-completion/completions/portcullis\n  \
                            portcullis completions zsh > ~/.zfunc/_portcullis    (with fpath+=~/.zfunc)\n  \
                            portcullis completions fish > ~/.config/fish/completions/portcullis.fish\n  \
                            portcullis completions powershell >> $PROFILE")]
    Completions(CompletionsArgs),
    /// Print the manual page (roff) on stdout.
    #[command(after_help = "Example:\n  \
                            portcullis man > ~/.local/share/man/man1/portcullis.1 && man portcullis")]
    Man,
    /// A tiny MCP server on stdin/stdout (echo, add, count, write_note): the
    /// upstream of `examples/portcullis.toml`. A fixture, hidden from help.
    #[command(name = "demo-upstream", hide = true)]
    DemoUpstream,
}

/// Arguments of `portcullis completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_name = "SHELL", value_enum)]
    pub shell: Shell,
}

/// Refuses `import --config`: import reads no gateway config (it writes one,
/// to `--output` or stdout).
fn refuse_config(_: &str) -> Result<PathBuf, String> {
    Err("import reads no gateway config; write the TOML with --output FILE".to_owned())
}

/// Arguments of `portcullis serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the HTTP surface, IP:PORT; overrides `[gateway] listen` (127.0.0.1:8765 by default).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Serve MCP over stdin/stdout instead of HTTP (the listen address is then ignored).
    #[arg(long)]
    pub stdio: bool,
}

/// Arguments of `portcullis tools`.
#[derive(Debug, Clone, Args)]
pub struct ToolsArgs {
    /// Print one JSON array, an object per tool: name, source, tier, status, reason.
    #[arg(short = 'j', long)]
    pub json: bool,
}

/// Arguments of `portcullis call`.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// Print the MCP CallToolResult as JSON.
    #[arg(short = 'j', long)]
    pub json: bool,
    /// The tool's qualified name, as `portcullis tools` lists it (e.g. files__read).
    #[arg(value_name = "TOOL")]
    pub tool: String,
    /// The tool's arguments, as one JSON object.
    #[arg(value_name = "JSON-ARGS", default_value = "{}", value_parser = parse_json_object)]
    pub args: Map<String, Value>,
}

/// Arguments of `portcullis drift`.
#[derive(Debug, Clone, Args)]
pub struct DriftArgs {
    /// Print one JSON object: `drift` (bool), `servers` (each with `server`,
    /// `quarantined` [{tool, name, changed, trusted, current}], `withheld`
    /// [{tool, name}], `removed` (names), `pinned` (bool), and `prompts`,
    /// `resources`, `templates`, each {changed [{id, changed, trusted,
    /// current}], added (ids), removed (ids)}) and `unreachable` [{server,
    /// reason}].
    #[arg(short = 'j', long)]
    pub json: bool,
    /// The server to diff (an upstream, an Agent Plugin's server, a native
    /// tool plugin or an app); every trusted server when omitted.
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
}

/// Arguments of `portcullis retrust`.
#[derive(Debug, Clone, Args)]
pub struct RetrustArgs {
    /// Replace the baseline without asking for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// The server whose baseline is replaced (an upstream, an Agent
    /// Plugin's server, a native tool plugin or an app).
    #[arg(value_name = "SERVER")]
    pub server: String,
}

/// Arguments of `portcullis check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Check the config, plugins and manifests only: connect no upstream.
    /// Without it every upstream is connected (nothing is recorded), and
    /// one that fails makes `check` exit 1.
    #[arg(long)]
    pub offline: bool,
}

/// `portcullis auth login|status|logout`.
#[derive(Debug, Clone, Subcommand)]
pub enum AuthCommand {
    /// Log in to UPSTREAM in the browser and keep the grant (encrypted, in the store).
    Login(AuthLoginArgs),
    /// Where each login stands: issuer, expiry, scopes, refreshable, needs login. Never a token.
    Status(AuthStatusArgs),
    /// Forget UPSTREAM's stored login.
    Logout(AuthLogoutArgs),
}

/// Arguments of `portcullis auth login`.
#[derive(Debug, Clone, Args)]
pub struct AuthLoginArgs {
    /// The upstream (`[upstreams.NAME]` with an `oauth` table).
    #[arg(value_name = "UPSTREAM")]
    pub upstream: String,
    /// Print the URL to open instead of opening a browser.
    #[arg(long)]
    pub no_browser: bool,
    /// A scope to ask for besides those of the current login (a step-up,
    /// after a call was refused for want of it); repeat for more.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
}

/// Arguments of `portcullis auth status`.
#[derive(Debug, Clone, Args)]
pub struct AuthStatusArgs {
    /// Print one JSON array, an object per upstream: upstream, logged_in,
    /// needs_login, issuer, expires_at (seconds since the epoch), scopes,
    /// refreshable, updated_at, reason.
    #[arg(short = 'j', long)]
    pub json: bool,
    /// One upstream; every upstream that logs in with OAuth when omitted.
    #[arg(value_name = "UPSTREAM")]
    pub upstream: Option<String>,
}

/// Arguments of `portcullis auth logout`.
#[derive(Debug, Clone, Args)]
pub struct AuthLogoutArgs {
    /// The upstream whose stored login is forgotten.
    #[arg(value_name = "UPSTREAM")]
    pub upstream: String,
}

/// `portcullis client connect|disconnect`.
#[derive(Debug, Clone, Subcommand)]
pub enum ClientCommand {
    /// Move the client's MCP servers into the Portcullis config and make the
    /// client start Portcullis instead (a backup of the client's file is kept
    /// beside it, its name ending in .bak-portcullis; running it again changes nothing).
    Connect(ClientArgs),
    /// Give the client its own servers back (from the backup) and remove the
    /// Portcullis entry; the Portcullis config is left as it is.
    Disconnect(ClientArgs),
}

/// Arguments of `portcullis client connect|disconnect`.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The desktop client whose config is edited.
    #[arg(value_name = "CLIENT", value_enum)]
    pub client: Client,
    /// The client's config file, when not where the client keeps it by
    /// default (Claude Desktop: claude_desktop_config.json in its app
    /// support directory; Cursor: ~/.cursor/mcp.json; VS Code:
    /// .vscode/mcp.json in the current directory).
    #[arg(long, value_name = "PATH")]
    pub client_config: Option<PathBuf>,
}

/// Arguments of `portcullis import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// The desktop client whose config format FILE is in.
    #[arg(value_name = "CLIENT", value_enum)]
    pub client: Client,
    /// The client's config file holding `mcpServers` (or VS Code's `servers`).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write the TOML to this file instead of stdout (an existing file is
    /// refused unless `--force`).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Overwrite the `--output` file if it exists.
    #[arg(long, requires = "output")]
    pub force: bool,
}

/// A desktop client whose MCP server config `portcullis import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Desktop (claude_desktop_config.json).
    Claude,
    /// Cursor (mcp.json).
    Cursor,
    /// VS Code (mcp.json or settings.json).
    Vscode,
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Client::Claude => "claude",
            Client::Cursor => "cursor",
            Client::Vscode => "vscode",
        })
    }
}

/// Parses `call`'s JSON-ARGS: it must be valid JSON, and a JSON object, since
/// MCP tool arguments are always an object. The message names what is wrong;
/// clap adds the argument's name and exits with the usage code (2).
pub fn parse_json_object(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "must be a JSON object such as '{{\"path\":\"a\"}}', not {}",
            json_kind(&other)
        )),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// The JSON type of a value, with its article, for error messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn json_args_must_be_an_object() {
        assert_eq!(parse_json_object(r#"{"a":1}"#).map(|m| m.len()), Ok(1));
        assert!(parse_json_object("[]").is_err_and(|e| e.contains("an array")));
        assert!(parse_json_object("\"x\"").is_err_and(|e| e.contains("a string")));
        assert!(parse_json_object("{").is_err_and(|e| e.contains("not valid JSON")));
    }

    #[test]
    fn client_display_matches_the_value_names() {
        for client in Client::value_variants() {
            let name = client.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(client.to_string().as_str()));
        }
    }
}
