//! Upstreams that need an OAuth 2.1 login (`[upstreams.NAME.oauth]`): one
//! [`OAuthClient`] each, made from the config ([`client`]), its grant
//! restored from the store and every change of grant written back (a login,
//! a refresh, a refused grant), and handed to the connector as that
//! upstream's own credential (`ConnectOptions::with_server_auth`).
//!
//! A person logs in with `portcullis auth login NAME` (another process);
//! `serve` notices the new grant in the store within [`WATCH_EVERY`] and
//! uses it, and notices an `auth logout` the same way. While it serves it
//! also refreshes each grant when it falls due, not only when a call needs
//! it, so a long idle spell does not let a refresh token lapse unused.
//!
//! An upstream without a usable grant *needs a login*: `/healthz`, `check`
//! and one log line say so (naming the command to run), apart from the
//! upstreams that are down; the other upstreams keep serving.
//!
//! Tokens never leave this module but to the upstream itself and,
//! encrypted, to the store: no log line, error or status here carries one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use portcullis_upstream::ConnectOptions;
use portcullis_upstream::oauth::{
    AssertionGrant, AssertionSource, AuthStatus, ClientKey, EnterpriseIdp, Grant, IdpEndpoint,
    OAuthClient, OAuthError, OAuthSettings,
};
use tokio::sync::mpsc;

use crate::config::{Config, Upstream, UpstreamGrant, UpstreamOAuth, UpstreamTransport};

/// The path of the loopback redirect (`http://127.0.0.1:PORT/callback`).
pub const REDIRECT_PATH: &str = "/callback";

/// How often `serve` looks at each upstream's login: a grant written by
/// `auth login` (or forgotten by `auth logout`) in the store, a refresh
/// that fell due, a step-up a call was refused for.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// How long `serve` waits before running a failed unattended grant again
/// with the same assertion (a changed assertion file is tried at once):
/// an identity provider that refused it is not asked every few seconds.
pub const UNATTENDED_RETRY: Duration = Duration::from_secs(60);

/// How long after renewing a grant because the upstream refused its token
/// (`401`) `serve` waits before doing so again: a server that refuses
/// every token, however fresh, gets one renewal, not one per watch while
/// calls keep failing (its authorization server and identity provider are
/// not hammered).
pub const CHALLENGE_RENEW_PAUSE: Duration = Duration::from_secs(60);

/// The `client_name` the gateway registers under.
pub const CLIENT_NAME: &str = "Portcullis";

/// The redirect URI of a login on `port`.
pub fn redirect_uri(port: u16) -> String {
    format!("http://127.0.0.1:{port}{REDIRECT_PATH}")
}

/// The command a person runs to log in to `upstream`.
pub fn login_command(upstream: &str) -> String {
    format!("portcullis auth login {upstream}")
}

/// Where grants are kept between runs (encrypted: they hold tokens). A
/// grant that cannot be read (another key, tampered with) is an `Err`: the
/// upstream then needs a login; it is never fatal.
pub trait GrantKeeper: Send + Sync + 'static {
    /// The grant kept for `upstream`, if any.
    fn load<'a>(&'a self, upstream: &'a str) -> BoxFuture<'a, Result<Option<Grant>, String>>;
    /// Keeps `grant` as `upstream`'s.
    fn save<'a>(&'a self, upstream: &'a str, grant: &'a Grant)
    -> BoxFuture<'a, Result<(), String>>;
    /// Forgets `upstream`'s grant; whether there was one.
    fn forget<'a>(&'a self, upstream: &'a str) -> BoxFuture<'a, Result<bool, String>>;
}

/// Where `config`'s gateway keeps grants: its store, sealed under the key
/// in `data_dir` ([`crate::grants::Grants`]). `None` when no upstream logs
/// in (nothing is opened or created then).
pub fn keeper(
    config: &Config,
    store: &Arc<dyn portcullis_store::Store>,
) -> anyhow::Result<Option<Arc<dyn GrantKeeper>>> {
    if !config.upstreams.values().any(|u| u.oauth.is_some()) {
        return Ok(None);
    }
    let grants = crate::grants::Grants::open(&config.gateway.data_dir, store.clone())?;
    Ok(Some(Arc::new(grants)))
}

impl GrantKeeper for crate::grants::Grants {
    fn load<'a>(&'a self, upstream: &'a str) -> BoxFuture<'a, Result<Option<Grant>, String>> {
        Box::pin(async move {
            crate::grants::Grants::load(self, upstream)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn save<'a>(
        &'a self,
        upstream: &'a str,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            crate::grants::Grants::save(self, upstream, grant)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn forget<'a>(&'a self, upstream: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            crate::grants::Grants::forget(self, upstream)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// The [`OAuthSettings`] of `upstream` (which has an `oauth` table), with
/// `redirect_uri` as its redirect.
/// Fails when `client_key_file` cannot be read or holds no usable key.
pub fn settings(oauth: &UpstreamOAuth, redirect_uri: String) -> Result<OAuthSettings, ClientError> {
    let client_key = match &oauth.client_key_file {
        None => None,
        Some(file) => {
            let unusable = |reason: String| ClientError::ClientKey {
                file: file.clone(),
                reason,
            };
            // A key file is small; anything bigger is not one.
            let pem = portcullis_sources::files::read_regular_to_string(file, 64 * 1024)
                .map_err(|e| unusable(e.to_string()))?;
            Some(
                ClientKey::from_pem(&pem, &oauth.client_key_algorithm)
                    .map_err(|e| unusable(e.to_string()))?,
            )
        }
    };
    Ok(OAuthSettings {
        client_name: CLIENT_NAME.to_owned(),
        redirect_uri,
        client_id: oauth.client_id.clone(),
        client_secret: oauth.client_secret.as_ref().map(|s| s.expose().to_owned()),
        issuer: oauth.issuer.clone(),
        client_metadata_url: oauth.client_metadata_url.clone(),
        scopes: oauth.scopes.clone(),
        client_key,
        dpop: oauth.dpop,
        assertion_grant: assertion_grant(&oauth.grant),
        // The upstream's own `timeout_ms`, set by `client`.
        timeout: None,
    })
}

/// The unattended grant of an upstream, if it has one: its files are read
/// afresh each time the grant runs, not here.
fn assertion_grant(grant: &UpstreamGrant) -> Option<AssertionGrant> {
    match grant {
        UpstreamGrant::Login => None,
        UpstreamGrant::Workload { assertion_file } => Some(AssertionGrant::Workload {
            assertion: AssertionSource::File(assertion_file.clone()),
        }),
        UpstreamGrant::Enterprise {
            id_token_file,
            idp_issuer,
            idp_token_endpoint,
            idp_client_id,
            idp_client_secret,
        } => {
            let endpoint = match (idp_issuer, idp_token_endpoint) {
                (_, Some(endpoint)) => IdpEndpoint::TokenEndpoint(endpoint.clone()),
                (Some(issuer), None) => IdpEndpoint::Issuer(issuer.clone()),
                // The config refuses this; a grant that cannot run is none.
                (None, None) => return None,
            };
            Some(AssertionGrant::Enterprise(EnterpriseIdp {
                endpoint,
                client_id: idp_client_id.clone(),
                client_secret: idp_client_secret.as_ref().map(|s| s.expose().to_owned()),
                id_token: AssertionSource::File(id_token_file.clone()),
            }))
        }
    }
}

/// The hosts `upstream`'s OAuth requests may reach: the same allow-list as
/// the upstream itself (its `allowed_hosts` plus its own host), or `None`
/// (any, within the SSRF guard's rules) when it has none.
pub fn allowed_hosts(upstream: &Upstream) -> Option<Vec<String>> {
    let (Some(hosts), UpstreamTransport::Remote { url, .. }) =
        (&upstream.allowed_hosts, &upstream.transport)
    else {
        return None;
    };
    let own = portcullis_upstream::config::check_remote_url(url.expose())
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned));
    Some(hosts.iter().cloned().chain(own).collect())
}

/// Why an upstream has no OAuth client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The upstream has no `[upstreams.NAME.oauth]` table (or is stdio).
    #[error("upstream \"{0}\" does not log in with OAuth: it has no [upstreams.{0}.oauth] table")]
    NotOAuth(String),
    /// The client could not be made (its URL, its HTTP client).
    #[error(transparent)]
    OAuth(#[from] OAuthError),
    /// `client_key_file` cannot be read or holds no usable key.
    #[error("the OAuth client key {}: {reason}", file.display())]
    ClientKey {
        /// The file.
        file: std::path::PathBuf,
        /// Why, without the key.
        reason: String,
    },
}

/// The OAuth client of `upstream` (which must have an `oauth` table), with
/// `redirect_uri` as its redirect, its requests held to the upstream's own
/// allow-list. Nothing restored: see [`OAuthUpstreams`] for that.
pub async fn client(upstream: &Upstream, redirect_uri: String) -> Result<OAuthClient, ClientError> {
    let (Some(oauth), UpstreamTransport::Remote { url, .. }) =
        (&upstream.oauth, &upstream.transport)
    else {
        return Err(ClientError::NotOAuth(upstream.name.clone()));
    };
    let mut settings = settings(oauth, redirect_uri)?;
    // Its OAuth requests (authorization server, identity provider) are
    // held to the upstream's own `timeout_ms`.
    settings.timeout = Some(grant_timeout(upstream));
    Ok(OAuthClient::new(
        &upstream.name,
        url.expose(),
        allowed_hosts(upstream),
        settings,
    )
    .await?)
}

/// How long one OAuth request of `upstream` may take, and an unattended
/// grant as a whole: its `timeout_ms`, else the library's default.
fn grant_timeout(upstream: &Upstream) -> Duration {
    upstream.timeout_ms.map_or(
        portcullis_upstream::oauth::DEFAULT_TIMEOUT,
        Duration::from_millis,
    )
}

/// Every OAuth upstream of a config, each with its client. Cheap to clone
/// (shared).
#[derive(Clone, Default)]
pub struct OAuthUpstreams {
    entries: Arc<BTreeMap<String, Arc<Entry>>>,
    keeper: Option<Arc<dyn GrantKeeper>>,
    watch: bool,
}

impl std::fmt::Debug for OAuthUpstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

/// One OAuth upstream.
struct Entry {
    name: String,
    /// What the client was made from: a reload that changes neither keeps
    /// the client (and its grant).
    made_from: String,
    client: OAuthClient,
    keeper: Option<Arc<dyn GrantKeeper>>,
    /// No usable grant (never logged in, refused, unreadable); kept
    /// current by the grant listener.
    needs_login: Arc<AtomicBool>,
    /// Whether the "needs a login" line was logged for the current spell.
    announced: AtomicBool,
    /// The access tokens this process obtained or restored lately: a grant
    /// in the store carrying another one was written by someone else
    /// (`auth login`).
    ours: Arc<Mutex<VecDeque<String>>>,
    /// The access token last known to be in the store: when the store has
    /// none any more, someone forgot it (`auth logout`).
    persisted: Arc<Mutex<Option<String>>>,
    /// Whether an unreadable stored grant was reported already.
    unreadable_reported: AtomicBool,
    /// The writer task's queue (for [`OAuthUpstreams::flush`]).
    writer: Mutex<Option<mpsc::UnboundedSender<Write>>>,
    /// The last run of an unattended grant that failed.
    failed: Mutex<Option<Failed>>,
    /// How long a run of the unattended grant may take as a whole (the
    /// upstream's `timeout_ms`): `serve` waits on the first at start.
    deadline: Duration,
    /// When the grant was last renewed because the upstream answered `401`
    /// ([`CHALLENGE_RENEW_PAUSE`]).
    challenge_renewed: Mutex<Option<std::time::Instant>>,
}

/// A failed run of an unattended grant.
struct Failed {
    at: std::time::Instant,
    /// A digest of the assertion it ran with (never the assertion).
    fingerprint: Option<String>,
    /// Why (no secret in it).
    reason: String,
}

/// What the writer task of an entry is handed.
enum Write {
    /// A change of grant (`None`: forget it).
    Change(Option<Box<Grant>>),
    /// Answer once every change before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// How many of its own recent access tokens an entry remembers.
const OURS: usize = 8;

fn remember(ours: &Mutex<VecDeque<String>>, token: &str) {
    let mut ours = ours.lock().unwrap_or_else(PoisonError::into_inner);
    if !ours.iter().any(|t| t == token) {
        if ours.len() == OURS {
            ours.pop_front();
        }
        ours.push_back(token.to_owned());
    }
}

impl OAuthUpstreams {
    /// The clients of `config`'s OAuth upstreams, each grant restored from
    /// `keeper` and every change written back to it. With `watch` (for
    /// `serve`) each is also watched every [`WATCH_EVERY`] (see the module
    /// doc). `previous`: the clients of the config before a reload, kept
    /// for the upstreams whose URL and OAuth table did not change.
    pub async fn open(
        config: &Config,
        keeper: Option<Arc<dyn GrantKeeper>>,
        watch: bool,
        previous: Option<&OAuthUpstreams>,
    ) -> Result<OAuthUpstreams, ClientError> {
        let mut entries = BTreeMap::new();
        let mut opened = Vec::new();
        for upstream in config.upstreams.values() {
            let Some(oauth) = &upstream.oauth else {
                continue;
            };
            let made_from = made_from(upstream, oauth);
            if let Some(kept) = previous
                .and_then(|p| p.entries.get(&upstream.name))
                .filter(|e| e.made_from == made_from)
            {
                entries.insert(upstream.name.clone(), kept.clone());
                continue;
            }
            let client = client(upstream, redirect_uri(oauth.redirect_port)).await?;
            let entry = Arc::new(Entry {
                name: upstream.name.clone(),
                made_from,
                client,
                keeper: keeper.clone(),
                needs_login: Arc::new(AtomicBool::new(true)),
                announced: AtomicBool::new(false),
                ours: Arc::default(),
                persisted: Arc::default(),
                unreadable_reported: AtomicBool::new(false),
                writer: Mutex::new(None),
                failed: Mutex::new(None),
                deadline: grant_timeout(upstream),
                challenge_renewed: Mutex::new(None),
            });
            entry.restore().await;
            entry.listen();
            opened.push(entry);
        }
        // The unattended grants run together: a provider that never
        // answers costs the start its own timeout, not one per upstream.
        futures::future::join_all(opened.iter().map(|entry| entry.unattended())).await;
        for entry in opened {
            // At start the command says it (`missing upstream NAME: needs
            // a login: run …`, through `Gateway::missing`); the watcher
            // says it again only when it changes.
            entry.update(false).await;
            entry
                .announced
                .store(entry.needs_login.load(Ordering::Acquire), Ordering::Release);
            if watch {
                tokio::spawn(watch_entry(Arc::downgrade(&entry)));
            }
            entries.insert(entry.name.clone(), entry);
        }
        Ok(OAuthUpstreams {
            entries: Arc::new(entries),
            keeper,
            watch,
        })
    }

    /// The clients of `config` after a reload: those whose upstream's URL
    /// and OAuth table did not change are kept, with their grants.
    pub async fn reopen(&self, config: &Config) -> Result<OAuthUpstreams, ClientError> {
        OAuthUpstreams::open(config, self.keeper.clone(), self.watch, Some(self)).await
    }

    /// `options` with each client as its upstream's own credential.
    pub fn apply(&self, mut options: ConnectOptions) -> ConnectOptions {
        for (name, entry) in self.entries.iter() {
            options = options.with_server_auth(name.clone(), entry.client.clone());
        }
        options
    }

    /// The client of upstream `name`, if it logs in with OAuth.
    pub fn client(&self, name: &str) -> Option<&OAuthClient> {
        self.entries.get(name).map(|e| &e.client)
    }

    /// Why upstream `name`'s unattended grant last failed, if it has one
    /// and it failed (no secret in it).
    pub fn unattended_failure(&self, name: &str) -> Option<String> {
        let entry = self.entries.get(name)?;
        entry.client.unattended()?;
        entry
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|f| f.reason.clone())
    }

    /// Whether upstream `name` needs a login (as last seen).
    pub fn needs_login(&self, name: &str) -> bool {
        self.entries
            .get(name)
            .is_some_and(|e| e.needs_login.load(Ordering::Acquire))
    }

    /// The OAuth upstreams that need a login now, by name (their status
    /// asked afresh).
    pub async fn needing_login(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (name, entry) in self.entries.iter() {
            if !matches!(entry.client.status().await, AuthStatus::LoggedIn { .. }) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Resolves once every change of grant so far is stored (or failed and
    /// was logged): before the process exits, so a refreshed token — and
    /// a refresh token the server rotated — is not lost.
    pub async fn flush(&self) {
        for entry in self.entries.values() {
            let writer = entry
                .writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(writer) = writer {
                let (done, written) = tokio::sync::oneshot::channel();
                if writer.send(Write::Flush(done)).is_ok() {
                    let _ = written.await;
                }
            }
        }
    }

    /// What to tell a person about the calls refused for want of scope
    /// since last asked: one sentence per upstream, naming the command
    /// that grants it. Takes the challenges (each is told once).
    pub fn step_up_hints(&self) -> Vec<String> {
        self.entries
            .values()
            .filter_map(|e| e.step_up_hint())
            .collect()
    }
}

/// The parts of an upstream its client is made from (the secret included,
/// never shown: this string is only compared).
fn made_from(upstream: &Upstream, oauth: &UpstreamOAuth) -> String {
    let url = match &upstream.transport {
        UpstreamTransport::Remote { url, .. } => url.expose(),
        UpstreamTransport::Stdio { .. } => "",
    };
    let grant = match &oauth.grant {
        UpstreamGrant::Enterprise {
            idp_client_secret: Some(secret),
            ..
        } => format!("{:?}\n{}", oauth.grant, secret.expose()),
        other => format!("{other:?}"),
    };
    format!(
        "{url}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{}\n{grant}",
        upstream.timeout_ms,
        oauth.client_id,
        oauth.client_secret.as_ref().map(|s| s.expose()),
        oauth.issuer,
        oauth.client_metadata_url,
        oauth.scopes,
        upstream.allowed_hosts,
        oauth.redirect_port
    )
}

impl Entry {
    /// Restores the kept grant, if there is one that opens.
    async fn restore(&self) {
        let Some(keeper) = &self.keeper else { return };
        match keeper.load(&self.name).await {
            Ok(Some(grant)) => {
                remember(&self.ours, &grant.access_token);
                *self
                    .persisted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(grant.access_token.clone());
                self.client.restore(grant).await;
            }
            Ok(None) => {}
            Err(reason) => self.report_unreadable(&reason),
        }
    }

    fn report_unreadable(&self, reason: &str) {
        if !self.unreadable_reported.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                upstream = %self.name,
                "upstream \"{}\" needs a login: {reason}",
                self.name
            );
        }
    }

    /// Writes every change of grant to the keeper, in order, from one task.
    fn listen(&self) {
        let Some(keeper) = self.keeper.clone() else {
            let needs_login = self.needs_login.clone();
            self.client.on_grant(Arc::new(move |_, grant| {
                needs_login.store(grant.is_none(), Ordering::Release);
            }));
            return;
        };
        let (sender, mut changes) = mpsc::unbounded_channel::<Write>();
        *self.writer.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender.clone());
        let name = self.name.clone();
        let persisted = self.persisted.clone();
        let mine = self.ours.clone();
        // Ends when the client (which holds the listener, and so the
        // sender) is gone.
        tokio::spawn(async move {
            while let Some(write) = changes.recv().await {
                let change = match write {
                    Write::Change(change) => change,
                    Write::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                let outcome = match &change {
                    Some(grant) => keeper.save(&name, grant).await,
                    None => {
                        // Our grant was refused; but if another process
                        // (`auth login`, or a command that refreshed and
                        // rotated the refresh token) stored a newer one,
                        // that one is kept (and taken up by the watcher).
                        let theirs = match keeper.load(&name).await {
                            Ok(Some(stored)) => !mine
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .contains(&stored.access_token),
                            _ => false,
                        };
                        if theirs {
                            continue;
                        }
                        keeper.forget(&name).await.map(|_| ())
                    }
                };
                match outcome {
                    Ok(()) => {
                        *persisted.lock().unwrap_or_else(PoisonError::into_inner) =
                            change.map(|g| g.access_token.clone());
                    }
                    Err(reason) => tracing::warn!(
                        upstream = %name,
                        "the login of upstream \"{name}\" could not be stored: {reason}"
                    ),
                }
            }
        });
        let ours = self.ours.clone();
        let needs_login = self.needs_login.clone();
        self.client.on_grant(Arc::new(move |_, grant| {
            needs_login.store(grant.is_none(), Ordering::Release);
            if let Some(grant) = grant {
                remember(&ours, &grant.access_token);
            }
            let _ = sender.send(Write::Change(grant.cloned().map(Box::new)));
        }));
    }

    /// Takes up a grant another process stored (`auth login`), or drops
    /// ours when another forgot it (`auth logout`).
    async fn pick_up(&self) {
        let Some(keeper) = &self.keeper else { return };
        let stored = match keeper.load(&self.name).await {
            Ok(stored) => stored,
            Err(reason) => {
                self.report_unreadable(&reason);
                return;
            }
        };
        self.unreadable_reported.store(false, Ordering::Release);
        let current = self.client.grant().await.map(|g| g.access_token);
        match stored {
            Some(grant) => {
                let ours = self
                    .ours
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .any(|t| *t == grant.access_token);
                if current.as_deref() != Some(grant.access_token.as_str()) && !ours {
                    remember(&self.ours, &grant.access_token);
                    *self
                        .persisted
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(grant.access_token.clone());
                    self.client.restore(grant).await;
                    tracing::info!(
                        upstream = %self.name,
                        "upstream \"{}\": using the login stored by `{}`",
                        self.name,
                        login_command(&self.name)
                    );
                }
            }
            None => {
                let persisted = self
                    .persisted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                if current.is_some() && current == persisted {
                    *self
                        .persisted
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = None;
                    self.client.logout().await;
                    tracing::info!(
                        upstream = %self.name,
                        "upstream \"{}\": its stored login was forgotten (`portcullis auth logout`); no longer using it",
                        self.name
                    );
                }
            }
        }
    }

    /// Refreshes the grant when it falls due, whether or not a call needs
    /// it (a refused refresh makes the upstream need a login).
    async fn keep_fresh(&self) {
        if self.client.grant().await.is_some_and(|g| g.expiring()) {
            // The outcome is in the client's status; the listener stores
            // the new grant (or forgets the refused one).
            let _ = self.client.access_token().await;
        }
    }

    /// Runs the unattended grant when there is no usable grant: at start,
    /// and from the watcher after a failure — at once when the assertion
    /// file changed since, else after [`UNATTENDED_RETRY`]. A failure is
    /// logged when its reason changes.
    async fn unattended(&self) {
        let Some(grant) = self.client.unattended() else {
            return;
        };
        if matches!(self.client.status().await, AuthStatus::LoggedIn { .. }) {
            return;
        }
        let fingerprint = grant.source().fingerprint().await;
        let refusal = self.client.refusal().await;
        let last_reason = {
            let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
            if failed.is_none()
                && let Some(reason) = refusal
            {
                // Refused on renewal just now: that counts as this run. Which
                // assertion it read is not known (the file may have been
                // replaced since), so the next look runs it once more.
                *failed = Some(Failed {
                    at: std::time::Instant::now(),
                    fingerprint: None,
                    reason: crate::redact::text(&reason).into_owned(),
                });
                return;
            }
            match &*failed {
                Some(f) if f.fingerprint == fingerprint && f.at.elapsed() < UNATTENDED_RETRY => {
                    return;
                }
                Some(f) => Some(f.reason.clone()),
                None => None,
            }
        };
        // Each request is bounded already; the whole run is too, so that a
        // slow identity provider delays `serve`'s start (and the watcher)
        // by at most the upstream's timeout, not once per request.
        let outcome = match tokio::time::timeout(self.deadline, self.client.obtain()).await {
            Ok(outcome) => outcome.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "it did not complete within {} ms (timeout_ms)",
                self.deadline.as_millis()
            )),
        };
        match outcome {
            Ok(()) => {
                *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = None;
                tracing::info!(
                    upstream = %self.name,
                    "upstream \"{}\": obtained its {} grant",
                    self.name,
                    grant.describe()
                );
            }
            Err(e) => {
                let reason = crate::redact::text(&e).into_owned();
                if last_reason.as_deref() != Some(reason.as_str()) {
                    tracing::warn!(
                        upstream = %self.name,
                        "upstream \"{}\" needs a login: its {} grant failed: {reason} (tried again when the assertion file changes, or every {} s)",
                        self.name,
                        grant.describe(),
                        UNATTENDED_RETRY.as_secs()
                    );
                }
                *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Failed {
                    at: std::time::Instant::now(),
                    fingerprint,
                    reason,
                });
            }
        }
    }

    /// Sets `needs_login` from the client's status; with `log`, says so
    /// once per spell.
    async fn update(&self, log: bool) {
        let needs = !matches!(self.client.status().await, AuthStatus::LoggedIn { .. });
        self.needs_login.store(needs, Ordering::Release);
        if !log {
            return;
        }
        if needs && self.client.unattended().is_some() {
            // Its failures are logged with their reason as they happen.
            self.announced.store(true, Ordering::Release);
        } else if needs && !self.announced.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                upstream = %self.name,
                "upstream \"{}\" needs a login: run `{}` (its tools are unavailable until then; the other upstreams are served)",
                self.name,
                login_command(&self.name)
            );
        } else if !needs && self.announced.swap(false, Ordering::AcqRel) {
            tracing::info!(upstream = %self.name, "upstream \"{}\" is logged in", self.name);
        }
    }

    /// The sentence for a call refused with `403 insufficient_scope`, if
    /// that was the last challenge (taken).
    fn step_up_hint(&self) -> Option<String> {
        let (status, challenge) = self.client.take_challenge()?;
        (status == 403).then(|| self.hint(&challenge)).flatten()
    }

    /// Acts on the last challenge (taken): a `401` while a grant is held
    /// (the token was revoked, or expired early) refreshes it now, so a
    /// refused grant is known at once — at most once per
    /// [`CHALLENGE_RENEW_PAUSE`]; a `403 insufficient_scope` gives
    /// the step-up sentence.
    async fn answer_challenge(&self) -> Option<String> {
        let (status, challenge) = self.client.take_challenge()?;
        match status {
            401 if self.client.grant().await.is_some() => {
                {
                    let mut renewed = self
                        .challenge_renewed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if renewed.is_some_and(|at| at.elapsed() < CHALLENGE_RENEW_PAUSE) {
                        return None;
                    }
                    *renewed = Some(std::time::Instant::now());
                }
                // The outcome is in the client's status (see keep_fresh).
                let _ = self.client.refresh().await;
                None
            }
            403 => self.hint(&challenge),
            _ => None,
        }
    }

    fn hint(&self, challenge: &portcullis_upstream::oauth::Challenge) -> Option<String> {
        if !challenge.insufficient_scope() || challenge.scopes.is_empty() {
            return None;
        }
        let flags: Vec<String> = challenge
            .scopes
            .iter()
            .map(|s| format!("--scope {}", shell_word(s)))
            .collect();
        Some(format!(
            "upstream \"{}\" refused a call for want of scope ({}): run `{} {}` to grant it",
            self.name,
            portcullis_catalog::redact::visible(&challenge.scopes.join(" ")),
            login_command(&self.name),
            flags.join(" ")
        ))
    }
}

/// `word` as a POSIX shell reads it back whole: bare when it holds only
/// characters no shell treats specially, else single-quoted. The server
/// names the scopes, and a person pastes the command: `;`, `$(…)` or a
/// backtick in a "scope" must not run anything. Control characters are
/// escaped as well (no terminal escape reaches the log).
fn shell_word(word: &str) -> String {
    let word = portcullis_catalog::redact::visible(word);
    let plain = |c: char| c.is_ascii_alphanumeric() || ":._/@%+=,-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.into_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

async fn watch_entry(entry: Weak<Entry>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(entry) = entry.upgrade() else { return };
        entry.pick_up().await;
        entry.keep_fresh().await;
        if let Some(hint) = entry.answer_challenge().await {
            tracing::warn!(upstream = %entry.name, "{hint}");
        }
        entry.unattended().await;
        entry.update(true).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_upstream::oauth::{RegisteredClient, TokenAuth};

    #[test]
    fn a_scope_in_a_hint_is_one_shell_word() {
        assert_eq!(shell_word("notes:write"), "notes:write");
        assert_eq!(shell_word("a;rm -rf ~"), "'a;rm -rf ~'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("$(x)`y`"), "'$(x)`y`'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn a_client_key_file_is_read_into_the_settings_and_a_bad_one_is_refused_without_its_text() {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        use base64::Engine as _;
        let dir = tempfile::TempDir::new().unwrap();
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let body = base64::engine::general_purpose::STANDARD.encode(pair.to_pkcs8v1().unwrap());
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n");
        let key = dir.path().join("client.pem");
        std::fs::write(&key, &pem).unwrap();
        let mut oauth = UpstreamOAuth {
            client_id: Some("gateway".into()),
            client_secret: None,
            issuer: None,
            client_metadata_url: None,
            scopes: Vec::new(),
            redirect_port: 0,
            client_key_file: Some(key.clone()),
            client_key_algorithm: "ES256".into(),
            dpop: None,
            grant: UpstreamGrant::Login,
        };
        let made = settings(&oauth, "http://127.0.0.1:1/callback".into()).unwrap();
        assert!(made.client_key.is_some());
        assert!(!format!("{made:?}").contains(&body[..40]));

        // The wrong algorithm for the key, and a file that is not a key.
        oauth.client_key_algorithm = "RS256".into();
        let err = settings(&oauth, String::new()).unwrap_err().to_string();
        assert!(err.contains("client.pem"), "{err}");
        assert!(!err.contains(&body[..40]), "{err}");
        std::fs::write(&key, "not a key").unwrap();
        oauth.client_key_algorithm = "ES256".into();
        assert!(matches!(
            settings(&oauth, String::new()),
            Err(ClientError::ClientKey { .. })
        ));
    }

    /// A grant due for a refresh it cannot get (no refresh token): the
    /// first use refuses it.
    fn grant(token: &str) -> Grant {
        Grant {
            issuer: "http://127.0.0.1:9".into(),
            resource: "http://127.0.0.1:9/mcp".into(),
            token_endpoint: "http://127.0.0.1:9/token".into(),
            client: RegisteredClient {
                issuer: "http://127.0.0.1:9".into(),
                client_id: "c".into(),
                client_secret: None,
                auth: TokenAuth::None,
            },
            access_token: token.into(),
            refresh_token: None,
            expires_at: Some(0),
            refresh_at: Some(0),
            scopes: Vec::new(),
            client_credentials: false,
            dpop_key: None,
        }
    }

    #[tokio::test]
    async fn a_refused_grant_is_forgotten_but_never_a_newer_one_another_process_stored() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[gateway]\nstore = \"memory\"\ndata_dir = {}\n\n[upstreams.docs]\ntype = \"streamable-http\"\nurl = \"http://127.0.0.1:9/mcp\"\n\n[upstreams.docs.oauth]\n",
            serde_json::Value::from(dir.path().to_string_lossy().into_owned())
        );
        let config =
            crate::config::parse(&dir.path().join("portcullis.toml"), &text, &|_| None).unwrap();
        let store = crate::trust::open_store(&config).await.unwrap();
        let grants = crate::grants::Grants::open(&config.gateway.data_dir, store).unwrap();
        let keeper: Arc<dyn GrantKeeper> = Arc::new(grants.clone());

        // Alone: the refused grant is forgotten in the store.
        grants.save("docs", &grant("ours-1")).await.unwrap();
        let oauth = OAuthUpstreams::open(&config, Some(keeper.clone()), false, None)
            .await
            .unwrap();
        assert!(!oauth.needs_login("docs"));
        let client = oauth.client("docs").unwrap();
        assert!(client.access_token().await.is_err());
        oauth.flush().await;
        assert!(oauth.needs_login("docs"));
        assert!(grants.load("docs").await.unwrap().is_none());

        // Another process (`auth login`) stored a new grant meanwhile: it is
        // kept, for the watcher to take up.
        grants.save("docs", &grant("ours-2")).await.unwrap();
        let oauth = OAuthUpstreams::open(&config, Some(keeper), false, None)
            .await
            .unwrap();
        grants.save("docs", &grant("theirs")).await.unwrap();
        assert!(oauth.client("docs").unwrap().access_token().await.is_err());
        oauth.flush().await;
        let kept = grants.load("docs").await.unwrap().map(|g| g.access_token);
        assert_eq!(kept.as_deref(), Some("theirs"));
    }
}
