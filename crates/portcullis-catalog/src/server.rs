//! Servers' identities and server-name collisions.
//!
//! A server name is only unique inside one `mcp.json`; two independently
//! written plugins both calling a server `local` is the expected case. When
//! names collide, **every** server sharing the name is renamed
//! `name_<hash of its identity>`: first-wins would make each projected name
//! depend on load order, so a policy rule written for `local__transfer` could
//! silently start matching another backend.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::diagnostic::{Diagnostic, Rule};
use crate::naming::short_hash;

/// The transports an upstream can be reached over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// A child process speaking JSON-RPC over stdin/stdout.
    Stdio,
    /// Streamable HTTP (2025-03-26 and later, including stateless 2026-07-28).
    StreamableHttp,
    /// Legacy HTTP+SSE (2024-11-05).
    Sse,
}

impl TransportKind {
    /// The name used in configs and stores (`"streamable-http"`).
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::StreamableHttp => "streamable-http",
            TransportKind::Sse => "sse",
        }
    }

    /// True for the HTTP transports.
    pub fn is_remote(self) -> bool {
        !matches!(self, TransportKind::Stdio)
    }
}

/// Where a server lives: what makes two servers with one name different.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Endpoint {
    /// A child process.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
    },
    /// A Streamable HTTP endpoint.
    StreamableHttp {
        /// The endpoint URL.
        url: String,
    },
    /// A legacy HTTP+SSE endpoint.
    Sse {
        /// The SSE stream URL.
        url: String,
    },
}

impl Endpoint {
    /// The transport.
    pub fn transport(&self) -> TransportKind {
        match self {
            Endpoint::Stdio { .. } => TransportKind::Stdio,
            Endpoint::StreamableHttp { .. } => TransportKind::StreamableHttp,
            Endpoint::Sse { .. } => TransportKind::Sse,
        }
    }

    /// The identity string: the URL, or the command line joined by spaces.
    /// Hash it before storing: a command line can hold secrets.
    pub fn identity(&self) -> String {
        match self {
            Endpoint::Stdio { command, args } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            Endpoint::StreamableHttp { url } | Endpoint::Sse { url } => url.clone(),
        }
    }
}

/// A server's declared name and where it lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServerIdentity {
    /// The name the config or `mcp.json` gave it.
    pub name: String,
    /// Where it lives.
    pub endpoint: Endpoint,
}

impl ServerIdentity {
    /// A server reached over Streamable HTTP.
    pub fn streamable_http(name: impl Into<String>, url: impl Into<String>) -> Self {
        ServerIdentity {
            name: name.into(),
            endpoint: Endpoint::StreamableHttp { url: url.into() },
        }
    }

    /// A server reached over legacy HTTP+SSE.
    pub fn sse(name: impl Into<String>, url: impl Into<String>) -> Self {
        ServerIdentity {
            name: name.into(),
            endpoint: Endpoint::Sse { url: url.into() },
        }
    }

    /// A child-process server.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: &[&str]) -> Self {
        ServerIdentity {
            name: name.into(),
            endpoint: Endpoint::Stdio {
                command: command.into(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
            },
        }
    }

    /// The name this server takes when it collides with others.
    pub fn suffixed_name(&self) -> String {
        format!("{}_{}", self.name, short_hash(&self.endpoint.identity()))
    }
}

/// The effective names of a set of servers, parallel to the input slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerNames {
    /// `names[i]` is the name server `i` projects under.
    pub names: Vec<String>,
    /// One `server-name-collision` per colliding name.
    pub diagnostics: Vec<Diagnostic>,
}

/// The names a set of sources project under, looked up by identity: each
/// identity counted once (a second copy of one would read as a collision),
/// collisions resolved by [`resolve_server_names_keeping`]. The catalogue,
/// the store's row ids and the gateway's sources all name through it, so a
/// source's catalogue name and its row never disagree.
#[derive(Debug, Clone)]
pub struct SourceNames {
    identities: Vec<ServerIdentity>,
    resolved: ServerNames,
}

impl SourceNames {
    /// The names of `sources`, `keep` keeping theirs against namesakes.
    pub fn new<'a>(
        sources: impl IntoIterator<Item = &'a ServerIdentity>,
        keep: &[ServerIdentity],
    ) -> Self {
        let mut identities: Vec<ServerIdentity> = Vec::new();
        for identity in sources {
            if !identities.contains(identity) {
                identities.push(identity.clone());
            }
        }
        let resolved = resolve_server_names_keeping(&identities, keep);
        SourceNames {
            identities,
            resolved,
        }
    }

    /// The name `identity` projects under, if it is one of the sources.
    pub fn name_of(&self, identity: &ServerIdentity) -> Option<&str> {
        let at = self.identities.iter().position(|i| i == identity)?;
        self.resolved.names.get(at).map(String::as_str)
    }

    /// How many distinct sources there are.
    pub fn len(&self) -> usize {
        self.identities.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.identities.is_empty()
    }

    /// One `server-name-collision` per colliding name.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.resolved.diagnostics
    }
}

/// Resolves server-name collisions: every server sharing a name takes
/// `name_<hash of identity>`; the rest keep theirs. The result for each server
/// does not depend on the order of `servers`.
///
/// ```
/// use portcullis_catalog::server::{resolve_server_names, ServerIdentity};
///
/// let servers = [
///     ServerIdentity::streamable_http("local", "http://127.0.0.1:9001/mcp"),
///     ServerIdentity::streamable_http("local", "http://127.0.0.1:9002/mcp"),
///     ServerIdentity::streamable_http("docs", "https://docs.example/mcp"),
/// ];
/// let resolved = resolve_server_names(&servers);
/// assert!(resolved.names[0].starts_with("local_"));
/// assert_ne!(resolved.names[0], resolved.names[1]);
/// assert_eq!(resolved.names[2], "docs");
/// assert_eq!(resolved.diagnostics.len(), 1);
/// ```
pub fn resolve_server_names(servers: &[ServerIdentity]) -> ServerNames {
    resolve_server_names_keeping(servers, &[])
}

/// [`resolve_server_names`], except that a server in `keep` (an operator's
/// own `[upstreams.NAME]`) keeps its plain name against namesakes that are
/// not in `keep` (a plugin's server, a native plugin, an app): only they
/// are suffixed. So adding a plugin never renames the operator's server,
/// and never moves the trust baseline kept under its name. Two or more
/// namesakes in `keep` are all suffixed, as without it.
///
/// ```
/// use portcullis_catalog::server::{resolve_server_names_keeping, ServerIdentity};
///
/// let mine = ServerIdentity::streamable_http("files", "https://files.example/mcp");
/// let plugin = ServerIdentity::stdio("files", "./plugin/server", &[]);
/// let resolved = resolve_server_names_keeping(&[plugin, mine.clone()], &[mine]);
/// assert!(resolved.names[0].starts_with("files_"));
/// assert_eq!(resolved.names[1], "files");
/// ```
pub fn resolve_server_names_keeping(
    servers: &[ServerIdentity],
    keep: &[ServerIdentity],
) -> ServerNames {
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, server) in servers.iter().enumerate() {
        by_name.entry(server.name.as_str()).or_default().push(i);
    }
    let mut names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
    let mut diagnostics = Vec::new();
    for (name, members) in by_name {
        if members.len() < 2 {
            continue;
        }
        let kept: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| keep.contains(&servers[i]))
            .collect();
        let keeper = (kept.len() == 1).then(|| kept[0]);
        let mut renamed = Vec::with_capacity(members.len());
        for &i in &members {
            if Some(i) != keeper {
                names[i] = servers[i].suffixed_name();
                renamed.push(names[i].clone());
            }
        }
        renamed.sort();
        let message = if keeper.is_some() {
            format!(
                "{} sources are named \"{name}\"; the configured upstream keeps the name, and the others are projected under suffixed names ({}). Rename one of them to get the plain name back.",
                members.len(),
                renamed.join(", ")
            )
        } else {
            format!(
                "{} MCP servers are named \"{name}\"; each is projected under its own suffixed name ({}) so no tool name depends on load order. Rename one of them to get the plain name back.",
                members.len(),
                renamed.join(", ")
            )
        };
        diagnostics.push(Diagnostic::new(Rule::ServerNameCollision, name, message));
    }
    ServerNames { names, diagnostics }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_url_or_command_line() {
        assert_eq!(
            ServerIdentity::stdio("f", "npx", &["-y", "server-filesystem", "."])
                .endpoint
                .identity(),
            "npx -y server-filesystem ."
        );
        assert_eq!(
            ServerIdentity::sse("s", "http://127.0.0.1/sse")
                .endpoint
                .identity(),
            "http://127.0.0.1/sse"
        );
    }

    #[test]
    fn a_kept_name_stays_with_its_one_keeper_whatever_the_order() {
        let mine = ServerIdentity::streamable_http("files", "https://f.example/mcp");
        let plugin = ServerIdentity::stdio("files", "./plugin/server", &[]);
        let app = ServerIdentity::streamable_http("files", "http://127.0.0.1:8/");
        let keep = [mine.clone()];
        let forward =
            resolve_server_names_keeping(&[mine.clone(), plugin.clone(), app.clone()], &keep);
        let backward =
            resolve_server_names_keeping(&[app.clone(), plugin.clone(), mine.clone()], &keep);
        assert_eq!(forward.names[0], "files");
        assert_eq!(backward.names[2], "files");
        assert_eq!(forward.names[1], backward.names[1]);
        assert_eq!(forward.names[2], backward.names[0]);
        assert!(forward.names[1].starts_with("files_") && forward.names[2].starts_with("files_"));
        assert_eq!(forward.diagnostics, backward.diagnostics);
        // Two keepers of one name: neither wins.
        let both = resolve_server_names_keeping(&[mine.clone(), app.clone()], &[mine, app]);
        assert!(
            both.names.iter().all(|n| n.starts_with("files_")),
            "{:?}",
            both.names
        );
    }

    #[test]
    fn collisions_are_order_independent() {
        let a = ServerIdentity::streamable_http("local", "http://127.0.0.1:1/mcp");
        let b = ServerIdentity::stdio("local", "./bin/server", &[]);
        let forward = resolve_server_names(&[a.clone(), b.clone()]);
        let backward = resolve_server_names(&[b.clone(), a.clone()]);
        assert_eq!(forward.names[0], backward.names[1]);
        assert_eq!(forward.names[1], backward.names[0]);
        assert_eq!(forward.diagnostics, backward.diagnostics);
        assert_eq!(
            forward.names[0],
            format!("local_{}", short_hash("http://127.0.0.1:1/mcp"))
        );
        assert_eq!(forward.diagnostics[0].rule, Rule::ServerNameCollision);
        assert_eq!(forward.diagnostics[0].origin, "local");
    }

    #[test]
    fn a_lone_name_is_untouched() {
        let resolved = resolve_server_names(&[ServerIdentity::streamable_http(
            "local",
            "http://127.0.0.1/mcp",
        )]);
        assert_eq!(resolved.names, ["local"]);
        assert!(resolved.diagnostics.is_empty());
    }

    #[test]
    fn three_way_collision_gives_one_diagnostic() {
        let servers: Vec<_> = (0..3)
            .map(|i| ServerIdentity::streamable_http("x", format!("http://127.0.0.1:{i}/mcp")))
            .collect();
        let resolved = resolve_server_names(&servers);
        assert_eq!(resolved.diagnostics.len(), 1);
        let unique: std::collections::BTreeSet<_> = resolved.names.iter().collect();
        assert_eq!(unique.len(), 3);
    }
}
