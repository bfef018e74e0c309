//! The persisted row: which server was connected, its last listing (a cache)
//! and its trust baseline. Six fields, the legacy `mcp_servers` columns, and
//! nothing that authenticates; beside them the digests of the cached tools,
//! which only the store computes and writes.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use portcullis_catalog::fingerprint::{Fingerprints, fingerprint, fingerprint_listing};
use portcullis_catalog::{Endpoint, ServerIdentity, Tool, TransportKind};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The prefix of a stdio server's stored endpoint key.
pub const STDIO_KEY_PREFIX: &str = "stdio:sha256:";

/// One server as the store remembers it.
///
/// * `id` — the server's **effective** name (after collision suffixes, see
///   [`portcullis_catalog::server::resolve_server_names`]), so two servers
///   declared under one name get two rows and two baselines.
/// * `name` — the name it was declared under.
/// * `kind` (serialised as `type`) — its transport.
/// * `url` — its endpoint key ([`PersistedServer::endpoint_key`]): the URL of
///   a remote server, a hash of the command line of a stdio one.
/// * `tools` — the catalogue cache, refreshed freely.
/// * `tool_fingerprints` — the trust baseline, recorded once.
///
/// The type has no other field on purpose: a header, token or environment
/// value has nowhere to go, and deserialising a row drops unknown keys.
///
/// ```
/// use portcullis_catalog::ServerIdentity;
/// use portcullis_store::PersistedServer;
///
/// let files = ServerIdentity::stdio("files", "npx", &["-y", "server-fs", "--token=s3cret"]);
/// let row = PersistedServer::new("files", &files);
/// assert!(row.url.starts_with("stdio:sha256:"));
/// assert!(!row.url.contains("s3cret"));
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistedServer {
    /// The effective server name: the row's key.
    pub id: String,
    /// The declared server name.
    pub name: String,
    /// The transport (`stdio`, `streamable-http`, `sse`).
    #[serde(rename = "type")]
    pub kind: TransportKind,
    /// The endpoint key: see [`PersistedServer::endpoint_key`].
    pub url: String,
    /// The last listing the server published (the catalogue cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    /// The trust baseline: tool name → digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_fingerprints: Option<Fingerprints>,
    /// The digest of each cached tool, by position, as the store wrote them
    /// beside the cache ([`PersistedServer::cached_digests`]). Only a
    /// store's read sets it and a save never reads it (the store computes
    /// them from `tools`), so it is neither serialised nor parsed.
    #[serde(skip)]
    cached_digests: Option<Vec<String>>,
}

/// Equal when the six columns are: the cached digests are derived from
/// `tools`, and whether a row was read from a store or built by hand does
/// not make it another row.
impl PartialEq for PersistedServer {
    fn eq(&self, other: &Self) -> bool {
        let PersistedServer {
            id,
            name,
            kind,
            url,
            tools,
            tool_fingerprints,
            cached_digests: _,
        } = self;
        *id == other.id
            && *name == other.name
            && *kind == other.kind
            && *url == other.url
            && *tools == other.tools
            && *tool_fingerprints == other.tool_fingerprints
    }
}

impl PersistedServer {
    /// A row for `server` under its effective name `id`, with no listing and
    /// no baseline yet.
    pub fn new(id: impl Into<String>, server: &ServerIdentity) -> Self {
        PersistedServer {
            id: id.into(),
            name: server.name.clone(),
            kind: server.endpoint.transport(),
            url: Self::endpoint_key(&server.endpoint),
            tools: None,
            tool_fingerprints: None,
            cached_digests: None,
        }
    }

    /// The digest of each tool of the cached listing, position by position
    /// ([`portcullis_catalog::fingerprint::fingerprint`]), as the store
    /// computed them when it wrote the cache: a wake compares these with
    /// the baseline instead of hashing every cached tool again. `None` for
    /// a row that was not read from a store, a cache written before the
    /// store kept digests, or digests that do not pair up with `tools`.
    /// They describe `tools` as read: stale once `tools` is changed.
    pub fn cached_digests(&self) -> Option<&[String]> {
        self.cached_digests.as_deref()
    }

    /// Takes [`PersistedServer::cached_digests`] out of the row.
    pub fn take_cached_digests(&mut self) -> Option<Vec<String>> {
        self.cached_digests.take()
    }

    /// A row from its six columns and the digests stored beside its cache,
    /// kept only when there is one per cached tool.
    pub(crate) fn from_columns(
        id: String,
        name: String,
        kind: TransportKind,
        url: String,
        tools: Option<Vec<Tool>>,
        tool_fingerprints: Option<Fingerprints>,
        digests: Option<Vec<String>>,
    ) -> Self {
        let paired = |d: &Vec<String>| tools.as_ref().is_some_and(|t| t.len() == d.len());
        let cached_digests = digests.filter(paired);
        PersistedServer {
            id,
            name,
            kind,
            url,
            tools,
            tool_fingerprints,
            cached_digests,
        }
    }

    /// The digests a store writes beside `tools`: each tool's fingerprint,
    /// in order.
    pub(crate) fn digests_of(tools: &[Tool]) -> Vec<String> {
        tools.iter().map(fingerprint).collect()
    }

    /// Sets the catalogue cache.
    pub fn with_tools(mut self, tools: Vec<Tool>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Sets the baseline this save proposes (kept only if none is recorded).
    pub fn with_fingerprints(mut self, fingerprints: Fingerprints) -> Self {
        self.tool_fingerprints = Some(fingerprints);
        self
    }

    /// What the `url` column holds for `endpoint`; compare a stored row's
    /// `url` with this to tell whether the supplied config still points at
    /// the same server.
    ///
    /// * stdio: `stdio:sha256:<base64url SHA-256 of the command line>`, never
    ///   the command line itself: arguments can hold secrets.
    /// * remote: the URL verbatim (as legacy rows hold it), unless it carries
    ///   userinfo (`user:password@`) or a query string, which often hold
    ///   credentials (`?api_key=…`); those parts are replaced by a digest of
    ///   the whole URL, so the key still changes whenever the URL does.
    ///
    /// ```
    /// use portcullis_catalog::Endpoint;
    /// use portcullis_store::PersistedServer;
    ///
    /// let plain = Endpoint::StreamableHttp { url: "https://mcp.example.com/mcp".into() };
    /// assert_eq!(PersistedServer::endpoint_key(&plain), "https://mcp.example.com/mcp");
    /// let keyed = Endpoint::StreamableHttp { url: "https://mcp.example.com/mcp?api_key=s3cret".into() };
    /// let key = PersistedServer::endpoint_key(&keyed);
    /// assert!(key.starts_with("https://mcp.example.com/mcp?sha256:") && !key.contains("s3cret"));
    /// ```
    pub fn endpoint_key(endpoint: &Endpoint) -> String {
        match endpoint {
            Endpoint::Stdio { .. } => {
                format!("{STDIO_KEY_PREFIX}{}", digest(&endpoint.identity()))
            }
            Endpoint::StreamableHttp { url } | Endpoint::Sse { url } => remote_key(url),
        }
    }

    /// The baseline to enforce for this row: its recorded fingerprints, or,
    /// for a row written before fingerprints existed (a listing but no
    /// baseline), the fingerprints of its **stored** listing — the last one
    /// actually served to a model, so a server that drifted before the
    /// upgrade is caught on the first projection. `None` when the row has
    /// neither: the next connect trusts on first use.
    pub fn baseline_or_derived(&self) -> Option<Fingerprints> {
        match (&self.tool_fingerprints, &self.tools) {
            (Some(baseline), _) => Some(baseline.clone()),
            (None, Some(tools)) => Some(fingerprint_listing(tools)),
            (None, None) => None,
        }
    }

    /// Why this row may not be written, if it may not: an empty id, a stdio
    /// row whose `url` is not a command-line hash, or a remote URL carrying
    /// userinfo (a password).
    pub(crate) fn refusal(&self) -> Option<String> {
        if self.id.is_empty() {
            return Some("the id is empty".into());
        }
        match self.kind {
            TransportKind::Stdio => {
                let digest = self.url.strip_prefix(STDIO_KEY_PREFIX);
                let well_formed = digest.is_some_and(|d| {
                    d.len() == 43
                        && d.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
                (!well_formed).then(|| {
                    "a stdio server's url must be its endpoint key (stdio:sha256:…), never the command line".into()
                })
            }
            TransportKind::StreamableHttp | TransportKind::Sse => {
                let (_, authority, _) = split_url(&self.url);
                authority.contains('@').then(|| {
                    "the url carries userinfo; store PersistedServer::endpoint_key(endpoint) instead"
                        .into()
                })
            }
        }
    }
}

/// base64url (no padding) SHA-256 of `text`.
fn digest(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

fn remote_key(url: &str) -> String {
    let (scheme, authority, rest) = split_url(url);
    let userinfo = authority.contains('@');
    let query_at = rest.find(['?', '#']);
    if !userinfo && query_at.is_none() {
        return url.to_owned();
    }
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let path = &rest[..query_at.unwrap_or(rest.len())];
    format!("{scheme}{host}{path}?sha256:{}", digest(url))
}

/// Splits `url` into `scheme://`, the authority, and the rest (path, query,
/// fragment). Without `://` the whole string is "rest".
fn split_url(url: &str) -> (&str, &str, &str) {
    let Some(at) = url.find("://") else {
        return ("", "", url);
    };
    let (scheme, after) = url.split_at(at + 3);
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    (scheme, authority, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_key_hides_the_command_line_and_tracks_it() {
        let a = ServerIdentity::stdio("f", "npx", &["-y", "srv", "--key=abc"]);
        let b = ServerIdentity::stdio("f", "npx", &["-y", "srv", "--key=abd"]);
        let ka = PersistedServer::endpoint_key(&a.endpoint);
        assert!(!ka.contains("abc") && !ka.contains("npx"));
        assert_ne!(ka, PersistedServer::endpoint_key(&b.endpoint));
        assert_eq!(PersistedServer::new("f", &a).refusal(), None);
    }

    #[test]
    fn remote_key_strips_userinfo_and_query() {
        let key = remote_key("https://bob:hunter2@mcp.example.com:8443/mcp?token=t0k#frag");
        assert!(
            key.starts_with("https://mcp.example.com:8443/mcp?sha256:"),
            "{key}"
        );
        assert!(!key.contains("hunter2") && !key.contains("t0k") && !key.contains("bob"));
        assert_ne!(
            key,
            remote_key("https://bob:hunter3@mcp.example.com:8443/mcp?token=t0k#frag")
        );
        assert_eq!(
            remote_key("http://127.0.0.1:9/sse"),
            "http://127.0.0.1:9/sse"
        );
        assert_eq!(remote_key("http://h"), "http://h");
    }

    #[test]
    fn refuses_command_lines_and_passwords() {
        let mut row = PersistedServer::new("f", &ServerIdentity::stdio("f", "npx", &[]));
        row.url = "npx -y srv --token=abc".into();
        assert!(row.refusal().is_some());
        let mut remote = PersistedServer::new("d", &ServerIdentity::sse("d", "http://h/sse"));
        assert_eq!(remote.refusal(), None);
        remote.url = "http://u:p@h/sse".into();
        assert!(remote.refusal().is_some());
        remote.url = "http://h/sse".into();
        remote.id.clear();
        assert!(remote.refusal().is_some());
    }

    #[test]
    fn baseline_falls_back_to_the_stored_listing() {
        let tools = vec![Tool::new("a").with_description("A")];
        let row = PersistedServer::new("d", &ServerIdentity::sse("d", "http://h/sse"));
        assert_eq!(row.baseline_or_derived(), None);
        let cached = row.clone().with_tools(tools.clone());
        assert_eq!(
            cached.baseline_or_derived(),
            Some(fingerprint_listing(&tools))
        );
        let recorded = cached.with_fingerprints(Fingerprints::from([("a".into(), "x".into())]));
        assert_eq!(
            recorded.baseline_or_derived(),
            Some(Fingerprints::from([("a".into(), "x".into())]))
        );
    }

    #[test]
    fn serialises_as_the_six_column_row() {
        let row = PersistedServer::new(
            "docs",
            &ServerIdentity::streamable_http("docs", "https://x/mcp"),
        )
        .with_fingerprints(Fingerprints::new());
        let json = serde_json::to_value(&row).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"id":"docs","name":"docs","type":"streamable-http","url":"https://x/mcp","toolFingerprints":{}})
        );
        let smuggled: PersistedServer = serde_json::from_value(serde_json::json!({
            "id":"docs","name":"docs","type":"sse","url":"https://x/sse","headers":{"Authorization":"Bearer s3cret"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !serde_json::to_string(&smuggled)
                .unwrap_or_default()
                .contains("s3cret")
        );
    }
}
