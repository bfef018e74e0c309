//! Agent Plugins directories: `plugin.json` + `mcp.json` into
//! [`McpServerConfig`]s.
//!
//! [`load_agent_plugin`] never panics and never returns an error for bad
//! input: whatever is wrong becomes a [`Diagnostic`] carrying the Agent
//! Plugins specification section, a kebab-case rule name and an origin
//! (`plugin.json`, `mcp.json`, or a server name at launch).
//!
//! # Failure widths
//!
//! | What broke | Effect |
//! |---|---|
//! | bad `plugin.json` | the plugin is rejected ([`PluginLoad::Rejected`]) |
//! | bad `mcp.json` (unreadable, not JSON, wrong shape, other spec version) | no servers, one diagnostic |
//! | bad server entry | that server skipped, its siblings load |
//! | bad skill folder / bad flow file | not applicable: Portcullis does not load skills or flows |
//! | launch-time failure (`PLUGIN_DATA` unwritable, symlink escape) | that server gets no tools; its siblings connect |
//!
//! **Skills and flows** (`skills/`, `flows/`) are an agent runtime's
//! business, not a gateway's: this loader ignores both directories entirely
//! and reports nothing about them.
//!
//! # `plugin.json`
//!
//! Checked in this order, each failure fatal: existence (5.1
//! `manifest-missing`), containment of the file with symlinks resolved (4.1
//! `path-escapes-plugin-root`), read (5.1 `manifest-unreadable`), JSON (5.2
//! `invalid-json`), object (5.2 `manifest-not-an-object`). A key outside
//! `$schema, name, version, description, author, homepage, repository,
//! license, keywords, extensions` is dropped with a non-fatal 5.2
//! `unknown-top-level-field`. Then the fields: `$schema` required (5.3) and
//! exactly [`PLUGIN_SCHEMA`] (5.2 `unsupported-schema-version`); `name`
//! required (5.3), `^[a-z0-9.-]+$` and at most 64 characters (5.5
//! `name-charset`), alphanumeric at both ends (5.5 `name-boundary`), no `--`
//! or `..` (5.5 `name-repetition`); `author` only string `name`/`email`/`url`
//! (5.4 `author-unknown-field`; `{}` counts as absent); optional strings and
//! `keywords: string[]` (5.2 `invalid-field-type`); an `extensions`
//! namespace that is not an object is dropped with a non-fatal 8.1
//! `extensions-not-an-object`.
//!
//! # `mcp.json`
//!
//! Optional; absent means no servers and no diagnostic. One that resolves
//! (through a symlink) outside the plugin root is 4.1
//! `path-escapes-plugin-root` and gives no servers; only the resolved file
//! is read. Of its content, a spec-version
//! mismatch with `plugin.json` is checked first (10.1
//! `mcp-config-version-mismatch`); unreadable, not JSON, a key other than
//! `$schema`/`mcpServers`, a `$schema` other than [`MCP_SCHEMA`] or a
//! non-object `mcpServers` is 7.2.2 `mcp-config-invalid`. Each entry is then
//! checked on its own (origin `mcp.json`): structure (not an object, unknown
//! `type`, keys of the other variant) is 7.2.2 `server-entry-invalid`; field
//! values (command, args, env, cwd, url, headers) are 7.2.1
//! `server-entry-invalid`; a `./` command that leaves the root is 4.1 and a
//! `cwd` that leaves its root is 7.2.1 `path-escapes-plugin-root`; an `env`
//! key `PLUGIN_ROOT`/`PLUGIN_DATA` is 9.2 `env-reserved-name`. An entry that
//! survives and whose `env` looks like it carries a secret gets the advisory
//! 9.2 `secret-in-env` (never for a rejected entry).
//!
//! `${PLUGIN_ROOT}` and `${PLUGIN_DATA}` are substituted in `args`, `env`
//! values and `cwd` in a single left-to-right pass; substituted text is never
//! rescanned, so a root whose path contains `${PLUGIN_DATA}` stays literal.
//! `PLUGIN_DATA` is `<parent of the plugin root>/data/<plugin name>`.
//! Containment at parse time is lexical (`..` pops a segment); at launch the
//! [`PluginLaunch`] carried in [`StdioConfig::plugin`] makes the launcher
//! create `PLUGIN_DATA`, prove it writable, and re-check command and `cwd`
//! with symlinks resolved ([`prepare_launch`]). The child then gets the
//! minimal environment of every stdio server, the plugin's `env`, and
//! `PLUGIN_ROOT` / `PLUGIN_DATA` set last; its default `cwd` is the plugin
//! root. Paths need no rebasing from a virtual filesystem onto the host:
//! this loader reads the real filesystem, so every path it
//! stores is already a host path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use portcullis_catalog::{Diagnostic, Rule};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::config::{CwdRoot, PluginLaunch};
use crate::config::{McpServerConfig, RemoteConfig, StdioConfig, check_remote_url};

/// The only `plugin.json` `$schema` this build accepts.
pub const PLUGIN_SCHEMA: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
/// The only `mcp.json` `$schema` this build accepts.
pub const MCP_SCHEMA: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";
/// The file [`prepare_launch`] writes and deletes to prove `PLUGIN_DATA`
/// writable.
pub const WRITE_PROBE: &str = ".portcullis-write-probe";

const MANIFEST: &str = "plugin.json";
const MCP_CONFIG: &str = "mcp.json";
const SCHEMA_PREFIX: &str = "https://agent-plugins.org/schemas/";
const PERMITTED_KEYS: &[&str] = &[
    "$schema",
    "name",
    "version",
    "description",
    "author",
    "homepage",
    "repository",
    "license",
    "keywords",
    "extensions",
];
const STDIO_KEYS: &[&str] = &["type", "command", "args", "env", "cwd"];
const REMOTE_KEYS: &[&str] = &["type", "url", "headers"];
const RESERVED_ENV: &[&str] = &["PLUGIN_ROOT", "PLUGIN_DATA"];
const NAME_MAX: usize = 64;

/// The outcome of [`load_agent_plugin`].
#[derive(Debug, Clone, PartialEq)]
pub enum PluginLoad {
    /// The manifest is valid. `servers` holds every `mcp.json` entry that
    /// passed its checks, in file order.
    Ok {
        /// The manifest, unknown keys and bad extension namespaces dropped
        /// (boxed: it dwarfs the rejected variant).
        manifest: Box<PluginManifest>,
        /// The plugin's MCP servers; stdio ones carry [`PluginLaunch`].
        servers: Vec<McpServerConfig>,
        /// Everything non-fatal, in order: manifest, then `mcp.json`.
        diagnostics: Vec<Diagnostic>,
    },
    /// `plugin.json` is missing or invalid; nothing of the plugin loads.
    Rejected {
        /// The fatal finding (origin `plugin.json`).
        rejection: Diagnostic,
        /// Every diagnostic, the rejection included as the last one.
        diagnostics: Vec<Diagnostic>,
    },
}

impl PluginLoad {
    /// Whether the plugin loaded.
    pub fn is_ok(&self) -> bool {
        matches!(self, PluginLoad::Ok { .. })
    }

    /// Every diagnostic, whichever the outcome.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            PluginLoad::Ok { diagnostics, .. } | PluginLoad::Rejected { diagnostics, .. } => {
                diagnostics
            }
        }
    }

    /// The loaded servers (none for a rejected plugin).
    pub fn servers(&self) -> &[McpServerConfig] {
        match self {
            PluginLoad::Ok { servers, .. } => servers,
            PluginLoad::Rejected { .. } => &[],
        }
    }
}

/// A validated `plugin.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginManifest {
    /// `$schema`, always [`PLUGIN_SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: String,
    /// The plugin name; names the `PLUGIN_DATA` directory.
    pub name: String,
    /// `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `description`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `author`; an empty object is treated as absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<PluginAuthor>,
    /// `homepage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
    /// `repository`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// `license`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// `keywords`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// `extensions`: namespace → object; namespaces that were not objects
    /// are dropped.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Map<String, Value>,
}

/// `plugin.json` `author`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginAuthor {
    /// `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `email`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Loads the Agent Plugins directory at `root`: validates `plugin.json` and
/// turns `mcp.json` into server configs. Never panics; see the module doc
/// for every rule and how wide each failure reaches.
///
/// ```
/// use portcullis_upstream::plugins::{load_agent_plugin, PluginLoad};
///
/// let load = load_agent_plugin(std::path::Path::new("/nonexistent/plugin"));
/// let PluginLoad::Rejected { rejection, .. } = load else { panic!() };
/// assert_eq!(rejection.rule.as_str(), "manifest-missing");
/// assert_eq!(rejection.section, "5.1");
/// ```
pub fn load_agent_plugin(root: &Path) -> PluginLoad {
    // Plugin paths are stored absolute: the child runs in another cwd.
    let root = std::path::absolute(root)
        .map(|r| normalize(&r))
        .unwrap_or_else(|_| root.to_path_buf());
    let mut diagnostics = Vec::new();
    let manifest = match load_manifest(&root, &mut diagnostics) {
        Ok(manifest) => manifest,
        Err(rejection) => {
            diagnostics.push(rejection.clone());
            return PluginLoad::Rejected {
                rejection,
                diagnostics,
            };
        }
    };
    let servers = load_mcp(&root, &manifest, &mut diagnostics);
    PluginLoad::Ok {
        manifest: Box::new(manifest),
        servers,
        diagnostics,
    }
}

/// `PLUGIN_DATA` for a plugin: `<parent of root>/data/<name>`, e.g.
/// `/plugins/acme` → `/plugins/data/acme`.
pub fn plugin_data_root(root: &Path, name: &str) -> PathBuf {
    let parent = root.parent().unwrap_or(root);
    parent.join("data").join(name)
}

fn manifest_fail(rule: Rule, message: impl Into<String>) -> Diagnostic {
    Diagnostic::new(rule, MANIFEST, message)
}

fn load_manifest(
    root: &Path,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<PluginManifest, Diagnostic> {
    let path = root.join(MANIFEST);
    if !path.exists() {
        return Err(manifest_fail(
            Rule::ManifestMissing,
            format!("plugin.json was not found in {}.", root.display()),
        ));
    }
    // A plugin.json symlinked out of the plugin would let one plugin pose as
    // another's manifest (or read host files through error messages).
    match (root.canonicalize(), path.canonicalize()) {
        (Ok(real_root), Ok(real_file)) if real_file.starts_with(&real_root) => {}
        (Ok(_), Ok(real_file)) => {
            return Err(manifest_fail(
                Rule::PathEscapesPluginRoot,
                format!(
                    "plugin.json resolves to {}, outside the plugin root.",
                    real_file.display()
                ),
            ));
        }
        (Err(e), _) | (_, Err(e)) => {
            return Err(manifest_fail(
                Rule::ManifestUnreadable,
                format!("plugin.json could not be resolved: {e}."),
            ));
        }
    }
    let bytes = read_plugin_file(&path).map_err(|e| {
        manifest_fail(
            Rule::ManifestUnreadable,
            format!("plugin.json could not be read: {e}."),
        )
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        manifest_fail(
            Rule::InvalidJson,
            format!("plugin.json is not valid JSON: {e}."),
        )
    })?;
    let Value::Object(mut fields) = value else {
        return Err(manifest_fail(
            Rule::ManifestNotAnObject,
            "plugin.json must be a JSON object.",
        ));
    };
    let unknown: Vec<String> = fields
        .keys()
        .filter(|k| !PERMITTED_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    for key in unknown {
        fields.shift_remove(&key);
        diagnostics.push(manifest_fail(
            Rule::UnknownTopLevelField,
            format!(
                "plugin.json field \"{key}\" is not part of the specification; it was ignored."
            ),
        ));
    }

    let schema = match fields.get("$schema") {
        None => {
            return Err(manifest_fail(
                Rule::RequiredFieldMissing,
                "plugin.json is missing the required field \"$schema\".",
            ));
        }
        Some(Value::String(s)) if s == PLUGIN_SCHEMA => s.clone(),
        Some(other) => {
            let shown = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_owned);
            let message = if schema_version(&shown, "plugin").is_some() {
                format!(
                    "Unsupported plugin.json schema version \"{shown}\"; this build supports {PLUGIN_SCHEMA}."
                )
            } else {
                format!("Unrecognized plugin.json $schema \"{shown}\"; expected {PLUGIN_SCHEMA}.")
            };
            return Err(manifest_fail(Rule::UnsupportedSchemaVersion, message));
        }
    };

    let name = match fields.get("name") {
        None => {
            return Err(manifest_fail(
                Rule::RequiredFieldMissing,
                "plugin.json is missing the required field \"name\".",
            ));
        }
        Some(Value::String(name)) => name.clone(),
        Some(_) => {
            return Err(manifest_fail(
                Rule::NameCharset,
                "plugin.json \"name\" must be a string of a-z, 0-9, '.' and '-'.",
            ));
        }
    };
    check_name(&name)?;

    let author = match fields.get("author") {
        None => None,
        Some(Value::Object(a)) => {
            if let Some(key) = a
                .keys()
                .find(|k| !["name", "email", "url"].contains(&k.as_str()))
            {
                return Err(manifest_fail(
                    Rule::AuthorUnknownField,
                    format!(
                        "plugin.json author has the field \"{key}\"; only name, email and url are allowed."
                    ),
                ));
            }
            let field = |key: &str| -> Result<Option<String>, Diagnostic> {
                match a.get(key) {
                    None => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(manifest_fail(
                        Rule::AuthorUnknownField,
                        format!("plugin.json author.{key} must be a string."),
                    )),
                }
            };
            let author = PluginAuthor {
                name: field("name")?,
                email: field("email")?,
                url: field("url")?,
            };
            (author != PluginAuthor::default()).then_some(author)
        }
        Some(_) => {
            return Err(manifest_fail(
                Rule::InvalidFieldType,
                "plugin.json \"author\" must be an object.",
            ));
        }
    };

    let optional = |key: &str| -> Result<Option<String>, Diagnostic> {
        match fields.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(manifest_fail(
                Rule::InvalidFieldType,
                format!("plugin.json \"{key}\" must be a string."),
            )),
        }
    };
    let version = optional("version")?;
    let description = optional("description")?;
    let homepage = optional("homepage")?;
    let repository = optional("repository")?;
    let license = optional("license")?;

    let keywords = match fields.get("keywords") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|k| k.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                manifest_fail(
                    Rule::InvalidFieldType,
                    "plugin.json \"keywords\" must be an array of strings.",
                )
            })?,
        Some(_) => {
            return Err(manifest_fail(
                Rule::InvalidFieldType,
                "plugin.json \"keywords\" must be an array of strings.",
            ));
        }
    };

    let mut extensions = Map::new();
    match fields.get("extensions") {
        None => {}
        Some(Value::Object(namespaces)) => {
            for (namespace, value) in namespaces {
                if value.is_object() {
                    extensions.insert(namespace.clone(), value.clone());
                } else {
                    diagnostics.push(manifest_fail(
                        Rule::ExtensionsNotAnObject,
                        format!("plugin.json extension namespace \"{namespace}\" is not an object; it was ignored."),
                    ));
                }
            }
        }
        Some(_) => diagnostics.push(manifest_fail(
            Rule::ExtensionsNotAnObject,
            "plugin.json \"extensions\" is not an object; it was ignored.",
        )),
    }

    Ok(PluginManifest {
        schema,
        name,
        version,
        description,
        author,
        homepage,
        repository,
        license,
        keywords,
        extensions,
    })
}

/// The three `name` rules, in order (charset and length, alphanumeric ends,
/// no `--` or `..`); the first that fails is reported.
fn check_name(name: &str) -> Result<(), Diagnostic> {
    let charset = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !charset {
        return Err(manifest_fail(
            Rule::NameCharset,
            format!(
                "plugin name \"{name}\" must be 1 to {NAME_MAX} characters of a-z, 0-9, '.' and '-'."
            ),
        ));
    }
    let alnum = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    if !alnum(name.as_bytes().first()) || !alnum(name.as_bytes().last()) {
        return Err(manifest_fail(
            Rule::NameBoundary,
            format!("plugin name \"{name}\" must start and end with a letter or digit."),
        ));
    }
    if name.contains("--") || name.contains("..") {
        return Err(manifest_fail(
            Rule::NameRepetition,
            format!("plugin name \"{name}\" must not contain \"--\" or \"..\"."),
        ));
    }
    Ok(())
}

/// The version in an agent-plugins schema URL for `file`
/// (`https://agent-plugins.org/schemas/<version>/<file>.schema.json`).
fn schema_version<'a>(url: &'a str, file: &str) -> Option<&'a str> {
    let rest = url.strip_prefix(SCHEMA_PREFIX)?;
    let (version, tail) = rest.split_once('/')?;
    let expected = format!("{file}.schema.json");
    (!version.is_empty() && tail == expected).then_some(version)
}

/// Most a `plugin.json` or `mcp.json` may hold.
const MAX_PLUGIN_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a plugin file: a regular file only, at most
/// [`MAX_PLUGIN_FILE_BYTES`]. It is opened without blocking and the opened
/// file checked (no window to swap it), since a FIFO would block the open
/// and the read forever (hanging `check`, `tools` and `serve`) and a
/// device would never end. (The sources crate does the same for the files
/// it reads; the two crates share no dependency with I/O.)
fn read_plugin_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        #[cfg(unix)]
        use std::os::unix::fs::FileTypeExt;
        let what = match () {
            () if kind.is_dir() => "a directory",
            #[cfg(unix)]
            () if kind.is_fifo() => "a FIFO",
            #[cfg(unix)]
            () if kind.is_char_device() || kind.is_block_device() => "a device",
            #[cfg(unix)]
            () if kind.is_socket() => "a socket",
            () => "a special file",
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file ({what})"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PLUGIN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PLUGIN_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_PLUGIN_FILE_BYTES} bytes"),
        ));
    }
    Ok(bytes)
}

fn mcp_fail(rule: Rule, message: impl Into<String>) -> Diagnostic {
    Diagnostic::new(rule, MCP_CONFIG, message)
}

fn load_mcp(
    root: &Path,
    manifest: &PluginManifest,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<McpServerConfig> {
    let path = root.join(MCP_CONFIG);
    // `symlink_metadata`: a dangling link is there (and refused below), not
    // silently absent.
    if std::fs::symlink_metadata(&path).is_err() {
        return Vec::new();
    }
    // As for plugin.json: an mcp.json symlinked out of the plugin would let
    // a plugin launch servers configured elsewhere on the host (another
    // plugin's, or any JSON file's), under this plugin's name. The file
    // read is the resolved one that was checked.
    let path = match (root.canonicalize(), path.canonicalize()) {
        (Ok(real_root), Ok(real_file)) if real_file.starts_with(&real_root) => real_file,
        (Ok(_), Ok(real_file)) => {
            diagnostics.push(mcp_fail(
                Rule::PathEscapesPluginRoot,
                format!(
                    "mcp.json resolves to {}, outside the plugin root.",
                    real_file.display()
                ),
            ));
            return Vec::new();
        }
        (Err(e), _) | (_, Err(e)) => {
            diagnostics.push(mcp_fail(
                Rule::McpConfigInvalid,
                format!("mcp.json could not be resolved: {e}."),
            ));
            return Vec::new();
        }
    };
    let bytes = match read_plugin_file(&path) {
        Ok(bytes) => bytes,
        Err(e) => {
            diagnostics.push(mcp_fail(
                Rule::McpConfigInvalid,
                format!("mcp.json could not be read: {e}."),
            ));
            return Vec::new();
        }
    };
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        diagnostics.push(mcp_fail(
            Rule::McpConfigInvalid,
            "mcp.json is not valid JSON.",
        ));
        return Vec::new();
    };
    // The version check comes first: a file written for another spec
    // version would otherwise be reported as merely malformed.
    let mcp_schema = value
        .get("$schema")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let (Some(theirs), Some(ours)) = (
        schema_version(&mcp_schema, "mcp"),
        schema_version(&manifest.schema, "plugin"),
    ) && theirs != ours
    {
        diagnostics.push(mcp_fail(
            Rule::McpConfigVersionMismatch,
            format!("mcp.json declares spec version {theirs} but plugin.json declares {ours}; MCP servers are disabled."),
        ));
        return Vec::new();
    }
    let Value::Object(top) = value else {
        diagnostics.push(mcp_fail(
            Rule::McpConfigInvalid,
            "mcp.json must be a JSON object.",
        ));
        return Vec::new();
    };
    if let Some(key) = top.keys().find(|k| *k != "$schema" && *k != "mcpServers") {
        diagnostics.push(mcp_fail(
            Rule::McpConfigInvalid,
            format!(
                "mcp.json has the field \"{key}\"; only \"$schema\" and \"mcpServers\" are allowed."
            ),
        ));
        return Vec::new();
    }
    if mcp_schema != MCP_SCHEMA {
        let message = if mcp_schema.is_empty() {
            "mcp.json is missing \"$schema\".".to_owned()
        } else {
            format!("mcp.json \"$schema\" must be {MCP_SCHEMA}.")
        };
        diagnostics.push(mcp_fail(Rule::McpConfigInvalid, message));
        return Vec::new();
    }
    let Some(Value::Object(entries)) = top.get("mcpServers") else {
        diagnostics.push(mcp_fail(
            Rule::McpConfigInvalid,
            "mcp.json \"mcpServers\" must be an object.",
        ));
        return Vec::new();
    };
    let context = Context {
        root: root.to_path_buf(),
        data: plugin_data_root(root, &manifest.name),
    };
    let mut servers = Vec::new();
    for (name, entry) in entries {
        match context.entry(name, entry) {
            Ok((server, advisories)) => {
                servers.push(server);
                diagnostics.extend(advisories);
            }
            Err(diagnostic) => diagnostics.push(diagnostic),
        }
    }
    servers
}

/// The two roots an entry's paths are resolved against.
struct Context {
    root: PathBuf,
    data: PathBuf,
}

/// A per-entry failure: rule, section, message.
fn entry_fail(
    rule: Rule,
    section: &str,
    server: &str,
    reason: impl std::fmt::Display,
) -> Diagnostic {
    mcp_fail(
        rule,
        format!("MCP server \"{server}\" was skipped: {reason}."),
    )
    .with_section(section)
}

fn invalid(section: &str, server: &str, reason: impl std::fmt::Display) -> Diagnostic {
    entry_fail(Rule::ServerEntryInvalid, section, server, reason)
}

impl Context {
    /// One `mcpServers` entry: the config and its advisories, or the one
    /// diagnostic that skips it.
    fn entry(
        &self,
        name: &str,
        entry: &Value,
    ) -> Result<(McpServerConfig, Vec<Diagnostic>), Diagnostic> {
        let Value::Object(fields) = entry else {
            return Err(invalid("7.2.2", name, "the entry is not an object"));
        };
        let kind = match fields.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            // An entry without `type` is inferred from its fields, as the
            // editors' configs do; a mix is refused by the key check below.
            None if fields.contains_key("url") => "streamable-http",
            None => "stdio",
            Some(_) => return Err(invalid("7.2.2", name, "\"type\" must be a string")),
        };
        let allowed = match kind {
            "stdio" => STDIO_KEYS,
            "streamable-http" | "sse" => REMOTE_KEYS,
            other => {
                return Err(invalid(
                    "7.2.2",
                    name,
                    format!("type \"{other}\" is not one of stdio, streamable-http, sse"),
                ));
            }
        };
        if let Some(key) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(invalid(
                "7.2.2",
                name,
                format!("key \"{key}\" does not belong to a {kind} entry"),
            ));
        }
        if kind == "stdio" {
            let (config, advisories) = self.stdio(name, fields)?;
            return Ok((McpServerConfig::Stdio(config), advisories));
        }
        let url = match fields.get("url") {
            Some(Value::String(url)) => url.clone(),
            _ => return Err(invalid("7.2.1", name, "\"url\" must be a string")),
        };
        check_remote_url(&url).map_err(|reason| invalid("7.2.1", name, reason))?;
        let headers = string_map(fields, "headers").map_err(|r| invalid("7.2.1", name, r))?;
        let mut seen = BTreeSet::new();
        for key in headers.keys() {
            if !seen.insert(key.to_ascii_lowercase()) {
                return Err(invalid(
                    "7.2.1",
                    name,
                    format!("header \"{key}\" appears twice (header names are case-insensitive)"),
                ));
            }
        }
        let remote = RemoteConfig {
            name: name.to_owned(),
            url,
            headers,
        };
        let config = if kind == "sse" {
            McpServerConfig::Sse(remote)
        } else {
            McpServerConfig::StreamableHttp(remote)
        };
        Ok((config, Vec::new()))
    }

    fn stdio(
        &self,
        name: &str,
        fields: &Map<String, Value>,
    ) -> Result<(StdioConfig, Vec<Diagnostic>), Diagnostic> {
        let raw_command = match fields.get("command") {
            Some(Value::String(c)) if !c.trim().is_empty() => c.as_str(),
            _ => {
                return Err(invalid(
                    "7.2.1",
                    name,
                    "\"command\" must be a non-empty string",
                ));
            }
        };
        let command = if !raw_command.contains(['/', '\\']) {
            // A bare program name is looked up on PATH by the launcher.
            raw_command.to_owned()
        } else {
            // Containment first, so `../bin/server` is reported as the
            // escape it is rather than as a formatting mistake.
            let resolved = normalize(&self.root.join(raw_command));
            if !resolved.starts_with(&self.root) {
                return Err(entry_fail(
                    Rule::PathEscapesPluginRoot,
                    "4.1",
                    name,
                    format!("command \"{raw_command}\" resolves outside the plugin root"),
                ));
            }
            if !raw_command.starts_with("./") {
                return Err(invalid(
                    "7.2.1",
                    name,
                    format!(
                        "command \"{raw_command}\" must be a bare program name or start with \"./\""
                    ),
                ));
            }
            resolved.to_string_lossy().into_owned()
        };

        let args = match fields.get("args") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(|a| self.expand(a)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid("7.2.1", name, "\"args\" must be an array of strings"))?,
            Some(_) => {
                return Err(invalid(
                    "7.2.1",
                    name,
                    "\"args\" must be an array of strings",
                ));
            }
        };

        let mut advisories = Vec::new();
        let env = match fields.get("env") {
            None => BTreeMap::new(),
            Some(Value::Object(vars)) => {
                // Checked before the value types: the reserved name is the
                // finding that matters to the author.
                if let Some(key) = vars.keys().find(|k| RESERVED_ENV.contains(&k.as_str())) {
                    return Err(entry_fail(
                        Rule::EnvReservedName,
                        "9.2",
                        name,
                        format!("env sets \"{key}\", which the host sets itself"),
                    ));
                }
                let mut env = BTreeMap::new();
                for (key, value) in vars {
                    let Value::String(value) = value else {
                        return Err(invalid("7.2.1", name, "\"env\" values must be strings"));
                    };
                    if looks_secret(key, value) {
                        // Never echo the value: it may be the secret itself.
                        advisories.push(mcp_fail(
                            Rule::SecretInEnv,
                            format!("MCP server \"{name}\" env \"{key}\" looks like a plaintext secret; prefer a credential the host supplies."),
                        ));
                    }
                    env.insert(key.clone(), self.expand(value));
                }
                env
            }
            Some(_) => {
                return Err(invalid(
                    "7.2.1",
                    name,
                    "\"env\" must be an object of strings",
                ));
            }
        };

        let (cwd, cwd_root) = match fields.get("cwd") {
            None => (None, CwdRoot::Plugin),
            Some(Value::String(raw)) => {
                let (base, cwd_root) = if raw.starts_with("./")
                    || placeholder_prefix(raw, "${PLUGIN_ROOT}")
                {
                    (&self.root, CwdRoot::Plugin)
                } else if placeholder_prefix(raw, "${PLUGIN_DATA}") {
                    (&self.data, CwdRoot::Data)
                } else {
                    return Err(invalid(
                        "7.2.1",
                        name,
                        format!(
                            "cwd \"{raw}\" must start with \"./\", \"${{PLUGIN_ROOT}}\" or \"${{PLUGIN_DATA}}\""
                        ),
                    ));
                };
                let expanded = self.expand(raw);
                let resolved = normalize(&self.root.join(&expanded));
                if !resolved.starts_with(base) {
                    return Err(entry_fail(
                        Rule::PathEscapesPluginRoot,
                        "7.2.1",
                        name,
                        format!("cwd \"{raw}\" resolves outside its root"),
                    ));
                }
                (Some(resolved), cwd_root)
            }
            Some(_) => return Err(invalid("7.2.1", name, "\"cwd\" must be a string")),
        };

        let config = StdioConfig {
            name: name.to_owned(),
            command,
            args,
            env,
            cwd,
            plugin: Some(PluginLaunch {
                root: self.root.clone(),
                data_root: self.data.clone(),
                cwd_root,
            }),
        };
        Ok((config, advisories))
    }

    /// Substitutes `${PLUGIN_ROOT}` and `${PLUGIN_DATA}` in one pass over
    /// the input; what is substituted is never scanned again.
    fn expand(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find("${PLUGIN_") {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("${PLUGIN_ROOT}") {
                out.push_str(&self.root.to_string_lossy());
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${PLUGIN_DATA}") {
                out.push_str(&self.data.to_string_lossy());
                rest = after;
            } else {
                out.push_str("${PLUGIN_");
                rest = &tail["${PLUGIN_".len()..];
            }
        }
        out.push_str(rest);
        out
    }
}

/// `raw` is exactly `placeholder` or starts with `placeholder/`.
fn placeholder_prefix(raw: &str, placeholder: &str) -> bool {
    raw.strip_prefix(placeholder)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The secret heuristics: a key ending in `api_key`, `token`,
/// `secret`, `password` (at the start or after `_`), or a value with a
/// well-known token prefix. Both case-insensitive.
fn looks_secret(key: &str, value: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let key_hit = [
        "apikey", "api_key", "api-key", "token", "secret", "password",
    ]
    .iter()
    .any(|word| {
        key.strip_suffix(word)
            .is_some_and(|before| before.is_empty() || before.ends_with('_'))
    });
    let value = value.to_ascii_lowercase();
    let value_hit = [
        "sk-", "fc-", "ghp_", "gho_", "xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-",
    ]
    .iter()
    .any(|prefix| value.starts_with(prefix));
    key_hit || value_hit
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

/// Lexical normalisation: `.` dropped, `..` pops a segment (never above the
/// filesystem root). No filesystem access, so it works on paths that do
/// not exist yet.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The launch-time checks for a stdio server from a plugin, in this
/// order: create `PLUGIN_DATA` and prove it writable (a `connection-failure`
/// naming `PLUGIN_DATA` and §9.1), then resolve symlinks and check that the
/// command and `cwd` stay inside their roots (4.1
/// `path-escapes-plugin-root`, origin = the server name). `Ok` for a config
/// without plugin provenance. [`crate::connect`] runs this before spawning;
/// an `Err` skips only that server.
pub fn prepare_launch(config: &StdioConfig) -> Result<(), Diagnostic> {
    let Some(plugin) = &config.plugin else {
        return Ok(());
    };
    let name = &config.name;
    let data_failure = |what: String| {
        Diagnostic::new(
            Rule::ConnectionFailure,
            name.clone(),
            format!(
                "MCP server \"{name}\" was not started: PLUGIN_DATA {} {what} (a plugin's data directory must be writable, §9.1).",
                plugin.data_root.display()
            ),
        )
    };
    std::fs::create_dir_all(&plugin.data_root)
        .map_err(|e| data_failure(format!("could not be created: {e}")))?;
    let probe = plugin.data_root.join(WRITE_PROBE);
    std::fs::write(&probe, b"").map_err(|e| data_failure(format!("is not writable: {e}")))?;
    std::fs::remove_file(&probe)
        .map_err(|e| data_failure(format!("would not let the write probe be removed: {e}")))?;

    let escape = |what: &str, real: &Path| {
        Diagnostic::new(
            Rule::PathEscapesPluginRoot,
            name.clone(),
            format!(
                "MCP server \"{name}\" was not started: its {what} resolves to {}, outside the plugin.",
                real.display()
            ),
        )
        .with_section("4.1")
    };
    let real_root = plugin.root.canonicalize().map_err(|e| {
        Diagnostic::new(
            Rule::ConnectionFailure,
            name.clone(),
            format!(
                "MCP server \"{name}\" was not started: its plugin root could not be resolved: {e}."
            ),
        )
    })?;
    let command = Path::new(&config.command);
    // Only a plugin-relative command is held to the root; a bare name is
    // the host's PATH and the host's business. A command that does not
    // exist is left for the spawn to report.
    if command.is_absolute()
        && let Ok(real) = command.canonicalize()
        && !real.starts_with(&real_root)
    {
        return Err(escape("command", &real));
    }
    if let Some(cwd) = &config.cwd {
        let cwd_root = match plugin.cwd_root {
            CwdRoot::Plugin => real_root.clone(),
            // Created above, so it resolves.
            CwdRoot::Data => plugin.data_root.canonicalize().map_err(|e| {
                Diagnostic::new(
                    Rule::ConnectionFailure,
                    name.clone(),
                    format!("MCP server \"{name}\" was not started: PLUGIN_DATA could not be resolved: {e} (§9.1)."),
                )
            })?,
        };
        if let Ok(real) = cwd.canonicalize()
            && !real.starts_with(&cwd_root)
        {
            return Err(escape("cwd", &real));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            root: PathBuf::from("/plugins/acme"),
            data: PathBuf::from("/plugins/data/acme"),
        }
    }

    #[test]
    fn expansion_is_one_pass() {
        let ctx = Context {
            root: PathBuf::from("/p/${PLUGIN_DATA}"),
            data: PathBuf::from("/p/data/x"),
        };
        assert_eq!(ctx.expand("${PLUGIN_ROOT}/a"), "/p/${PLUGIN_DATA}/a");
        assert_eq!(
            context().expand("${PLUGIN_DATA}:${PLUGIN_ROOT}${PLUGIN_OTHER}$"),
            "/plugins/data/acme:/plugins/acme${PLUGIN_OTHER}$"
        );
    }

    #[test]
    fn data_root_sits_beside_the_plugin() {
        assert_eq!(
            plugin_data_root(Path::new("/plugins/acme"), "acme"),
            PathBuf::from("/plugins/data/acme")
        );
    }

    #[test]
    fn lexical_normalisation_pops() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/a/../../b")), PathBuf::from("/b"));
    }

    #[test]
    fn secret_heuristics() {
        for (k, v) in [
            ("API_KEY", "x"),
            ("OPENAI_API_KEY", "x"),
            ("apikey", "x"),
            ("GITHUB_TOKEN", "x"),
            ("DB_PASSWORD", "x"),
            ("X", "sk-abc"),
            ("X", "GHP_abc"),
            ("X", "xoxb-1"),
        ] {
            assert!(looks_secret(k, v), "{k}={v}");
        }
        for (k, v) in [
            ("TOKENS", "x"),
            ("MYTOKEN", "x"),
            ("LOG_LEVEL", "debug"),
            ("X", "xoxz-1"),
        ] {
            assert!(!looks_secret(k, v), "{k}={v}");
        }
    }

    #[test]
    fn name_rules_in_order() {
        assert!(check_name("acme.tools-2").is_ok());
        assert_eq!(check_name("Acme").unwrap_err().rule, Rule::NameCharset);
        assert_eq!(
            check_name(&"a".repeat(65)).unwrap_err().rule,
            Rule::NameCharset
        );
        assert_eq!(check_name("-acme").unwrap_err().rule, Rule::NameBoundary);
        assert_eq!(check_name("acme.").unwrap_err().rule, Rule::NameBoundary);
        assert_eq!(check_name("ac--me").unwrap_err().rule, Rule::NameRepetition);
        assert_eq!(check_name("ac..me").unwrap_err().rule, Rule::NameRepetition);
    }

    #[test]
    fn schema_versions() {
        assert_eq!(schema_version(MCP_SCHEMA, "mcp"), Some("1.0.0"));
        assert_eq!(
            schema_version(
                "https://agent-plugins.org/schemas/2.0.0/plugin.schema.json",
                "plugin"
            ),
            Some("2.0.0")
        );
        assert_eq!(schema_version("https://example.com/x.json", "plugin"), None);
    }
}
