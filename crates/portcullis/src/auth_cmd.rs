//! `portcullis auth login|status|logout`: the person's side of the OAuth
//! login to an upstream that needs one (`[upstreams.NAME.oauth]`).
//!
//! `login` listens on the loopback redirect (`redirect_port`), shows the
//! authorization URL (opening a browser unless `--no-browser`), takes the
//! browser's redirect back, redeems the code and stores the grant,
//! encrypted, where `serve` finds it. `status` reads the stored grants and
//! contacts nobody. `logout` forgets a stored grant (the authorization
//! server is not told: the client has no revocation). No token, secret or
//! code is ever printed. An upstream with an unattended grant (workload
//! identity, enterprise-managed) needs no browser: `login` runs the grant
//! once and stores it, as `serve` would.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use portcullis_gateway::oauth::{self, GrantKeeper};
use portcullis_upstream::oauth::{
    Challenge, Grant, LoopbackRedirect, OAuthClient, OAuthError, UserAgent,
};
use serde::Serialize;

use crate::Exit;
use crate::cli::{AuthCommand, AuthLoginArgs, AuthStatusArgs};
use crate::config::{Config, StoreChoice, Upstream};

/// Runs one `auth` subcommand.
pub async fn auth(config: &Config, command: &AuthCommand) -> anyhow::Result<Exit> {
    if matches!(config.gateway.store, StoreChoice::Memory) {
        errln!(
            "error: [gateway] store = \"memory\" keeps nothing between runs: a login made here could not be used by `serve`; use store = \"sqlite\" (the default) or \"postgres\""
        );
        return Ok(Exit::Usage);
    }
    let named = match command {
        AuthCommand::Login(a) => Some(a.upstream.as_str()),
        AuthCommand::Logout(a) => Some(a.upstream.as_str()),
        AuthCommand::Status(a) => a.upstream.as_deref(),
    };
    if let Some(name) = named
        && let Err(message) = oauth_upstream(config, name)
    {
        errln!("error: {message}");
        return Ok(Exit::Usage);
    }
    let Some(keeper) = open_keeper(config).await? else {
        // No upstream logs in: only `status` without a name gets here.
        outln!("no upstream logs in with OAuth (none has an [upstreams.NAME.oauth] table)");
        return Ok(Exit::Success);
    };
    match command {
        AuthCommand::Login(a) => login(config, keeper.as_ref(), a).await,
        AuthCommand::Status(a) => status(config, keeper.as_ref(), a).await,
        AuthCommand::Logout(a) => {
            let forgot = keeper
                .forget(&a.upstream)
                .await
                .map_err(anyhow::Error::msg)
                .context("cannot forget the stored login")?;
            if forgot {
                outln!(
                    "forgot the stored login of {}; a running `portcullis serve` stops using it within seconds. The grant is not revoked at the authorization server: revoke it there if it may have leaked.",
                    a.upstream
                );
            } else {
                outln!("{} had no stored login", a.upstream);
            }
            Ok(Exit::Success)
        }
    }
}

/// The upstream `name`, if it logs in with OAuth; else why not.
fn oauth_upstream<'c>(config: &'c Config, name: &str) -> Result<&'c Upstream, String> {
    match config.upstreams.get(name) {
        None => Err(format!(
            "no upstream \"{}\" in {} (upstreams: {})",
            name.escape_debug(),
            config.path.display(),
            config
                .upstreams
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Some(u) if u.oauth.is_none() => Err(format!(
            "upstream \"{name}\" does not log in with OAuth: add an [upstreams.{name}.oauth] table (see docs/oauth.md)"
        )),
        Some(u) => Ok(u),
    }
}

/// The grant keeper of the gateway's store (`None`: no upstream logs in).
async fn open_keeper(config: &Config) -> anyhow::Result<Option<Arc<dyn GrantKeeper>>> {
    let store = crate::trust::open_store(config).await?;
    oauth::keeper(config, &store)
}

/// Shows the person the authorization URL: printed always (a browser may
/// not open), and opened in their browser unless `no_browser`.
fn show(upstream: String, no_browser: bool) -> portcullis_upstream::oauth::redirect::Show {
    Arc::new(move |url| {
        errln!("To log in to {upstream}, open this URL in a browser:\n\n  {url}\n");
        if !no_browser && !open_browser(url.as_str()) {
            errln!("(no browser could be opened here: open the URL above yourself)");
        }
    })
}

/// Opens `url` in the person's browser (`open` on macOS, `xdg-open`
/// elsewhere); whether one could be started.
fn open_browser(url: &str) -> bool {
    let program = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

/// `auth login UPSTREAM`.
async fn login(
    config: &Config,
    keeper: &dyn GrantKeeper,
    args: &AuthLoginArgs,
) -> anyhow::Result<Exit> {
    let name = args.upstream.as_str();
    let upstream = oauth_upstream(config, name).map_err(anyhow::Error::msg)?;
    let unattended = upstream.oauth.as_ref().is_some_and(|o| o.unattended());
    let (client, agent): (OAuthClient, Box<dyn UserAgent>) = if unattended {
        // No browser: the grant runs by itself.
        let client = oauth::client(upstream, oauth::redirect_uri(0)).await?;
        let agent = Box::new(client.follow_redirects());
        (client, agent)
    } else {
        let port = upstream.oauth.as_ref().map_or(0, |o| o.redirect_port);
        let redirect = LoopbackRedirect::bind(
            port,
            oauth::REDIRECT_PATH,
            show(name.to_owned(), args.no_browser),
        )
        .await
        .with_context(|| {
            format!(
                "cannot listen on 127.0.0.1:{port} for the login's redirect; free that port, or set [upstreams.{name}.oauth] redirect_port (0: any free port)"
            )
        })?;
        let client = oauth::client(upstream, redirect.redirect_uri().to_owned()).await?;
        (client, Box::new(redirect))
    };
    let redirect = agent.as_ref();
    // The server's own challenge says where to log in and for what scope.
    let challenge = probe(config, upstream, &client).await;
    let stored = match keeper.load(name).await {
        Ok(stored) => stored,
        Err(reason) => {
            errln!("note: the stored login of {name} cannot be read ({reason}); logging in anew");
            None
        }
    };
    let outcome = match stored {
        // A step-up: the scopes of the current login plus those asked for.
        Some(grant) if !args.scopes.is_empty() => {
            client.restore(grant).await;
            let wanted = Challenge {
                error: Some("insufficient_scope".into()),
                scopes: args.scopes.clone(),
                resource_metadata: challenge.as_ref().and_then(|c| c.resource_metadata.clone()),
                dpop: challenge.as_ref().is_some_and(|c| c.dpop),
            };
            match client.step_up(&wanted, redirect).await {
                // Nothing new to ask for: a plain login instead.
                Err(OAuthError::StepUpLimit { .. }) => client.login(Some(&wanted), redirect).await,
                other => other,
            }
        }
        _ => {
            let mut challenge = challenge.unwrap_or_default();
            for scope in &args.scopes {
                if !challenge.scopes.contains(scope) {
                    challenge.scopes.push(scope.clone());
                }
            }
            client.login(Some(&challenge), redirect).await
        }
    };
    if let Err(error) = outcome {
        errln!(
            "error: the login to {name} failed: {}",
            crate::redact::text(&error.to_string())
        );
        return Ok(Exit::ToolError);
    }
    let Some(grant) = client.grant().await else {
        errln!("error: the login to {name} obtained no grant");
        return Ok(Exit::ToolError);
    };
    keeper
        .save(name, &grant)
        .await
        .map_err(anyhow::Error::msg)
        .context("the login worked but could not be stored")?;
    outln!("logged in to {name}: {}", describe(&grant, unattended));
    Ok(Exit::Success)
}

/// Connects to the upstream once, sending no token, for the challenge of
/// its `401` (where its protected-resource metadata is, which scope).
async fn probe(config: &Config, upstream: &Upstream, client: &OAuthClient) -> Option<Challenge> {
    let base = config
        .path
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let server = crate::gateway::server_config(upstream, &base).ok()?;
    let options = crate::gateway::connect_options(config)
        .with_reconnect(portcullis_upstream::Backoff::NEVER)
        .with_server_auth(upstream.name.clone(), client.clone());
    if let Ok(toolset) = portcullis_upstream::connect(vec![server], options).await {
        toolset.close().await;
    }
    client.take_challenge().map(|(_, challenge)| challenge)
}

/// One line about a grant: issuer, scopes, expiry, refreshable (an
/// unattended grant is renewed by running it again). No token.
fn describe(grant: &Grant, unattended: bool) -> String {
    let scopes = if grant.scopes.is_empty() {
        "no scopes".to_owned()
    } else {
        format!("scopes {}", grant.scopes.join(" "))
    };
    let expiry = match grant.expires_at {
        Some(at) => {
            let left = at.saturating_sub(now());
            if left == 0 {
                "access token expired".to_owned()
            } else {
                format!("access token expires in {}", duration(left))
            }
        }
        None => "no expiry given".to_owned(),
    };
    let refresh = if grant.refresh_token.is_some() || grant.client_credentials || unattended {
        "refreshable"
    } else {
        "not refreshable"
    };
    format!("issuer {}; {scopes}; {expiry}; {refresh}", grant.issuer)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `3725` → `1 h 2 min`.
fn duration(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min", seconds / 60),
        3600..86_400 => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{} d {} h", seconds / 86_400, seconds % 86_400 / 3600),
    }
}

/// One upstream's login, as `auth status` shows it (never a token).
#[derive(Debug, Serialize)]
struct StatusRow {
    upstream: String,
    logged_in: bool,
    needs_login: bool,
    issuer: Option<String>,
    /// Seconds since the epoch.
    expires_at: Option<u64>,
    scopes: Vec<String>,
    refreshable: bool,
    /// Why it needs a login.
    reason: Option<String>,
    /// How its grant is obtained: `login` (a person), `workload identity
    /// (jwt-bearer)` or `enterprise-managed (ID-JAG)`.
    grant: &'static str,
}

impl StatusRow {
    fn of(upstream: &Upstream, stored: Result<Option<Grant>, String>) -> StatusRow {
        let oauth = upstream.oauth.as_ref();
        let unattended = oauth.is_some_and(|o| o.unattended());
        let mut row = StatusRow {
            upstream: upstream.name.clone(),
            logged_in: false,
            needs_login: true,
            issuer: None,
            expires_at: None,
            scopes: Vec::new(),
            refreshable: false,
            reason: None,
            grant: oauth.map_or("login", |o| o.grant.describe()),
        };
        match stored {
            Ok(Some(grant)) => {
                // An unattended grant is renewed by running it again.
                row.refreshable =
                    grant.refresh_token.is_some() || grant.client_credentials || unattended;
                let expired = grant.expires_at.is_some_and(|at| at <= now());
                row.logged_in = true;
                row.needs_login = expired && !row.refreshable;
                if row.needs_login {
                    row.reason = Some("the access token expired and cannot be refreshed".into());
                }
                row.issuer = Some(grant.issuer);
                row.expires_at = grant.expires_at;
                row.scopes = grant.scopes;
            }
            Ok(None) => row.reason = Some("not logged in".into()),
            Err(reason) => row.reason = Some(format!("the stored login cannot be read: {reason}")),
        }
        row
    }
}

/// `auth status [UPSTREAM]`.
async fn status(
    config: &Config,
    keeper: &dyn GrantKeeper,
    args: &AuthStatusArgs,
) -> anyhow::Result<Exit> {
    let mut rows = Vec::new();
    for upstream in config.upstreams.values() {
        if upstream.oauth.is_none() || args.upstream.as_deref().is_some_and(|n| n != upstream.name)
        {
            continue;
        }
        rows.push(StatusRow::of(upstream, keeper.load(&upstream.name).await));
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for row in &rows {
            let line = match (&row.issuer, row.needs_login) {
                (Some(issuer), false) => {
                    let expiry = row.expires_at.map_or_else(
                        || "no expiry given".to_owned(),
                        |at| match at.saturating_sub(now()) {
                            0 => "access token expired (refreshed on next use)".to_owned(),
                            left => format!("access token expires in {}", duration(left)),
                        },
                    );
                    format!(
                        "{}: logged in; issuer {issuer}; scopes [{}]; {expiry}; {}; grant: {}",
                        row.upstream,
                        row.scopes.join(" "),
                        if row.refreshable {
                            "refreshable"
                        } else {
                            "not refreshable"
                        },
                        row.grant
                    )
                }
                _ => format!(
                    "{}: needs login ({}): run `{}`; grant: {}",
                    row.upstream,
                    row.reason.as_deref().unwrap_or("not logged in"),
                    oauth::login_command(&row.upstream),
                    row.grant
                ),
            };
            outln!("{}", crate::redact::text(&line));
        }
    }
    Ok(if rows.iter().any(|r| r.needs_login) {
        Exit::ToolError
    } else {
        Exit::Success
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_would_say_them() {
        assert_eq!(duration(59), "59 s");
        assert_eq!(duration(3725), "1 h 2 min");
        assert_eq!(duration(90_000), "1 d 1 h");
    }
}
