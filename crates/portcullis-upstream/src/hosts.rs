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

use std::net::IpAddr;
use std::sync::Arc;

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

/// One server's effective host check.
#[derive(Debug, Clone)]
pub(crate) struct HostGuard {
    /// Lower-cased allowed hosts; `None` = any.
    allowed: Option<Vec<String>>,
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
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            // A name that does not resolve fails on its own when requested;
            // the guard only refuses what it can see.
            Err(_) => match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(found) => found.map(|a| a.ip()).collect(),
                Err(_) => Vec::new(),
            },
        };
        match addresses.into_iter().find(is_metadata_address) {
            Some(ip) => Err(HostRefusal::Metadata { host, ip }),
            None => Ok(()),
        }
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
