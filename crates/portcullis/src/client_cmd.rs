//! `portcullis client connect|disconnect CLIENT`: put Portcullis in front of
//! the MCP servers a desktop client already has, by editing the client's
//! own config file, and take it out again.
//!
//! `connect` backs the client file up (`<file>.bak-portcullis`, private to
//! the user), moves every server it lists into the Portcullis config
//! through [`crate::import`] (secrets become `${VAR}` references), and
//! leaves one entry in the client, `portcullis`, that starts
//! `portcullis serve --stdio --config <absolute path>` with those variables
//! in its `env` block (the client does not inherit the shell's exports;
//! the values were in the client file already, so nothing new is exposed).
//! Every other key of the client file is kept as it was. A second
//! `connect` changes nothing; servers added to the client since are moved
//! too. `disconnect` puts the servers of the backup back, keeps servers
//! added since, removes the `portcullis` entry and the backup; the
//! Portcullis config is left as it is.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};

use crate::Exit;
use crate::cli::Client;

/// The name of the one entry `connect` leaves in the client's config.
pub const ENTRY: &str = "portcullis";

/// The suffix of the backup `connect` writes beside the client's file.
pub const BACKUP_SUFFIX: &str = ".bak-portcullis";

/// Where `client` keeps its MCP servers by default.
pub fn default_location(client: Client) -> anyhow::Result<PathBuf> {
    let home = || {
        std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(PathBuf::from)
            .context("cannot find the home directory; pass --client-config")
    };
    Ok(match client {
        // Claude Desktop: the app's support directory.
        Client::Claude => {
            if cfg!(target_os = "macos") {
                home()?.join("Library/Application Support/Claude/claude_desktop_config.json")
            } else if cfg!(windows) {
                let appdata = std::env::var_os("APPDATA")
                    .map(PathBuf::from)
                    .context("APPDATA is not set; pass --client-config")?;
                appdata.join("Claude").join("claude_desktop_config.json")
            } else {
                let config = std::env::var_os("XDG_CONFIG_HOME")
                    .map(PathBuf::from)
                    .map_or_else(|| home().map(|h| h.join(".config")), Ok)?;
                config.join("Claude").join("claude_desktop_config.json")
            }
        }
        // Cursor: the user-wide file (a project's `.cursor/mcp.json` is
        // passed with --client-config).
        Client::Cursor => home()?.join(".cursor").join("mcp.json"),
        // VS Code: the workspace's file, in the current directory.
        Client::Vscode => PathBuf::from(".vscode").join("mcp.json"),
    })
}

/// The key of the client's file that holds its servers.
fn servers_key(client: Client) -> &'static str {
    match client {
        Client::Vscode => "servers",
        Client::Claude | Client::Cursor => "mcpServers",
    }
}

/// The backup of `file`.
fn backup_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(BACKUP_SUFFIX);
    PathBuf::from(name)
}

fn read_json(file: &Path) -> anyhow::Result<Map<String, Value>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    match serde_json::from_str::<Value>(&text)
        .with_context(|| format!("{} is not JSON", file.display()))?
    {
        Value::Object(map) => Ok(map),
        _ => bail!("{} is not a JSON object", file.display()),
    }
}

/// Writes `text` to `file` through a temporary file beside it and a
/// rename, so the client never reads half a file; `private` makes it
/// readable by the user only.
fn write_atomically(file: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut temp = file.as_os_str().to_owned();
    temp.push(".portcullis-tmp");
    let temp = PathBuf::from(temp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        // The client file holds secrets: never wider than it was.
        let mode = if private {
            0o600
        } else {
            std::fs::metadata(file).map_or(0o600, |m| {
                use std::os::unix::fs::PermissionsExt as _;
                m.permissions().mode() & 0o777
            })
        };
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut opened = options
        .open(&temp)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::io::Write::write_all(&mut opened, text.as_bytes())
        .and_then(|()| opened.sync_all())
        .with_context(|| format!("cannot write {}", temp.display()))?;
    std::fs::rename(&temp, file).with_context(|| format!("cannot replace {}", file.display()))
}

fn pretty(map: &Map<String, Value>) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(map)?;
    text.push('\n');
    Ok(text)
}

/// The entry that starts Portcullis, for `client`.
fn portcullis_entry(
    client: Client,
    program: &str,
    config: &Path,
    env: &Map<String, Value>,
    env_file: Option<&str>,
) -> Value {
    let mut entry = Map::new();
    if client == Client::Vscode {
        entry.insert("type".into(), Value::from("stdio"));
    }
    entry.insert("command".into(), Value::from(program));
    entry.insert(
        "args".into(),
        serde_json::json!(["serve", "--stdio", "--config", config.display().to_string()]),
    );
    if !env.is_empty() {
        entry.insert("env".into(), Value::Object(env.clone()));
    }
    if let Some(env_file) = env_file {
        entry.insert("envFile".into(), Value::from(env_file));
    }
    Value::Object(entry)
}

/// Upstream names the Portcullis config at `config` defines already
/// (nothing when it does not exist yet).
fn existing_upstreams(config: &Path) -> anyhow::Result<Vec<String>> {
    match std::fs::read_to_string(config) {
        Ok(text) => {
            let table: toml::Table = toml::from_str(&text)
                .with_context(|| format!("{} is not valid TOML", config.display()))?;
            Ok(table
                .get("upstreams")
                .and_then(toml::Value::as_table)
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", config.display())),
    }
}

/// `portcullis client connect CLIENT`.
pub fn connect(client: Client, client_file: &Path, config: &Path) -> anyhow::Result<Exit> {
    let config = std::path::absolute(config)
        .with_context(|| format!("cannot resolve {}", config.display()))?;
    let key = servers_key(client);
    let mut document = read_json(client_file)?;
    let servers = match document.get(key) {
        Some(Value::Object(servers)) => servers.clone(),
        None => Map::new(),
        Some(_) => bail!("{}: \"{key}\" is not an object", client_file.display()),
    };
    let moved: Map<String, Value> = servers
        .iter()
        .filter(|(name, _)| name.as_str() != ENTRY)
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    if moved.is_empty() {
        if servers.contains_key(ENTRY) {
            errln!(
                "{} already starts Portcullis; nothing changed",
                client_file.display()
            );
            return Ok(Exit::Success);
        }
        errln!(
            "{} lists no MCP servers under \"{key}\"; nothing to connect",
            client_file.display()
        );
        return Ok(Exit::Usage);
    }

    // The backup: the client's file as it was, or, on a later connect,
    // extended with the servers added since.
    let backup = backup_of(client_file);
    let recorded = if backup.exists() {
        let mut recorded = read_json(&backup)?;
        let entry = recorded
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(old) = entry {
            for (name, server) in &moved {
                old.entry(name.clone()).or_insert_with(|| server.clone());
            }
        }
        recorded
    } else {
        document.clone()
    };
    write_atomically(&backup, &pretty(&recorded)?, true)?;

    // The servers into the Portcullis config, through `import`.
    let existing = existing_upstreams(&config)?;
    let mut to_import = Map::new();
    for (name, server) in &moved {
        if existing.iter().any(|e| e == name) {
            errln!(
                "note: {} already has upstreams.{name}; kept as it is",
                config.display()
            );
        } else {
            to_import.insert(name.clone(), server.clone());
        }
    }
    let mut env = match servers.get(ENTRY).and_then(|e| e.get("env")) {
        Some(Value::Object(env)) => env.clone(),
        _ => Map::new(),
    };
    let mut env_file = servers
        .get(ENTRY)
        .and_then(|e| e.get("envFile"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if !to_import.is_empty() {
        let mut wrapped = Map::new();
        wrapped.insert(key.to_owned(), Value::Object(to_import.clone()));
        if let Some(inputs) = document.get("inputs") {
            wrapped.insert("inputs".into(), inputs.clone());
        }
        let text = serde_json::to_string(&wrapped)?;
        let imported = crate::import::import(&text, Some(client_file))
            .with_context(|| format!("cannot import {}", client_file.display()))?;
        if !imported.clashes.is_empty() {
            bail!(
                "two servers keep different secrets under the same name ({}): one variable cannot carry both; \
                 rename one in {} and connect again",
                imported.clashes.join(", "),
                client_file.display()
            );
        }
        for skipped in &imported.skipped {
            errln!("skipped: {skipped}");
        }
        for note in &imported.notes {
            errln!("note: {note}");
        }
        for (variable, value) in &imported.values {
            env.insert(variable.clone(), Value::from(value.clone()));
        }
        // An envFile's values are never copied: the entry reads the same file.
        if env_file.is_none() {
            env_file = to_import
                .values()
                .find_map(|s| s.get("envFile").and_then(Value::as_str))
                .map(str::to_owned);
        }
        append_config(&config, &imported.toml)?;
    }
    let program = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "portcullis".to_owned());
    let mut new_servers = Map::new();
    new_servers.insert(
        ENTRY.to_owned(),
        portcullis_entry(client, &program, &config, &env, env_file.as_deref()),
    );
    document.insert(key.to_owned(), Value::Object(new_servers));
    write_atomically(client_file, &pretty(&document)?, false)?;
    let names: Vec<&str> = moved.keys().map(String::as_str).collect();
    errln!(
        "connected {client}: {} now starts Portcullis ({}), which starts {}; backup in {}",
        client_file.display(),
        config.display(),
        names.join(", "),
        backup.display()
    );
    errln!("restart the client to pick it up; `portcullis client disconnect {client}` undoes it");
    Ok(Exit::Success)
}

/// Adds `toml` (whole `[upstreams.*]` tables) to the Portcullis config,
/// creating it (private to the user) when it does not exist.
fn append_config(config: &Path, toml: &str) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(config) {
        Ok(mut text) => {
            if !text.ends_with('\n') && !text.is_empty() {
                text.push('\n');
            }
            text.push('\n');
            text.push_str(toml);
            text
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml.to_owned(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", config.display())),
    };
    // What is written must load; never leave a config that does not.
    toml::from_str::<toml::Table>(&text)
        .with_context(|| format!("the servers cannot be added to {}", config.display()))?;
    write_atomically(config, &text, true)
}

/// `portcullis client disconnect CLIENT`.
pub fn disconnect(client: Client, client_file: &Path) -> anyhow::Result<Exit> {
    let key = servers_key(client);
    let backup = backup_of(client_file);
    let mut document = read_json(client_file)?;
    let current = match document.get(key) {
        Some(Value::Object(servers)) => servers.clone(),
        _ => Map::new(),
    };
    if !backup.exists() {
        if current.contains_key(ENTRY) {
            errln!(
                "error: {} starts Portcullis but its backup {} is gone; restore the servers by hand",
                client_file.display(),
                backup.display()
            );
            return Ok(Exit::Usage);
        }
        errln!(
            "{} does not start Portcullis; nothing changed",
            client_file.display()
        );
        return Ok(Exit::Success);
    }
    let recorded = read_json(&backup)?;
    let mut restored = match recorded.get(key) {
        Some(Value::Object(servers)) => servers.clone(),
        _ => Map::new(),
    };
    // Servers added to the client since `connect` stay.
    for (name, server) in current {
        if name != ENTRY {
            restored.entry(name).or_insert(server);
        }
    }
    document.insert(key.to_owned(), Value::Object(restored));
    write_atomically(client_file, &pretty(&document)?, false)?;
    std::fs::remove_file(&backup).with_context(|| format!("cannot remove {}", backup.display()))?;
    errln!(
        "disconnected {client}: {} starts its own servers again (the Portcullis config is unchanged)",
        client_file.display()
    );
    Ok(Exit::Success)
}

/// The one entry to put in the client's config in place of the servers
/// that were imported, so the client starts Portcullis (over stdio, with
/// `config`) and Portcullis starts them: a JSON member the user pastes as
/// it is. `program` is the `portcullis` binary (a desktop client may not
/// share the shell's `PATH`, so an absolute path is best). `variables` are
/// the secrets the config refers to: a desktop app does not inherit the
/// shell's exports, so the entry carries an `env` block naming each, with
/// a `<VAR>` placeholder for the user to replace by the value.
pub fn client_entry(client: Client, program: &str, config: &Path, variables: &[String]) -> String {
    let args = serde_json::json!(["serve", "--stdio", "--config", config.display().to_string()]);
    let mut entry = serde_json::json!({"command": program, "args": args});
    if !variables.is_empty() {
        let env: serde_json::Map<String, Value> = variables
            .iter()
            .map(|v| (v.clone(), Value::String(format!("<{v}>"))))
            .collect();
        entry["env"] = Value::Object(env);
    }
    match client {
        Client::Vscode => {
            let mut typed = serde_json::json!({"type": "stdio"});
            if let (Some(typed), Some(entry)) = (typed.as_object_mut(), entry.as_object()) {
                typed.extend(entry.clone());
            }
            format!(
                "\"servers\": {}",
                serde_json::json!({ "portcullis": typed })
            )
        }
        Client::Claude | Client::Cursor => {
            format!(
                "\"mcpServers\": {}",
                serde_json::json!({ "portcullis": entry })
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_to_put_back_starts_portcullis_over_stdio() {
        let config = Path::new("/srv/gateway/portcullis.toml");
        let claude = client_entry(Client::Claude, "/usr/local/bin/portcullis", config, &[]);
        assert_eq!(
            claude,
            r#""mcpServers": {"portcullis":{"command":"/usr/local/bin/portcullis","args":["serve","--stdio","--config","/srv/gateway/portcullis.toml"]}}"#
        );
        let parsed: serde_json::Value =
            serde_json::from_str(&format!("{{{claude}}}")).expect("a JSON member");
        assert_eq!(parsed["mcpServers"]["portcullis"]["args"][1], "--stdio");
        let cursor = client_entry(Client::Cursor, "portcullis", config, &[]);
        assert!(
            cursor.starts_with(r#""mcpServers": {"portcullis":{"#)
                && cursor.contains(r#""command":"portcullis""#),
            "{cursor}"
        );
        let vscode = client_entry(Client::Vscode, "portcullis", config, &[]);
        let parsed: serde_json::Value =
            serde_json::from_str(&format!("{{{vscode}}}")).expect("a JSON member");
        assert_eq!(parsed["servers"]["portcullis"]["type"], "stdio");
        // With secrets to set, an `env` block names each: a desktop app
        // does not inherit the shell's exports.
        let vars = ["DOCS_API_KEY".to_owned(), "GITHUB_TOKEN".to_owned()];
        for client in [Client::Claude, Client::Cursor, Client::Vscode] {
            let entry = client_entry(client, "portcullis", config, &vars);
            let parsed: serde_json::Value =
                serde_json::from_str(&format!("{{{entry}}}")).expect("a JSON member");
            let outer = if client == Client::Vscode {
                "servers"
            } else {
                "mcpServers"
            };
            let env = &parsed[outer]["portcullis"]["env"];
            assert_eq!(env["DOCS_API_KEY"], "<DOCS_API_KEY>", "{entry}");
            assert_eq!(env["GITHUB_TOKEN"], "<GITHUB_TOKEN>", "{entry}");
        }
    }
}
