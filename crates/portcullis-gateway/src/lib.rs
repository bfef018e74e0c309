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
//! | [`trust`] | opens the store that holds trust baselines, catalogues, the effect log and the audit trail |
//! | [`proxy`] | resources, prompts, completions, logging and subscriptions passed through, pinned like tools |
//! | [`relay`] | a server's sampling, elicitation and roots requests relayed to the calling client |
//! | [`audit`] | one audit record per call, written to the store |
//! | [`reload`] | the config re-read on change or SIGHUP, unchanged connections kept |
//! | [`health`] / [`metrics`] | `/healthz` and `/metrics` beside `/mcp` |
//! | [`retention`] | old audit records and effects deleted on a schedule |
//! | [`redact`] | secrets (expanded `${VAR}` values, headers, tokens, URL credentials) kept out of every log line and error |
//! | [`connecting`] | the progress line while many upstreams connect |

#![warn(missing_docs)]

pub mod audit;
pub mod config;
pub mod connecting;
pub mod gateway;
pub mod health;
pub mod metrics;
pub mod proxy;
pub mod redact;
pub mod relay;
pub mod reload;
pub mod retention;
pub mod sources;
pub mod trust;
