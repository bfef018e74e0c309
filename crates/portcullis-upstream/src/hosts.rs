//! The SSRF guard: which hosts a remote server's URL — and every redirect
//! hop — may name.
//!
//! Server URLs come from plugin files and configs, so they are untrusted
//! input. [`AllowedHosts`] is the seed's `allowedHosts`: no check, a list
//! (exact host match, case-insensitive, ports ignored, no wildcards), or a
//! resolver asked per server and session. Beyond the seed, a host that
//! resolves to a link-local or cloud-metadata address (169.254.0.0/16,
//! `fd00:ec2::254`) is refused unless it is listed explicitly: that is where
//! instance credentials live.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use url::Url;

/// A resolver-style allow-list: `(server, session) -> hosts`.
pub type HostResolver = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

/// Which hosts remote servers may be reached on.
#[derive(Clone, Default)]
pub enum AllowedHosts {
    /// No host check (fit only for fully trusted configs). Link-local and
    /// metadata addresses are still refused.
    #[default]
    Any,
    /// The URL's host must equal one of these, case-insensitively.
    List(Vec<String>),
    /// Asked per server and session; needs a session in the options.
    Resolver(HostResolver),
}

impl AllowedHosts {
    /// A list.
    pub fn list<I, S>(hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        AllowedHosts::List(hosts.into_iter().map(Into::into).collect())
    }

    /// A resolver.
    pub fn resolver(f: impl Fn(&str, &str) -> Vec<String> + Send + Sync + 'static) -> Self {
        AllowedHosts::Resolver(Arc::new(f))
    }

    /// The effective list for one server, or `None` for no check.
    pub(crate) fn resolve(&self, server: &str, session: Option<&str>) -> Option<Vec<String>> {
        match self {
            AllowedHosts::Any => None,
            AllowedHosts::List(hosts) => Some(hosts.clone()),
            AllowedHosts::Resolver(f) => Some(f(server, session.unwrap_or_default())),
        }
    }
}

impl std::fmt::Debug for AllowedHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowedHosts::Any => f.write_str("Any"),
            AllowedHosts::List(hosts) => f.debug_tuple("List").field(hosts).finish(),
            AllowedHosts::Resolver(_) => f.write_str("Resolver(..)"),
        }
    }
}

/// Why a URL may not be requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostRefusal {
    /// Not in the allow-list.
    NotAllowed(String),
    /// Resolves to a link-local or metadata address and is not listed.
    Metadata { host: String, ip: IpAddr },
    /// No host at all.
    NoHost,
}

impl HostRefusal {
    pub(crate) fn message(&self, server: &str) -> String {
        match self {
            HostRefusal::NotAllowed(host) => {
                format!("MCP server \"{server}\" host \"{host}\" is not in allowedHosts.")
            }
            HostRefusal::Metadata { host, ip } => format!(
                "MCP server \"{server}\" host \"{host}\" resolves to {ip}, a link-local or cloud-metadata address; list the host in allowedHosts to reach it."
            ),
            HostRefusal::NoHost => format!("MCP server \"{server}\" URL has no host."),
        }
    }
}

/// How long a name's resolution verdict is reused. The guard runs before
/// every request (redirect hops included); without this, a server named by
/// host name would cost a `getaddrinfo` on the blocking pool, and often a
/// DNS round trip, per call. Reusing it widens nothing: the HTTP client
/// resolves on its own when it opens a connection and keeps that connection
/// for many calls, so the guard's answer was never tied to the connection.
const VERDICT_TTL: Duration = Duration::from_secs(30);

/// Per name: when it was resolved, and the metadata address it resolved
/// to (`None`: nothing to refuse).
type Verdicts = HashMap<String, (Instant, Option<IpAddr>)>;

/// One server's effective host check.
#[derive(Debug, Clone)]
pub(crate) struct HostGuard {
    /// Lower-cased allowed hosts; `None` = any.
    allowed: Option<Vec<String>>,
    /// Recent verdicts on resolved names, shared by the guard's clones.
    verdicts: Arc<Mutex<Verdicts>>,
}

impl HostGuard {
    pub(crate) fn new(allowed: Option<Vec<String>>) -> Self {
        HostGuard {
            allowed: allowed.map(|hosts| {
                hosts
                    .into_iter()
                    .map(|h| normalise_host(&h).to_ascii_lowercase())
                    .collect()
            }),
            verdicts: Arc::default(),
        }
    }

    fn listed(&self, host: &str) -> bool {
        self.allowed
            .as_ref()
            .is_some_and(|hosts| hosts.iter().any(|h| h == host))
    }

    /// Checks `url` before it is requested: the allow-list first (no network
    /// at all), then where the name resolves.
    pub(crate) async fn check(&self, url: &Url) -> Result<(), HostRefusal> {
        let host = url
            .host_str()
            .map(|h| normalise_host(h).to_ascii_lowercase())
            .ok_or(HostRefusal::NoHost)?;
        if self.allowed.is_some() && !self.listed(&host) {
            return Err(HostRefusal::NotAllowed(host));
        }
        if self.listed(&host) {
            // Explicitly listed: the operator asked for exactly this host.
            return Ok(());
        }
        let refused = match host.parse::<IpAddr>() {
            Ok(ip) => is_metadata_address(&ip).then_some(ip),
            Err(_) => self.resolve_name(&host, url).await,
        };
        match refused {
            Some(ip) => Err(HostRefusal::Metadata { host, ip }),
            None => Ok(()),
        }
    }

    /// The metadata address `host` resolves to, if any, reusing a verdict
    /// younger than [`VERDICT_TTL`].
    async fn resolve_name(&self, host: &str, url: &Url) -> Option<IpAddr> {
        let now = Instant::now();
        if let Some((at, verdict)) = self.verdicts().get(host)
            && now.duration_since(*at) < VERDICT_TTL
        {
            return *verdict;
        }
        let port = url.port_or_known_default().unwrap_or(443);
        // A name that does not resolve fails on its own when requested;
        // the guard only refuses what it can see.
        let verdict = match tokio::net::lookup_host((host, port)).await {
            Ok(found) => found.map(|a| a.ip()).find(is_metadata_address),
            Err(_) => None,
        };
        let mut verdicts = self.verdicts();
        // Bounded: a server's hosts are its URL's and its redirects'.
        if verdicts.len() >= 64 {
            verdicts.clear();
        }
        verdicts.insert(host.to_owned(), (now, verdict));
        verdict
    }

    fn verdicts(&self) -> std::sync::MutexGuard<'_, Verdicts> {
        self.verdicts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn normalise_host(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Link-local IPv4 (169.254.0.0/16, home of 169.254.169.254) and the AWS
/// IPv6 metadata address `fd00:ec2::254` (also as IPv4-mapped forms).
pub(crate) fn is_metadata_address(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.is_link_local();
            }
            let aws: std::net::Ipv6Addr =
                std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            *v6 == aws
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[tokio::test]
    async fn list_matches_exact_host_case_insensitively_ignoring_ports() {
        let guard = HostGuard::new(Some(vec!["MCP.example.com".into(), "127.0.0.1".into()]));
        assert!(
            guard
                .check(&url("https://mcp.EXAMPLE.com:8443/mcp"))
                .await
                .is_ok()
        );
        assert!(guard.check(&url("http://127.0.0.1:9/mcp")).await.is_ok());
        assert_eq!(
            guard.check(&url("https://evil.example.com/mcp")).await,
            Err(HostRefusal::NotAllowed("evil.example.com".into()))
        );
        // No wildcards, no suffix matching.
        assert!(
            guard
                .check(&url("https://sub.mcp.example.com/"))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn metadata_addresses_need_an_explicit_listing() {
        let any = HostGuard::new(None);
        assert!(matches!(
            any.check(&url("http://169.254.169.254/latest/meta-data"))
                .await,
            Err(HostRefusal::Metadata { .. })
        ));
        assert!(matches!(
            any.check(&url("http://[fd00:ec2::254]/")).await,
            Err(HostRefusal::Metadata { .. })
        ));
        assert!(any.check(&url("http://127.0.0.1:1/")).await.is_ok());
        let listed = HostGuard::new(Some(vec!["169.254.169.254".into()]));
        assert!(listed.check(&url("http://169.254.169.254/")).await.is_ok());
    }

    #[tokio::test]
    async fn a_name_is_resolved_once_and_its_verdict_reused() {
        let guard = HostGuard::new(None);
        assert!(guard.check(&url("http://localhost:9/mcp")).await.is_ok());
        assert!(guard.verdicts().contains_key("localhost"));
        // A clone (another request of the same server) sees the verdict.
        let clone = guard.clone();
        clone.verdicts().insert(
            "localhost".into(),
            (Instant::now(), Some("169.254.1.1".parse().unwrap())),
        );
        assert!(matches!(
            guard.check(&url("http://localhost:9/mcp")).await,
            Err(HostRefusal::Metadata { .. })
        ));
        // An expired verdict is looked up again.
        let old = Instant::now()
            .checked_sub(VERDICT_TTL * 2)
            .expect("the monotonic clock has run for a minute");
        guard.verdicts().insert(
            "localhost".into(),
            (old, Some("169.254.1.1".parse().unwrap())),
        );
        assert!(guard.check(&url("http://localhost:9/mcp")).await.is_ok());
    }

    #[test]
    fn refusal_messages_follow_the_seed() {
        assert_eq!(
            HostRefusal::NotAllowed("evil.example".into()).message("docs"),
            "MCP server \"docs\" host \"evil.example\" is not in allowedHosts."
        );
    }

    #[test]
    fn resolver_sees_server_and_session() {
        let hosts = AllowedHosts::resolver(|server, session| vec![format!("{server}.{session}")]);
        assert_eq!(
            hosts.resolve("docs", Some("s1")),
            Some(vec!["docs.s1".to_owned()])
        );
        assert_eq!(AllowedHosts::Any.resolve("docs", None), None);
    }
}
