//! # portcullis-gateway
//!
//! The gateway of [Portcullis](https://github.com/portcullis-mcp/portcullis)
//! as a library: everything `portcullis serve` does that is not the command
//! line. A [`config::Config`] names the sources (upstream MCP servers, Agent
//! Plugins directories, native tool plugins, apps); [`gateway::Gateway`]
//! connects them, projects one catalogue over all of them, puts the gate in
//! front of every call and serves the result as one MCP endpoint.
//!
//! ```text
//!  sources ──► catalogue ──► gate ──► surfaces
//! ```
//!
//! | module | job |
//! |---|---|
//! | [`config`] | the TOML config: parsed, checked (every error, with file:line:column and did-you-mean), `${VAR}` expanded, secrets kept out of messages |
//! | [`gateway`] | connects every source and builds the one `ToolServer` the surfaces serve: names, exposure, policy, approval, output framing |
//! | [`sources`] | native tool plugins and apps (route tables, OpenAPI) projected beside the upstreams, with their trust baselines |
//! | [`quarantine`] | a quarantined tool as registered, whatever its source: a read-only stub that never runs |
//! | [`trust`] | opens the store that holds trust baselines, catalogues, the effect log and the audit trail |
//! | [`proxy`] | resources, prompts, completions, logging and subscriptions passed through, pinned like tools |
//! | [`relay`] | a server's sampling, elicitation and roots requests relayed to the calling client |
//! | [`audit`] | one audit record per call, written to the store |
//! | [`reload`] | the config re-read on change or SIGHUP, unchanged connections kept |
//! | [`health`] / [`metrics`] | `/healthz` and `/metrics` beside `/mcp` |
//! | [`liveness`] | whether an upstream is up (connected, answering, its child running) |
//! | [`retention`] | old audit records and effects deleted on a schedule |
//! | [`redact`] | secrets (expanded `${VAR}` values, headers, tokens, URL credentials) kept out of every log line and error |
//! | [`connecting`] | the progress line while many upstreams connect |
//! | [`oauth`] | the OAuth clients of the upstreams that need a login: grants restored from the store and written back, refreshed when due, *needs login* told apart from *down* |
//! | [`drift`] | what changed since a server was trusted, as data (`drift` prints it, `retrust` shows it) |
//!
//! Every call passes one gate (`portcullis_catalog::gate`, run by the tool
//! server) and leaves through one exit (`portcullis_catalog::framing::seal`);
//! what happened to it comes back as a `CallReport`, a value the audit trail
//! and the metrics record.
//!
//! ## A gateway in code
//!
//! A config value (here parsed from text; `config::load` reads a file), the
//! gateway started on it, one call made through every guard:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! use portcullis_catalog::gate::CallDecision;
//! use portcullis_gateway::{config, gateway::Gateway};
//! use std::os::unix::fs::PermissionsExt as _;
//!
//! // A native tool plugin: one tool, one command.
//! let dir = tempfile::tempdir()?;
//! let plugin = dir.path().join("greeter");
//! std::fs::create_dir(&plugin)?;
//! std::fs::write(plugin.join("mcp-plugin.json"), r#"{
//!   "name": "greeter", "version": "1.0.0",
//!   "tools": [{ "id": "greet", "handler": "./greet.sh", "description": "Greets someone",
//!               "annotations": { "readOnlyHint": true },
//!               "inputSchema": { "type": "object", "properties": { "name": { "type": "string" } },
//!                                "required": ["name"] } }]
//! }"#)?;
//! std::fs::write(plugin.join("greet.sh"), "#!/bin/sh\necho 'hello, Ada'\n")?;
//! std::fs::set_permissions(plugin.join("greet.sh"), std::fs::Permissions::from_mode(0o755))?;
//!
//! let text = "[gateway]\nstore = \"memory\"\n\n[[tool_plugins]]\npath = \"greeter\"\n";
//! let config = config::parse(&dir.path().join("portcullis.toml"), text, &|_| None)?;
//! let gateway = Gateway::start_once(&config).await?;
//!
//! let (result, report) = gateway
//!     .tools
//!     .call_reported("greet", serde_json::json!({"name": "Ada"}), None)
//!     .await?;
//! assert_eq!(report.decision, CallDecision::Allowed);
//! // The tool's words reach the model framed as untrusted output.
//! let text = result.text_blocks().next().unwrap_or_default();
//! assert!(text.contains("<untrusted-tool-output") && text.contains("hello, Ada"), "{text}");
//!
//! // Arguments the schema refuses never reach the plugin; the decision says so.
//! let (_, report) = gateway
//!     .tools
//!     .call_reported("greet", serde_json::json!({}), None)
//!     .await?;
//! assert_eq!(report.decision, CallDecision::Invalid);
//! gateway.close().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod audit;
pub mod config;
pub mod connecting;
pub mod drift;
pub mod gateway;
pub mod grants;
pub mod health;
pub mod import;
pub mod liveness;
pub mod metrics;
pub mod oauth;
pub mod proxy;
pub mod quarantine;
pub mod redact;
pub mod relay;
pub mod reload;
pub mod retention;
pub mod sources;
pub mod trust;
