//! `portcullis` — the gateway binary.
//!
//! Portcullis connects many upstream MCP servers (and plugin manifests and
//! application route tables), puts every guard between them and the agent, and
//! serves the result as one MCP endpoint, over HTTP on 127.0.0.1 or over stdio.
//! This binary reads the TOML config, parses the command line and wires the
//! pipeline together; the pipeline's rooms live in their own crates:
//!
//! ```text
//!  sources ──► catalogue ──► gate ──► surfaces
//! ```
//!
//! How the subcommands map onto that pipeline:
//!
//! | subcommand | sources | catalogue | gate | surfaces |
//! | --- | --- | --- | --- | --- |
//! | `serve`   | connects every source | builds and keeps it current | every call | MCP over HTTP or stdio |
//! | `tools`   | lists every source | names, tiers, quarantine, withholding | exposure rules only | prints the catalogue (`--json`: one array) |
//! | `call`    | executes the one call | resolves the qualified name | exposure and policy | prints the `CallToolResult` |
//! | `drift`   | lists the server(s) | diffs fingerprints against the baseline | — | prints the diff |
//! | `retrust` | lists the server | records a new baseline in the store | — | — |
//! | `check`   | loads plugins, manifests, route tables | reports diagnostics | — | — |
//! | `auth`    | logs in to an upstream that needs OAuth (browser, loopback redirect), shows or forgets the stored login | — | — | — |
//! | `import`  | — (translates a desktop client's `mcpServers` config into TOML) | — | — | — |
//! | `client`  | — (moves a desktop client's servers into the TOML and points the client at `serve --stdio`) | — | — | — |
//! | `completions`, `man` | — (a shell completion script, the manual page: generated from the clap definition) | — | — | — |
//!
//! Exit codes: 0 success, 1 the tool answered with an error or was refused,
//! 2 usage or configuration error (clap's own usage errors exit 2 as well).
//!
//! Built so far:
//!
//! - `serve` connects every `[upstreams.*]` server (stdio, Streamable HTTP,
//!   SSE) through `portcullis-upstream` (names, prefix, per-upstream filters
//!   and timeouts, disclosure budget, policy, validation), registers every
//!   catalogue entry on a `portcullis-server` `ToolServer` behind the exposure
//!   gate (`allow_write`, `allow_tools`, identity), and serves it over HTTP on
//!   `[gateway] listen` (or `--listen`) with the Host/Origin/token guards, or
//!   over `--stdio`. Output is framed once, at that edge. SIGINT/SIGTERM
//!   drains, closes every upstream (children end) and exits 0.
//!   Trust on first use: baselines recorded in the store (`[gateway] store`,
//!   SQLite in `data_dir` by default) are enforced, so a tool that drifted
//!   since is quarantined; a server seen for the first time has its baseline
//!   recorded.
//! - `tools` prints that catalogue, with what the catalogue or the gate holds
//!   back and why (`--json`: one array of `{name, source, tier, status,
//!   reason}`).
//! - `call` runs one call through the same gate and edge, prints the result
//!   (`--json`: the `CallToolResult`), exits 0, 1 (tool error or refusal) or
//!   2 (unknown tool, with the closest names; config errors).
//! - Sources besides upstreams (`sources`): `[[plugins]]` Agent Plugins
//!   directories add their `mcp.json` servers to the upstreams;
//!   `[[tool_plugins]]` native plugins and `[apps.*]` route tables or
//!   OpenAPI documents (calls signed with the gateway key) are projected by
//!   the catalogue's rules beside them, with trust baselines, behind the same
//!   gate and edge. A broken one is reported and skipped.
//! - `check` loads and validates the config and every plugin, manifest,
//!   route table and OpenAPI document (exit 2 on an error); `import` turns
//!   an `mcpServers` JSON config into TOML, secrets turned into `${VAR}` references.
//! - `drift [SERVER]` connects and prints, per server, each quarantined
//!   tool as a line diff of its trusted and current definitions, the tools
//!   withheld as new and those removed, then the same for prompts,
//!   resources and resource templates against their pins (`--json`: one
//!   object); exits 1 when anything drifted. SERVER may be a native tool
//!   plugin or an app too. `retrust SERVER` shows the same, asks (or `--yes`),
//!   records the listing it showed as the new baseline and reconnects.
//! - A hidden `demo-upstream` subcommand serves a few demo tools over stdio:
//!   the upstream of `examples/portcullis.toml`. In a config, a stdio
//!   `command = "portcullis"` is this binary.
//!
//! - `serve` also passes resources, prompts, completions, logging and
//!   subscriptions through (`proxy`, pinned like tools, withheld when they
//!   drift); relays a server's sampling, elicitation and roots requests to
//!   the calling client (`relay`); asks a person before a policy's `ask`
//!   call (`[gateway] approval`, `approval_timeout_ms`); answers
//!   `/healthz` and `/metrics` beside `/mcp` (`health`, `metrics`; remote
//!   upstreams pinged every `health_interval_ms`); writes the audit trail
//!   of every call to its store (`audit`, `call` too); re-reads the config
//!   on change or SIGHUP, keeping unchanged connections (`reload`); and
//!   shows progress while many upstreams connect (`connecting`).

#![warn(missing_docs)]

// First: the printing macros (`outln!`, `out!`, `errln!`) every module uses.
#[macro_use]
mod out;

mod auth_cmd;
mod call_cmd;
mod check;
mod cli;
mod client_cmd;
mod demo_upstream;
mod diff;
mod drift_cmd;
mod logging;
mod retrust_cmd;
mod serve;
mod tools_cmd;

// The gateway's rooms, named here so the subcommands reach them as `crate::…`.
use portcullis_gateway::{
    audit, config, connecting, gateway, health, import, metrics, redact, reload, retention,
    sources, trust,
};

use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::{Cli, Command, LogFormat};

/// mimalloc, not the system allocator: a proxied call allocates and frees
/// a few hundred small objects across two worker threads (JSON values,
/// headers, futures), and glibc's malloc spent about a fifth of the
/// gateway's CPU on them (chunk unlinking and consolidation) under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How a run of `portcullis` ends; the one place exit codes are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// Everything worked (also `--help` and `--version`).
    Success,
    /// The tool answered with an error, or a guard refused the call.
    ToolError,
    /// The command line or the configuration is wrong (or the subcommand is not built).
    Usage,
}

impl Exit {
    /// The process exit code: part of the CLI contract (scripts match on it),
    /// so never renumbered.
    fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::ToolError => 1,
            Exit::Usage => 2,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help and version to stdout and asks for 0, usage errors
            // to stderr and asks for 2; keep its verdict but decide the code here.
            let printed = err.print();
            let exit = if err.exit_code() == 0 {
                Exit::Success
            } else {
                Exit::Usage
            };
            return match printed {
                Ok(()) => exit.into(),
                // `--help | head -1`: a closed stdout is no failure (see `out`).
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit.into(),
                Err(_) => Exit::Usage.into(),
            };
        }
    };
    match run(cli) {
        // A closed stdout (`| head -1`) is no failure: the command's own
        // code stands. Any other failure to print is (see `out`).
        Ok(_) if out::failure().is_some() => {
            let why = out::failure().unwrap_or_default();
            errln!("error: cannot write to stdout: {why}");
            Exit::Usage.into()
        }
        Ok(exit) => exit.into(),
        Err(err) => {
            errln!("error: {}", redact::text(&format!("{err:#}")));
            // Errors raised before any tool runs are about the command line or the
            // config; a tool's own failure is reported as `Exit::ToolError`, not here.
            Exit::Usage.into()
        }
    }
}

/// Parses the command line. `--config` is global, so clap also takes it
/// before `import` (`portcullis --config X import …`); import reads no
/// gateway config, so that is refused as a usage error, like
/// `import --config X` (see `cli::Command::Import`).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let mut matches = Cli::command().try_get_matches()?;
    let given = matches.value_source("config") == Some(clap::parser::ValueSource::CommandLine);
    let cli = Cli::from_arg_matches_mut(&mut matches)?;
    if given && matches!(cli.command, Command::Import(_)) {
        return Err(Cli::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            "import reads no gateway config (--config); write the TOML with --output FILE",
        ));
    }
    Ok(cli)
}

/// Runs one parsed command line.
fn run(cli: Cli) -> anyhow::Result<Exit> {
    let quiet_default = match &cli.command {
        Command::Check(a) => return run_check(&cli.config, a.offline, cli.log_format),
        Command::Import(a) => return run_import(a),
        Command::Client(c) => return run_client(c, &cli.config),
        Command::Completions(a) => return print_completions(a.shell),
        Command::Man => return print_man(),
        Command::Serve(_) => SERVE_LOG_FILTER,
        _ => ONE_SHOT_LOG_FILTER,
    };
    logging::init(quiet_default, cli.log_format);
    connecting::enable(matches!(cli.log_format, LogFormat::Json));
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    if let Command::DemoUpstream = &cli.command {
        runtime.block_on(demo_upstream::run())?;
        return Ok(Exit::Success);
    }
    let path = &cli.config;
    let config = match config::load(path) {
        Ok(config) => config,
        Err(err) => {
            errln!("error: {err}");
            return Ok(Exit::Usage);
        }
    };
    redact::remember(&config.redactions);
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Serve(a) => serve::serve(&config, a.listen, a.stdio).await,
            Command::Tools(a) => tools_cmd::tools(&config, a.json).await,
            Command::Call(a) => call_cmd::call(&config, &a.tool, &a.args, a.json).await,
            Command::Drift(a) => drift_cmd::drift(&config, a.server.as_deref(), a.json).await,
            Command::Retrust(a) => retrust_cmd::retrust(&config, &a.server, a.yes).await,
            Command::Auth(a) => auth_cmd::auth(&config, a).await,
            _ => Ok(Exit::Usage),
        }
    });
    // Upstream connections are closed by each command; do not wait for
    // blocking readers of a child that is already gone.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    outcome
}

/// The default log filter of `serve`: one line per event at INFO. rmcp's
/// transport worker logs a failed connection at ERROR with the whole
/// request debug-dumped; the connector reports the same failure in one
/// line (and `RUST_LOG=rmcp=debug` brings rmcp's own lines back).
const SERVE_LOG_FILTER: &str = "info,rmcp=warn,rmcp::transport::worker=off";

/// The default log filter of the commands that run once and end: warnings
/// only, without rmcp's transport dump (see [`SERVE_LOG_FILTER`]).
const ONE_SHOT_LOG_FILTER: &str = "warn,rmcp::transport::worker=off";

/// `portcullis check`: load and validate the config, summarise it, report
/// findings, then (unless `offline`) connect every upstream and name each
/// that fails. Exit 0 when it is usable and every upstream answered, 1 when
/// an upstream failed, 2 on a configuration error.
fn run_check(path: &std::path::Path, offline: bool, format: LogFormat) -> anyhow::Result<Exit> {
    let config = match config::load(path) {
        Ok(config) => config,
        Err(err) => {
            // Every unknown key of the file, not only the first.
            // Read as `load` reads it: a FIFO or device is never waited on.
            let text =
                portcullis_sources::files::read_regular_to_string(path, config::MAX_CONFIG_BYTES)
                    .unwrap_or_default();
            let unknown = config::unknown_keys(path, &text);
            if unknown.is_empty() {
                errln!("error: {err}");
            }
            for each in &unknown {
                errln!("error: {each}");
            }
            return Ok(Exit::Usage);
        }
    };
    redact::remember(&config.redactions);
    let (summary, findings) = check::summarize(&config);
    out!("{}", redact::text(&summary));
    for finding in &findings {
        errln!("{}", redact::text(&finding.to_string()));
    }
    if findings.iter().any(check::Finding::is_error) {
        return Ok(Exit::Usage);
    }
    if offline {
        return Ok(Exit::Success);
    }
    logging::init(ONE_SHOT_LOG_FILTER, format);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let results = runtime.block_on(check::connect_all(&config));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    let results = results?;
    let (mut failed, mut logins) = (0, 0);
    for result in &results {
        match &result.failure {
            // Not down: a person must log in (the other upstreams are
            // checked as usual).
            _ if result.needs_login => {
                logins += 1;
                errln!(
                    "{}",
                    gateway::missing_line(
                        "needs login: upstream",
                        &result.server,
                        &format!(
                            "run `{}`",
                            portcullis_gateway::oauth::login_command(&result.server)
                        )
                    )
                );
            }
            None => outln!("  connected {}: {} tool(s)", result.server, result.tools),
            Some(reason) => {
                failed += 1;
                errln!(
                    "{}",
                    gateway::missing_line("error: upstream", &result.server, reason)
                );
            }
        }
    }
    if logins > 0 {
        errln!("{logins} of {} upstream(s) need a login", results.len());
    }
    Ok(if failed == 0 && logins == 0 {
        Exit::Success
    } else {
        if failed > 0 {
            errln!(
                "{failed} of {} upstream(s) could not be connected",
                results.len()
            );
        }
        Exit::ToolError
    })
}

/// `portcullis completions SHELL`: the completion script, generated from
/// the same clap definition that parses, so it cannot fall behind.
fn print_completions(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    use clap::CommandFactory as _;
    // Into memory first: `generate` panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "portcullis", &mut script);
    out::stdout_bytes(&script);
    Ok(Exit::Success)
}

/// `portcullis man`: the manual page in roff, from the clap definition.
fn print_man() -> anyhow::Result<Exit> {
    use clap::CommandFactory as _;
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .context("cannot render the manual page")?;
    out::stdout_bytes(&page);
    Ok(Exit::Success)
}

/// `portcullis client connect|disconnect`.
fn run_client(command: &cli::ClientCommand, config: &std::path::Path) -> anyhow::Result<Exit> {
    let (args, connect) = match command {
        cli::ClientCommand::Connect(a) => (a, true),
        cli::ClientCommand::Disconnect(a) => (a, false),
    };
    let file = match &args.client_config {
        Some(path) => path.clone(),
        None => client_cmd::default_location(args.client)?,
    };
    if connect {
        client_cmd::connect(args.client, &file, config)
    } else {
        client_cmd::disconnect(args.client, &file)
    }
}

/// Most a client config given to `import` may hold.
const MAX_IMPORT_BYTES: u64 = 16 * 1024 * 1024;

/// `portcullis import`: convert a client's `mcpServers` JSON into TOML.
fn run_import(args: &cli::ImportArgs) -> anyhow::Result<Exit> {
    use anyhow::Context as _;
    let file = args.file.as_path();
    // A regular file only (a FIFO is never waited on), of a client's size.
    let text = portcullis_sources::files::read_regular_to_string(file, MAX_IMPORT_BYTES)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let imported = import::import(&text, Some(file))
        .with_context(|| format!("cannot import {}", file.display()))?;
    match &args.output {
        Some(out) => {
            // Never replace a config (perhaps hand-edited) by accident.
            let mut options = std::fs::OpenOptions::new();
            options.write(true);
            if args.force {
                options.create(true).truncate(true);
            } else {
                options.create_new(true);
            }
            let mut opened = match options.open(out) {
                Ok(opened) => opened,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    errln!(
                        "error: {} already exists; pass --force to overwrite it, or choose another --output",
                        out.display()
                    );
                    return Ok(Exit::Usage);
                }
                Err(e) => return Err(e).with_context(|| format!("cannot write {}", out.display())),
            };
            std::io::Write::write_all(&mut opened, imported.toml.as_bytes())
                .with_context(|| format!("cannot write {}", out.display()))?;
        }
        None => out!("{}", imported.toml),
    }
    for skipped in &imported.skipped {
        errln!("skipped: {skipped}");
    }
    for note in &imported.notes {
        errln!("note: {note}");
    }
    for (variable, field) in &imported.variables {
        errln!("export {variable}=…   # the secret that was in {field}");
    }
    // Where the config will be: the output, else (printed to stdout) the
    // usual name in this directory.
    let config = args
        .output
        .as_deref()
        .unwrap_or(std::path::Path::new("portcullis.toml"));
    let config = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    let program = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "portcullis".to_owned());
    let variables = imported.variable_names();
    errln!(
        "then, in {}, replace those servers with this one entry (Portcullis starts them):\n  {}",
        file.display(),
        client_cmd::client_entry(args.client, &program, &config, &variables)
    );
    if !variables.is_empty() {
        errln!(
            "the client starts Portcullis without your shell's exports: replace each <VAR> in its \"env\" with the secret's value"
        );
    }
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn exit_codes_match_the_design_brief() {
        assert_eq!(Exit::Success.code(), 0);
        assert_eq!(Exit::ToolError.code(), 1);
        assert_eq!(Exit::Usage.code(), 2);
    }
}
