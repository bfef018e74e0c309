//! The SSRF guard: which hosts a remote server's URL — and every redirect
//! hop — may name, and which addresses a connection may reach.
//!
//! Server URLs come from plugin files and configs, so they are untrusted
//! input. [`AllowedHosts`] (`allowedHosts`, as `mcpServers` configs name it): no check, a list
//! (exact host match, case-insensitive, ports ignored, no wildcards), or a
//! resolver asked per server and session. Beyond that list, and unless a host
//! is listed explicitly:
//! - an address where instance credentials live is refused: link-local
//!   (`169.254.0.0/16`, `fe80::/10`) and the clouds' metadata endpoints
//!   (`100.100.100.200`, `168.63.129.16`, `fd00:ec2::254`), also in their
//!   IPv4-mapped and NAT64 (`64:ff9b::/96`) IPv6 forms;
//! - a server whose own URL reaches the public internet (`Reach::Public`)
//!   never reaches a loopback or private address, so a redirect (or a DNS
//!   answer that changed) cannot turn it against services on this machine
//!   or its network. A server configured on such an address may reach the
//!   others.
//!
//! The guard checks each URL before it is requested, and
//! `GuardedResolver` applies the same rule to the addresses a connection
//! is opened to: a name is resolved once per connection and only the
//! addresses that passed are dialled.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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

/// Where an address leads, as far as the guard is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddressClass {
    /// Anywhere on the internet.
    Public,
    /// This machine or a private network: loopback, RFC 1918, shared
    /// address space (`100.64.0.0/10`), unique-local IPv6, unspecified,
    /// multicast and reserved ranges.
    Internal,
    /// Link-local or a cloud metadata endpoint: refused unless listed.
    Metadata,
}

/// How far one server's requests may reach, fixed when it connects from
/// where its own URL resolved then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The server is on the internet: loopback and private addresses are
    /// refused for it and for every host it redirects to.
    Public,
    /// The server itself is on this machine or a private network: it may
    /// reach others there too.
    Internal,
}

impl Reach {
    /// The reach of a server whose configured URL is `url`: internal when
    /// every address its host has is internal. A name that does not
    /// resolve gets the stricter answer; its connection fails anyway.
    pub(crate) async fn of(url: &Url) -> Reach {
        let Some(host) = url.host_str().map(normalise_host) else {
            return Reach::Public;
        };
        let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let port = url.port_or_known_default().unwrap_or(443);
                match tokio::net::lookup_host((host, port)).await {
                    Ok(found) => found.map(|a| a.ip()).collect(),
                    Err(_) => Vec::new(),
                }
            }
        };
        if !addresses.is_empty()
            && addresses
                .iter()
                .all(|ip| classify(ip) != AddressClass::Public)
        {
            Reach::Internal
        } else {
            Reach::Public
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
    /// Resolves to a loopback or private address, from a server that is not
    /// on one itself.
    Internal { host: String, ip: IpAddr },
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
            HostRefusal::Internal { host, ip } => format!(
                "MCP server \"{server}\" host \"{host}\" resolves to {ip}, a loopback or private address, and the server's own URL is not on one; list the host in allowedHosts to reach it."
            ),
            HostRefusal::NoHost => format!("MCP server \"{server}\" URL has no host."),
        }
    }
}

/// How long a name's resolution verdict is reused. The guard runs before
/// every request (redirect hops included); without this, a server named by
/// host name would cost a `getaddrinfo` on the blocking pool, and often a
/// DNS round trip, per call. Reusing it widens nothing: the addresses a
/// connection is opened to are checked again by [`GuardedResolver`].
const VERDICT_TTL: Duration = Duration::from_secs(30);

/// Per name: when it was resolved, and the first address it resolved to
/// that the guard refuses (`None`: nothing to refuse).
type Verdicts = HashMap<String, (Instant, Option<IpAddr>)>;

/// One server's effective host check.
#[derive(Debug, Clone)]
pub(crate) struct HostGuard {
    /// Lower-cased allowed hosts; `None` = any.
    allowed: Option<Vec<String>>,
    /// How far the server may reach.
    reach: Reach,
    /// Recent verdicts on resolved names, shared by the guard's clones.
    verdicts: Arc<Mutex<Verdicts>>,
}

impl HostGuard {
    pub(crate) fn new(allowed: Option<Vec<String>>, reach: Reach) -> Self {
        HostGuard {
            allowed: allowed.map(|hosts| {
                hosts
                    .into_iter()
                    .map(|h| normalise_host(&h).to_ascii_lowercase())
                    .collect()
            }),
            reach,
            verdicts: Arc::default(),
        }
    }

    fn listed(&self, host: &str) -> bool {
        self.allowed
            .as_ref()
            .is_some_and(|hosts| hosts.iter().any(|h| h == host))
    }

    /// Whether an unlisted host may be reached at `ip`.
    fn admits(&self, ip: &IpAddr) -> bool {
        match classify(ip) {
            AddressClass::Public => true,
            AddressClass::Internal => self.reach == Reach::Internal,
            AddressClass::Metadata => false,
        }
    }

    fn refusal(host: String, ip: IpAddr) -> HostRefusal {
        match classify(&ip) {
            AddressClass::Metadata => HostRefusal::Metadata { host, ip },
            _ => HostRefusal::Internal { host, ip },
        }
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
            Ok(ip) => (!self.admits(&ip)).then_some(ip),
            Err(_) => self.resolve_name(&host, url).await,
        };
        match refused {
            Some(ip) => Err(Self::refusal(host, ip)),
            None => Ok(()),
        }
    }

    /// The first refused address `host` resolves to, if any, reusing a
    /// verdict younger than [`VERDICT_TTL`].
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
            Ok(found) => found.map(|a| a.ip()).find(|ip| !self.admits(ip)),
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

    /// The addresses of `host` a connection may be opened to: all of them
    /// when the host is listed, else those the guard admits. Refused when
    /// none is left.
    pub(crate) fn admit_resolved(
        &self,
        host: &str,
        addresses: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, HostRefusal> {
        let host = normalise_host(host).to_ascii_lowercase();
        if self.listed(&host) {
            return Ok(addresses);
        }
        let first = addresses.first().map(SocketAddr::ip);
        let admitted: Vec<SocketAddr> = addresses
            .into_iter()
            .filter(|a| self.admits(&a.ip()))
            .collect();
        match (admitted.is_empty(), first) {
            (true, Some(ip)) => Err(Self::refusal(host, ip)),
            _ => Ok(admitted),
        }
    }

    fn verdicts(&self) -> std::sync::MutexGuard<'_, Verdicts> {
        self.verdicts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The DNS resolver of a server's HTTP client: resolves each name once per
/// connection and hands the connector only the addresses the server's
/// [`HostGuard`] admits, so what was checked is what is dialled (a name
/// that answers differently between the check and the connection gains
/// nothing). IP-literal hosts are not resolved; the guard's check before
/// each request covers them.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    pub(crate) guard: HostGuard,
    pub(crate) server: String,
}

impl GuardedResolver {
    /// The addresses of `host` a connection may be opened to (port 0: the
    /// connector sets the URL's), or the guard's refusal as an I/O error.
    pub(crate) async fn admitted(&self, host: &str) -> std::io::Result<Vec<SocketAddr>> {
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        self.guard
            .admit_resolved(host, found)
            .map_err(|refusal| std::io::Error::other(refusal.message(&self.server)))
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let admitted = resolver.admitted(&host).await?;
            let addresses: reqwest::dns::Addrs = Box::new(admitted.into_iter());
            Ok(addresses)
        })
    }
}

fn normalise_host(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The IPv4 address an IPv6 one carries: IPv4-mapped (`::ffff:a.b.c.d`)
/// and NAT64 (`64:ff9b::/96`) forms reach the IPv4 host they embed.
fn embedded_v4(v6: &Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return Some(Ipv4Addr::new(a, b, c, d));
    }
    None
}

fn classify_v4(v4: &Ipv4Addr) -> AddressClass {
    const METADATA: [Ipv4Addr; 2] = [
        // Alibaba Cloud.
        Ipv4Addr::new(100, 100, 100, 200),
        // Azure's wire server.
        Ipv4Addr::new(168, 63, 129, 16),
    ];
    let [a, b, ..] = v4.octets();
    if v4.is_link_local() || METADATA.contains(v4) {
        AddressClass::Metadata
    } else if v4.is_loopback()
        || v4.is_private()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || a == 0
        // Shared address space (carrier-grade NAT), benchmarking, reserved.
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240
    {
        AddressClass::Internal
    } else {
        AddressClass::Public
    }
}

/// What every guarded client is built from: redirects left to the guard,
/// the connect timeout, `TCP_NODELAY` and the process's TLS configuration.
fn default_builder(tls: rustls::ClientConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        // Redirects are followed by hand, per hop, by the guard.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        // Built once per process (`crate::tls`), not once per client.
        .tls_backend_preconfigured(tls)
}

/// The default client for one remote server: its names are resolved by
/// `resolver`, which dials only the addresses the server's guard admits.
pub(crate) fn guarded_client(
    resolver: GuardedResolver,
) -> Result<reqwest::Client, crate::tls::ClientBuildError> {
    guarded_client_with(resolver, crate::tls::shared()?)
}

/// [`guarded_client`] with the TLS configuration `tls` (the tests' own
/// roots added, say).
pub(crate) fn guarded_client_with(
    resolver: GuardedResolver,
    tls: rustls::ClientConfig,
) -> Result<reqwest::Client, crate::tls::ClientBuildError> {
    Ok(default_builder(tls).dns_resolver(resolver).build()?)
}

#[cfg(test)]
pub(crate) static PRETEND_PUBLIC: Mutex<Vec<IpAddr>> = Mutex::new(Vec::new());

/// Where `ip` leads.
pub(crate) fn classify(ip: &IpAddr) -> AddressClass {
    #[cfg(test)]
    if PRETEND_PUBLIC
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(ip)
    {
        return AddressClass::Public;
    }
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return classify_v4(&v4);
            }
            let aws = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            let first = v6.segments()[0];
            if *v6 == aws || (first & 0xffc0) == 0xfe80 {
                AddressClass::Metadata
            } else if v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local (fc00::/7) and the old site-local (fec0::/10).
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfec0
                // IPv4-compatible (::a.b.c.d, deprecated): never public.
                || v6.segments()[..6] == [0; 6]
            {
                AddressClass::Internal
            } else {
                AddressClass::Public
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn list_matches_exact_host_case_insensitively_ignoring_ports() {
        let guard = HostGuard::new(
            Some(vec!["MCP.example.com".into(), "127.0.0.1".into()]),
            Reach::Public,
        );
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
        let any = HostGuard::new(None, Reach::Internal);
        for refused in [
            "http://169.254.169.254/latest/meta-data",
            "http://[fd00:ec2::254]/",
            "http://100.100.100.200/latest/meta-data",
            "http://168.63.129.16/machine",
            "http://[fe80::1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[64:ff9b::6464:64c8]/",
            "http://[64:ff9b::a83f:8110]/",
        ] {
            assert!(
                matches!(
                    any.check(&url(refused)).await,
                    Err(HostRefusal::Metadata { .. })
                ),
                "{refused} passed"
            );
        }
        assert!(any.check(&url("http://127.0.0.1:1/")).await.is_ok());
        let listed = HostGuard::new(Some(vec!["169.254.169.254".into()]), Reach::Internal);
        assert!(listed.check(&url("http://169.254.169.254/")).await.is_ok());
    }

    #[test]
    fn addresses_are_classified_in_every_form() {
        for public in ["93.184.216.34", "2606:4700::1111", "64:ff9b::5db8:d822"] {
            assert_eq!(classify(&ip(public)), AddressClass::Public, "{public}");
        }
        for internal in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fd12::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
        ] {
            assert_eq!(
                classify(&ip(internal)),
                AddressClass::Internal,
                "{internal}"
            );
        }
    }

    #[tokio::test]
    async fn a_public_server_never_reaches_loopback_or_private_addresses() {
        let public = HostGuard::new(None, Reach::Public);
        for refused in [
            "http://127.0.0.1:9/internal/admin",
            "http://10.0.0.5/",
            "http://[::1]:9/",
            "http://[::ffff:127.0.0.1]:9/",
            "http://localhost:9/internal/admin",
        ] {
            assert!(
                matches!(
                    public.check(&url(refused)).await,
                    Err(HostRefusal::Internal { .. })
                ),
                "{refused} passed"
            );
        }
        assert!(public.check(&url("https://93.184.216.34/")).await.is_ok());
        // Listing the host is the operator's way through.
        let listed = HostGuard::new(Some(vec!["localhost".into()]), Reach::Public);
        assert!(listed.check(&url("http://localhost:9/")).await.is_ok());
        // A server on loopback itself may reach its neighbours.
        let internal = HostGuard::new(None, Reach::Internal);
        assert!(internal.check(&url("http://localhost:9/")).await.is_ok());
    }

    #[tokio::test]
    async fn reach_follows_where_the_configured_url_resolves() {
        assert_eq!(
            Reach::of(&url("http://127.0.0.1:9/mcp")).await,
            Reach::Internal
        );
        assert_eq!(
            Reach::of(&url("http://localhost:9/mcp")).await,
            Reach::Internal
        );
        assert_eq!(Reach::of(&url("http://[::1]:9/mcp")).await, Reach::Internal);
        assert_eq!(
            Reach::of(&url("https://93.184.216.34/mcp")).await,
            Reach::Public
        );
        // Unresolvable: the stricter answer.
        assert_eq!(
            Reach::of(&url("https://nowhere.invalid/mcp")).await,
            Reach::Public
        );
    }

    #[test]
    fn the_resolver_dials_only_admitted_addresses() {
        let sock = |s: &str| SocketAddr::new(ip(s), 0);
        let public = HostGuard::new(None, Reach::Public);
        // A name answering a public and a loopback address (a rebinding
        // attempt) is dialled at the public one only.
        assert_eq!(
            public.admit_resolved(
                "mcp.example.com",
                vec![sock("127.0.0.1"), sock("93.184.216.34")]
            ),
            Ok(vec![sock("93.184.216.34")])
        );
        assert!(matches!(
            public.admit_resolved("mcp.example.com", vec![sock("127.0.0.1")]),
            Err(HostRefusal::Internal { .. })
        ));
        assert!(matches!(
            public.admit_resolved("mcp.example.com", vec![sock("169.254.169.254")]),
            Err(HostRefusal::Metadata { .. })
        ));
        let listed = HostGuard::new(Some(vec!["MCP.example.com".into()]), Reach::Public);
        assert_eq!(
            listed.admit_resolved("mcp.example.com", vec![sock("127.0.0.1")]),
            Ok(vec![sock("127.0.0.1")])
        );
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_that_now_answers_loopback() {
        use reqwest::dns::Resolve;
        let resolver = GuardedResolver {
            guard: HostGuard::new(None, Reach::Public),
            server: "docs".into(),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let refused = match resolver.resolve(name).await {
            Ok(_) => panic!("localhost was admitted for a public server"),
            Err(e) => e.to_string(),
        };
        assert!(refused.contains("loopback or private"), "{refused}");
        let internal = GuardedResolver {
            guard: HostGuard::new(None, Reach::Internal),
            server: "docs".into(),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let found: Vec<SocketAddr> = match internal.resolve(name).await {
            Ok(found) => found.collect(),
            Err(e) => panic!("{e}"),
        };
        assert!(!found.is_empty());
    }

    #[tokio::test]
    async fn a_name_is_resolved_once_and_its_verdict_reused() {
        let guard = HostGuard::new(None, Reach::Internal);
        assert!(guard.check(&url("http://localhost:9/mcp")).await.is_ok());
        assert!(guard.verdicts().contains_key("localhost"));
        // A clone (another request of the same server) sees the verdict.
        let clone = guard.clone();
        clone.verdicts().insert(
            "localhost".into(),
            (Instant::now(), Some(ip("169.254.1.1"))),
        );
        assert!(matches!(
            guard.check(&url("http://localhost:9/mcp")).await,
            Err(HostRefusal::Metadata { .. })
        ));
        // An expired verdict is looked up again.
        let old = Instant::now()
            .checked_sub(VERDICT_TTL * 2)
            .expect("the monotonic clock has run for a minute");
        guard
            .verdicts()
            .insert("localhost".into(), (old, Some(ip("169.254.1.1"))));
        assert!(guard.check(&url("http://localhost:9/mcp")).await.is_ok());
    }

    #[test]
    fn refusal_messages_name_the_server_and_host() {
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
