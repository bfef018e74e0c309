//! Agent Plugins directories: the conformance cases that concern
//! `plugin.json` and `mcp.json`, built as real directories at
//! test time, and the launch-time checks against the stdio fixture binary.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use portcullis_catalog::{Diagnostic, Rule};
use portcullis_upstream::plugins::{MCP_SCHEMA, PLUGIN_SCHEMA, WRITE_PROBE};
use portcullis_upstream::{CwdRoot, McpServerConfig, PluginLoad, StdioConfig, load_agent_plugin};
use serde_json::{Value, json};

/// A fresh directory under the system temp dir, removed on drop. Its path is
/// canonical, so paths the loader computes compare equal to ours.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir()
            .canonicalize()
            .expect("the temp dir resolves");
        let dir = base.join(format!(
            "portcullis-plugins-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // A leftover from a killed run with the same pid must not leak in.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch dir");
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parent");
    }
    std::fs::write(path, text).expect("write file");
}

fn minimal_manifest() -> Value {
    json!({"$schema": PLUGIN_SCHEMA, "name": "acme"})
}

/// `valid-local`: one stdio server started from the plugin's own `bin/`.
fn valid_local() -> (&'static str, Value) {
    ("local", json!({"type": "stdio", "command": "./bin/server"}))
}

fn mcp_with(entries: &[(&str, Value)]) -> Value {
    let servers: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(name, entry)| ((*name).to_owned(), entry.clone()))
        .collect();
    json!({"$schema": MCP_SCHEMA, "mcpServers": servers})
}

/// A plugin directory `<scratch>/acme` with the given manifest and mcp.json.
fn plugin(manifest: &Value, mcp: Option<&Value>) -> (Scratch, PathBuf) {
    let scratch = Scratch::new();
    let root = scratch.path().join("acme");
    write(&root.join("plugin.json"), &manifest.to_string());
    if let Some(mcp) = mcp {
        write(&root.join("mcp.json"), &mcp.to_string());
    }
    (scratch, root)
}

type Fact = (String, Rule, String);

/// What a conformance case compares: ok, the rejection's (section, rule),
/// the set of (section, rule, origin), and the loaded server names.
struct Facts {
    ok: bool,
    rejection: Option<(String, Rule)>,
    diagnostics: BTreeSet<Fact>,
    servers: Vec<String>,
}

fn facts(load: &PluginLoad) -> Facts {
    let rejection = match load {
        PluginLoad::Rejected { rejection, .. } => Some((rejection.section.clone(), rejection.rule)),
        PluginLoad::Ok { .. } => None,
    };
    Facts {
        ok: load.is_ok(),
        rejection,
        diagnostics: load.diagnostics().iter().map(fact).collect(),
        servers: load.servers().iter().map(|s| s.name().to_owned()).collect(),
    }
}

fn fact(d: &Diagnostic) -> Fact {
    (d.section.clone(), d.rule, d.origin.clone())
}

fn set(items: &[(&str, Rule, &str)]) -> BTreeSet<Fact> {
    items
        .iter()
        .map(|(s, r, o)| ((*s).to_owned(), *r, (*o).to_owned()))
        .collect()
}

fn assert_ok_clean(load: &PluginLoad) {
    let f = facts(load);
    assert!(f.ok, "{:?}", load.diagnostics());
    assert!(f.diagnostics.is_empty(), "{:?}", load.diagnostics());
}

/// A rejected manifest: the rejection and the one diagnostic that repeats
/// it (plus any earlier non-fatal ones in `also`).
fn assert_rejected(load: &PluginLoad, section: &str, rule: Rule, also: &[(&str, Rule, &str)]) {
    let f = facts(load);
    assert!(!f.ok);
    assert_eq!(f.rejection, Some((section.to_owned(), rule)));
    let mut expected = set(also);
    expected.insert((section.to_owned(), rule, "plugin.json".to_owned()));
    assert_eq!(f.diagnostics, expected, "{:?}", load.diagnostics());
}

fn rejected_with(manifest: Value, section: &str, rule: Rule) {
    let (_scratch, root) = plugin(&manifest, None);
    assert_rejected(&load_agent_plugin(&root), section, rule, &[]);
}

fn stdio(load: &PluginLoad, name: &str) -> StdioConfig {
    match load.servers().iter().find(|s| s.name() == name) {
        Some(McpServerConfig::Stdio(s)) => s.clone(),
        other => panic!("no stdio server {name}: {other:?}"),
    }
}

// ---- Manifest corpus ----

#[test]
fn valid_minimal() {
    let (_scratch, root) = plugin(&minimal_manifest(), None);
    let load = load_agent_plugin(&root);
    assert_ok_clean(&load);
    let PluginLoad::Ok {
        manifest, servers, ..
    } = load
    else {
        unreachable!()
    };
    assert_eq!(manifest.name, "acme");
    assert!(servers.is_empty());
}

#[test]
fn no_mcp_json_and_no_skills_dir() {
    let manifest = json!({
        "$schema": PLUGIN_SCHEMA, "name": "acme", "version": "1.2.0",
        "description": "d", "keywords": ["a", "b"], "license": "MIT"
    });
    let (_scratch, root) = plugin(&manifest, None);
    assert_ok_clean(&load_agent_plugin(&root));
}

#[test]
fn skills_and_flows_are_ignored_entirely() {
    // Portcullis loads neither; even broken ones produce nothing.
    let (_scratch, root) = plugin(&minimal_manifest(), None);
    write(&root.join("skills/bad/SKILL.md"), "not front matter");
    write(&root.join("flows/bad.flow.json"), "{");
    assert_ok_clean(&load_agent_plugin(&root));
}

#[test]
fn author_unknown_field() {
    let mut manifest = minimal_manifest();
    manifest["author"] = json!({"name": "A", "twitter": "@a"});
    rejected_with(manifest, "5.4", Rule::AuthorUnknownField);
}

#[test]
fn extensions_not_an_object() {
    let mut manifest = minimal_manifest();
    manifest["extensions"] = json!({"com.example": "flat", "org.good": {"k": 1}});
    let (_scratch, root) = plugin(&manifest, None);
    let load = load_agent_plugin(&root);
    let f = facts(&load);
    assert!(f.ok);
    assert_eq!(
        f.diagnostics,
        set(&[("8.1", Rule::ExtensionsNotAnObject, "plugin.json")])
    );
    let PluginLoad::Ok { manifest, .. } = load else {
        unreachable!()
    };
    // The bad namespace is dropped, the good one kept.
    assert_eq!(manifest.extensions.keys().collect::<Vec<_>>(), ["org.good"]);
}

#[test]
fn manifest_missing_name() {
    rejected_with(
        json!({"$schema": PLUGIN_SCHEMA}),
        "5.3",
        Rule::RequiredFieldMissing,
    );
}

#[test]
fn manifest_missing_schema() {
    rejected_with(json!({"name": "acme"}), "5.3", Rule::RequiredFieldMissing);
}

#[test]
fn manifest_unsupported_schema_version() {
    let manifest = json!({
        "$schema": "https://agent-plugins.org/schemas/2.0.0/plugin.schema.json",
        "name": "acme"
    });
    let (_scratch, root) = plugin(&manifest, None);
    let load = load_agent_plugin(&root);
    assert_rejected(&load, "5.2", Rule::UnsupportedSchemaVersion, &[]);
    let PluginLoad::Rejected { rejection, .. } = load else {
        unreachable!()
    };
    assert!(
        rejection.message.starts_with("Unsupported"),
        "{}",
        rejection.message
    );

    let other = json!({"$schema": "https://example.com/plugin.json", "name": "acme"});
    let (_scratch, root) = plugin(&other, None);
    let PluginLoad::Rejected { rejection, .. } = load_agent_plugin(&root) else {
        panic!("a foreign $schema must reject");
    };
    assert!(
        rejection.message.starts_with("Unrecognized"),
        "{}",
        rejection.message
    );
}

#[test]
fn manifest_unknown_top_level_field() {
    let mut manifest = minimal_manifest();
    manifest["skillz"] = json!(true);
    let (_scratch, root) = plugin(&manifest, None);
    let f = facts(&load_agent_plugin(&root));
    assert!(f.ok);
    assert_eq!(
        f.diagnostics,
        set(&[("5.2", Rule::UnknownTopLevelField, "plugin.json")])
    );
}

#[test]
fn a_non_fatal_finding_before_a_fatal_one_is_kept() {
    let manifest = json!({"name": "acme", "extra": 1});
    let (_scratch, root) = plugin(&manifest, None);
    assert_rejected(
        &load_agent_plugin(&root),
        "5.3",
        Rule::RequiredFieldMissing,
        &[("5.2", Rule::UnknownTopLevelField, "plugin.json")],
    );
}

#[cfg(unix)]
#[test]
fn manifest_symlink_escapes_root() {
    let scratch = Scratch::new();
    let outside = scratch.path().join("elsewhere.json");
    write(&outside, &minimal_manifest().to_string());
    let root = scratch.path().join("acme");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("plugin.json")).unwrap();
    assert_rejected(
        &load_agent_plugin(&root),
        "4.1",
        Rule::PathEscapesPluginRoot,
        &[],
    );
}

#[cfg(unix)]
#[test]
fn manifest_symlink_inside_root() {
    let scratch = Scratch::new();
    let root = scratch.path().join("acme");
    write(
        &root.join("meta/manifest.json"),
        &minimal_manifest().to_string(),
    );
    std::os::unix::fs::symlink(root.join("meta/manifest.json"), root.join("plugin.json")).unwrap();
    assert_ok_clean(&load_agent_plugin(&root));
}

/// An `mcp.json` symlinked to a file outside the plugin (another plugin's,
/// or any JSON on the host) is refused before it is read: the plugin loads,
/// with no servers and one 4.1 finding naming the file it resolves to. A
/// dangling link is refused too, not taken for an absent file; a link that
/// stays inside the plugin is fine.
#[cfg(unix)]
#[test]
fn mcp_config_symlink_escapes_root() {
    let (scratch, root) = plugin(&minimal_manifest(), None);
    let outside = scratch.path().join("elsewhere.json");
    write(&outside, &mcp_with(&[valid_local()]).to_string());
    std::os::unix::fs::symlink(&outside, root.join("mcp.json")).unwrap();
    let load = load_agent_plugin(&root);
    let f = facts(&load);
    assert!(f.ok, "{:?}", load.diagnostics());
    assert!(
        f.servers.is_empty(),
        "servers from outside: {:?}",
        f.servers
    );
    assert_eq!(
        f.diagnostics,
        set(&[("4.1", Rule::PathEscapesPluginRoot, "mcp.json")]),
        "{:?}",
        load.diagnostics()
    );
    assert!(
        load.diagnostics()[0].message.contains("elsewhere.json"),
        "{:?}",
        load.diagnostics()
    );

    std::fs::remove_file(root.join("mcp.json")).unwrap();
    std::os::unix::fs::symlink(scratch.path().join("gone.json"), root.join("mcp.json")).unwrap();
    let load = load_agent_plugin(&root);
    assert_eq!(
        facts(&load).diagnostics,
        set(&[("7.2.2", Rule::McpConfigInvalid, "mcp.json")]),
        "{:?}",
        load.diagnostics()
    );

    std::fs::remove_file(root.join("mcp.json")).unwrap();
    write(
        &root.join("meta/servers.json"),
        &mcp_with(&[valid_local()]).to_string(),
    );
    std::os::unix::fs::symlink(root.join("meta/servers.json"), root.join("mcp.json")).unwrap();
    let load = load_agent_plugin(&root);
    assert_ok_clean(&load);
    assert_eq!(facts(&load).servers, ["local"]);
}

#[test]
fn name_rules() {
    for (name, rule) in [
        ("Acme_Tools", Rule::NameCharset),
        ("-acme", Rule::NameBoundary),
        ("ac--me", Rule::NameRepetition),
    ] {
        rejected_with(json!({"$schema": PLUGIN_SCHEMA, "name": name}), "5.5", rule);
    }
}

#[test]
fn manifest_file_failures() {
    let scratch = Scratch::new();
    assert_rejected(
        &load_agent_plugin(&scratch.path().join("nothing-here")),
        "5.1",
        Rule::ManifestMissing,
        &[],
    );
    let root = scratch.path().join("broken");
    write(&root.join("plugin.json"), "{\"name\":");
    assert_rejected(&load_agent_plugin(&root), "5.2", Rule::InvalidJson, &[]);
    write(&root.join("plugin.json"), "[1, 2]");
    assert_rejected(
        &load_agent_plugin(&root),
        "5.2",
        Rule::ManifestNotAnObject,
        &[],
    );
    for (key, bad) in [("version", json!(1)), ("keywords", json!(["a", 2]))] {
        let mut manifest = minimal_manifest();
        manifest[key] = bad;
        rejected_with(manifest, "5.2", Rule::InvalidFieldType);
    }
}

#[test]
fn manifest_values_are_kept() {
    let manifest = json!({
        "$schema": PLUGIN_SCHEMA, "name": "acme", "version": "1.0.0",
        "homepage": "https://acme.example", "author": {}, "keywords": ["x"]
    });
    let (_scratch, root) = plugin(&manifest, None);
    let PluginLoad::Ok { manifest, .. } = load_agent_plugin(&root) else {
        panic!("valid manifest");
    };
    assert_eq!(manifest.version.as_deref(), Some("1.0.0"));
    assert_eq!(manifest.homepage.as_deref(), Some("https://acme.example"));
    assert_eq!(manifest.keywords, ["x"]);
    // An empty author is treated as absent.
    assert_eq!(manifest.author, None);
}

// ---- mcp.json corpus ----

#[test]
fn mcp_malformed_json() {
    let (_scratch, root) = plugin(&minimal_manifest(), None);
    write(&root.join("mcp.json"), "{\"mcpServers\": ");
    let load = load_agent_plugin(&root);
    let f = facts(&load);
    assert!(f.ok);
    assert!(f.servers.is_empty());
    assert_eq!(
        f.diagnostics,
        set(&[("7.2.2", Rule::McpConfigInvalid, "mcp.json")])
    );
    assert_eq!(load.diagnostics()[0].message, "mcp.json is not valid JSON.");
}

#[test]
fn mcp_schema_version_mismatch() {
    // Also malformed otherwise (an unknown key): the version check runs first.
    let mcp = json!({
        "$schema": "https://agent-plugins.org/schemas/2.0.0/mcp.schema.json",
        "mcpServers": {"local": valid_local().1},
        "extra": true
    });
    let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
    let f = facts(&load_agent_plugin(&root));
    assert!(f.ok);
    assert!(f.servers.is_empty());
    assert_eq!(
        f.diagnostics,
        set(&[("10.1", Rule::McpConfigVersionMismatch, "mcp.json")])
    );
}

#[test]
fn mcp_top_level_shape_failures_disable_mcp() {
    for mcp in [
        json!({"mcpServers": {"local": valid_local().1}}),
        json!({"$schema": "", "mcpServers": {}}),
        json!({"$schema": "https://example.com/mcp.json", "mcpServers": {}}),
        json!({"$schema": MCP_SCHEMA, "mcpServers": []}),
        json!({"$schema": MCP_SCHEMA, "mcpServers": {}, "other": 1}),
        json!([1]),
    ] {
        let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        let f = facts(&load_agent_plugin(&root));
        assert!(f.ok, "{mcp}");
        assert!(f.servers.is_empty(), "{mcp}");
        assert_eq!(
            f.diagnostics,
            set(&[("7.2.2", Rule::McpConfigInvalid, "mcp.json")]),
            "{mcp}"
        );
    }
}

/// `valid-local` plus one bad entry: the good server stays, exactly one
/// diagnostic is added.
fn keeps_valid_local(bad: Value, expected: (&str, Rule)) {
    let mcp = mcp_with(&[valid_local(), ("bad", bad.clone())]);
    let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
    let f = facts(&load_agent_plugin(&root));
    assert!(f.ok, "{bad}");
    assert_eq!(f.servers, ["local"], "{bad}");
    assert_eq!(
        f.diagnostics,
        set(&[(expected.0, expected.1, "mcp.json")]),
        "{bad}"
    );
}

#[test]
fn valid_local_alone_is_clean() {
    let mcp = mcp_with(&[valid_local()]);
    let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
    let load = load_agent_plugin(&root);
    assert_ok_clean(&load);
    let local = stdio(&load, "local");
    // Stored absolute, inside the root; no cwd means the plugin root.
    assert_eq!(PathBuf::from(&local.command), root.join("bin/server"));
    assert_eq!(local.cwd, None);
    let launch = local.plugin.expect("plugin provenance");
    assert_eq!(launch.root, root);
    assert_eq!(launch.data_root, root.parent().unwrap().join("data/acme"));
    assert_eq!(launch.cwd_root, CwdRoot::Plugin);
}

#[test]
fn mcp_command_relative_escape() {
    keeps_valid_local(
        json!({"type": "stdio", "command": "../bin/server"}),
        ("4.1", Rule::PathEscapesPluginRoot),
    );
    keeps_valid_local(
        json!({"type": "stdio", "command": "./bin/../../other/server"}),
        ("4.1", Rule::PathEscapesPluginRoot),
    );
}

#[test]
fn mcp_cwd_escapes_root() {
    keeps_valid_local(
        json!({"type": "stdio", "command": "node", "cwd": "./../elsewhere"}),
        ("7.2.1", Rule::PathEscapesPluginRoot),
    );
    // A cwd declared against PLUGIN_DATA must stay inside PLUGIN_DATA.
    keeps_valid_local(
        json!({"type": "stdio", "command": "node", "cwd": "${PLUGIN_DATA}/../other"}),
        ("7.2.1", Rule::PathEscapesPluginRoot),
    );
}

#[test]
fn mcp_env_reserved_name() {
    keeps_valid_local(
        json!({"type": "stdio", "command": "node", "env": {"PLUGIN_DATA": "/tmp", "N": 1}}),
        ("9.2", Rule::EnvReservedName),
    );
}

#[test]
fn mcp_mixed_variant_fields() {
    keeps_valid_local(
        json!({"type": "stdio", "command": "node", "url": "https://x.example/mcp"}),
        ("7.2.2", Rule::ServerEntryInvalid),
    );
}

#[test]
fn mcp_remote_http_non_loopback() {
    keeps_valid_local(
        json!({"type": "streamable-http", "url": "http://mcp.example.com/mcp"}),
        ("7.2.1", Rule::ServerEntryInvalid),
    );
}

#[test]
fn mcp_unknown_transport_type() {
    keeps_valid_local(
        json!({"type": "websocket", "url": "wss://mcp.example.com"}),
        ("7.2.2", Rule::ServerEntryInvalid),
    );
}

#[test]
fn mcp_other_entry_failures() {
    for bad in [
        json!("node"),
        json!({"type": "stdio", "command": ""}),
        json!({"type": "stdio", "command": "/usr/bin/node"}),
        json!({"type": "stdio", "command": "bin/server"}),
        json!({"type": "stdio", "command": "node", "args": "x"}),
        json!({"type": "stdio", "command": "node", "cwd": "/tmp"}),
        json!({"type": "sse", "url": "https://x.example/sse", "headers": {"A": "1", "a": "2"}}),
        json!({"type": "sse", "url": "https://x.example/sse", "headers": {"A": 1}}),
    ] {
        let mcp = mcp_with(&[valid_local(), ("bad", bad.clone())]);
        let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        let load = load_agent_plugin(&root);
        assert_eq!(facts(&load).servers, ["local"], "{bad}");
        assert_eq!(load.diagnostics().len(), 1, "{bad}");
        assert!(
            matches!(
                load.diagnostics()[0].rule,
                Rule::ServerEntryInvalid | Rule::PathEscapesPluginRoot
            ),
            "{bad}: {:?}",
            load.diagnostics()
        );
    }
}

#[test]
fn mcp_secret_in_env() {
    let entry = json!({"type": "stdio", "command": "node", "env": {"ACME_API_KEY": "k-123", "LEVEL": "debug"}});
    let mcp = mcp_with(&[("secretive", entry)]);
    let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
    let load = load_agent_plugin(&root);
    let f = facts(&load);
    assert_eq!(f.servers, ["secretive"]);
    assert_eq!(
        f.diagnostics,
        set(&[("9.2", Rule::SecretInEnv, "mcp.json")])
    );
    // The advisory names the variable, never its value.
    assert!(!load.diagnostics()[0].message.contains("k-123"));
}

#[test]
fn mcp_secret_warning_on_rejected_entry() {
    let entry = json!({
        "type": "stdio", "command": "node",
        "env": {"GITHUB_TOKEN": "ghp_abc"}, "headers": {}
    });
    let mcp = mcp_with(&[("secretive", entry)]);
    let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
    let f = facts(&load_agent_plugin(&root));
    assert!(f.servers.is_empty());
    assert_eq!(
        f.diagnostics,
        set(&[("7.2.2", Rule::ServerEntryInvalid, "mcp.json")])
    );
}

#[test]
fn remote_entries_load() {
    let mcp = mcp_with(&[
        (
            "docs",
            json!({"type": "streamable-http", "url": "https://docs.example/mcp", "headers": {"X-A": "1"}}),
        ),
        (
            "old",
            json!({"type": "sse", "url": "http://127.0.0.1:9/sse"}),
        ),
    ]);
    let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
    let load = load_agent_plugin(&root);
    assert_ok_clean(&load);
    assert!(matches!(
        load.servers()[0],
        McpServerConfig::StreamableHttp(_)
    ));
    assert!(matches!(load.servers()[1], McpServerConfig::Sse(_)));
}

#[test]
fn expansion_is_not_recursive() {
    // The plugin root itself contains a placeholder: substituting it must
    // not substitute again.
    let scratch = Scratch::new();
    let root = scratch.path().join("p${PLUGIN_DATA}q");
    write(&root.join("plugin.json"), &minimal_manifest().to_string());
    let entry = json!({
        "type": "stdio", "command": "node",
        "args": ["${PLUGIN_ROOT}/main.js", "--data=${PLUGIN_DATA}", "${PLUGIN_OTHER}"],
        "env": {"HOME_DIR": "${PLUGIN_ROOT}"},
        "cwd": "${PLUGIN_DATA}/work"
    });
    write(
        &root.join("mcp.json"),
        &mcp_with(&[("x", entry)]).to_string(),
    );
    let load = load_agent_plugin(&root);
    assert_ok_clean(&load);
    let x = stdio(&load, "x");
    let root_text = root.to_string_lossy().into_owned();
    let data = scratch.path().join("data/acme");
    assert_eq!(
        x.args,
        [
            format!("{root_text}/main.js"),
            format!("--data={}", data.display()),
            "${PLUGIN_OTHER}".to_owned()
        ]
    );
    assert!(root_text.contains("${PLUGIN_DATA}"));
    assert_eq!(x.env["HOME_DIR"], root_text);
    assert_eq!(x.cwd, Some(data.join("work")));
    assert_eq!(x.plugin.map(|p| p.cwd_root), Some(CwdRoot::Data));
}

#[test]
fn a_hand_written_config_carries_no_plugin() {
    let McpServerConfig::Stdio(s) = McpServerConfig::stdio("x", "node", ["a"]) else {
        unreachable!()
    };
    assert!(s.plugin.is_none());
    // And serialises exactly as before the field existed.
    let json = serde_json::to_value(McpServerConfig::Stdio(s)).unwrap();
    assert!(json.get("plugin").is_none());
    assert!(!WRITE_PROBE.is_empty());
}

// ---- Launch ----

#[cfg(all(unix, feature = "stdio"))]
mod launch {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    use portcullis_catalog::naming::Prefix;
    use portcullis_catalog::{ProjectionOptions, ToolResult};
    use portcullis_upstream::{CallContext, ConnectOptions, Toolset, connect};

    /// Always `server__tool`, so names do not depend on how many servers
    /// connected.
    fn options() -> ConnectOptions {
        ConnectOptions::default().with_projection(ProjectionOptions {
            prefix: Prefix::Always,
            ..Default::default()
        })
    }

    fn fixture_bin() -> &'static str {
        env!("CARGO_BIN_EXE_upstream-fixture")
    }

    /// `bin/server`: proves PLUGIN_DATA writable from inside the child, then
    /// becomes the fixture with its working directory as the label.
    fn install_server(root: &Path, name: &str) {
        let script = format!(
            "#!/bin/sh\necho from-child > \"$PLUGIN_DATA/marker\" || exit 9\nexec '{}' --label \"$(pwd -P)\"\n",
            fixture_bin()
        );
        let path = root.join("bin").join(name);
        write(&path, &script);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn text(result: &ToolResult) -> String {
        result.text_blocks().collect::<Vec<_>>().join("\n")
    }

    fn names(toolset: &Toolset) -> Vec<String> {
        toolset.tools().into_iter().map(|t| t.name).collect()
    }

    async fn call(toolset: &Toolset, name: &str, args: Value) -> String {
        let result = toolset
            .call(name, Some(args), &CallContext::default())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        text(&result)
    }

    fn load(root: &Path) -> Vec<McpServerConfig> {
        let load = load_agent_plugin(root);
        assert!(load.is_ok(), "{:?}", load.diagnostics());
        load.servers().to_vec()
    }

    #[tokio::test]
    async fn a_plugin_server_runs_in_its_plugin_with_its_variables() {
        let mcp = mcp_with(&[valid_local()]);
        let (scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        install_server(&root, "server");
        let data = scratch.path().join("data/acme");
        let toolset = connect(load(&root), options()).await.unwrap();
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        // cwd is the plugin root, not the test's working directory.
        assert_eq!(
            call(&toolset, "local__whoami", json!({})).await,
            root.to_string_lossy()
        );
        assert_eq!(
            call(&toolset, "local__env", json!({"name": "PLUGIN_ROOT"})).await,
            root.to_string_lossy()
        );
        assert_eq!(
            call(&toolset, "local__env", json!({"name": "PLUGIN_DATA"})).await,
            data.to_string_lossy()
        );
        // Created before the spawn, writable by the child, probe cleaned up.
        assert_eq!(
            std::fs::read_to_string(data.join("marker")).unwrap(),
            "from-child\n"
        );
        assert!(!data.join(WRITE_PROBE).exists());
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_hand_written_stdio_server_gets_no_plugin_variables() {
        let toolset = connect(
            vec![McpServerConfig::stdio(
                "plain",
                fixture_bin(),
                Vec::<String>::new(),
            )],
            options(),
        )
        .await
        .unwrap();
        assert_eq!(
            call(&toolset, "plain__env", json!({"name": "PLUGIN_ROOT"})).await,
            "<unset>"
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn cwd_under_plugin_data_works() {
        let entry = json!({"type": "stdio", "command": "./bin/server", "cwd": "${PLUGIN_DATA}"});
        let mcp = mcp_with(&[("local", entry)]);
        let (scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        install_server(&root, "server");
        let toolset = connect(load(&root), options()).await.unwrap();
        assert!(
            toolset.diagnostics().is_empty(),
            "{:?}",
            toolset.diagnostics()
        );
        assert_eq!(
            call(&toolset, "local__whoami", json!({})).await,
            scratch.path().join("data/acme").to_string_lossy()
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_command_symlinked_outside_the_root_is_refused_while_its_sibling_runs() {
        let mcp = mcp_with(&[
            valid_local(),
            ("evil", json!({"type": "stdio", "command": "./bin/evil"})),
            ("alias", json!({"type": "stdio", "command": "./bin/alias"})),
        ]);
        let (_scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        install_server(&root, "server");
        // Lexically inside, really outside: only the launch check sees it.
        symlink(fixture_bin(), root.join("bin/evil")).unwrap();
        // A symlink that stays inside is fine.
        symlink(root.join("bin/server"), root.join("bin/alias")).unwrap();
        let toolset = connect(load(&root), options()).await.unwrap();
        let diagnostics = toolset.diagnostics();
        let found: BTreeSet<Fact> = diagnostics.iter().map(fact).collect();
        assert_eq!(
            found,
            set(&[("4.1", Rule::PathEscapesPluginRoot, "evil")]),
            "{diagnostics:?}"
        );
        let names = names(&toolset);
        assert!(names.iter().all(|n| !n.starts_with("evil__")), "{names:?}");
        assert!(names.contains(&"local__whoami".to_owned()), "{names:?}");
        assert_eq!(
            call(&toolset, "alias__whoami", json!({})).await,
            root.to_string_lossy()
        );
        toolset.close().await;
    }

    #[tokio::test]
    async fn a_cwd_symlinked_outside_the_root_is_refused() {
        let entry = json!({"type": "stdio", "command": "./bin/server", "cwd": "./work"});
        let mcp = mcp_with(&[("local", entry)]);
        let (scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        install_server(&root, "server");
        let outside = scratch.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        symlink(&outside, root.join("work")).unwrap();
        let toolset = connect(load(&root), options()).await.unwrap();
        let found: BTreeSet<Fact> = toolset.diagnostics().iter().map(fact).collect();
        assert_eq!(found, set(&[("4.1", Rule::PathEscapesPluginRoot, "local")]));
        assert!(toolset.tools().is_empty());
    }

    #[tokio::test]
    async fn an_unwritable_plugin_data_skips_only_that_server() {
        let mcp = mcp_with(&[valid_local()]);
        let (scratch, root) = plugin(&minimal_manifest(), Some(&mcp));
        install_server(&root, "server");
        // A file where the data directory should be: neither mkdir -p nor a
        // write inside it can succeed, whoever runs the test (root included).
        write(&scratch.path().join("data/acme"), "in the way");
        let mut servers = load(&root);
        servers.push(McpServerConfig::stdio(
            "plain",
            fixture_bin(),
            Vec::<String>::new(),
        ));
        let toolset = connect(servers, options()).await.unwrap();
        let diagnostics = toolset.diagnostics();
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(diagnostics[0].rule, Rule::ConnectionFailure);
        assert_eq!(diagnostics[0].origin, "local");
        assert!(diagnostics[0].message.contains("PLUGIN_DATA"));
        assert!(diagnostics[0].message.contains("§9.1"));
        let names = names(&toolset);
        assert!(names.iter().all(|n| !n.starts_with("local__")), "{names:?}");
        assert!(names.contains(&"plain__whoami".to_owned()), "{names:?}");
        toolset.close().await;
    }
}
