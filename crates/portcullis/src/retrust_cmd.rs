//! `portcullis retrust [--yes] SERVER`: accept a server's current
//! definitions as its new trust baseline.
//!
//! The operator accepts what they are shown, nothing else:
//!
//! 1. connect (as `drift` does) and show SERVER's drift;
//! 2. ask on the terminal (`y/N`) unless `--yes`; with neither a terminal nor
//!    `--yes`, refuse before connecting (exit 2);
//! 3. [`portcullis_store::retrust`] clears the baseline (the only sanctioned
//!    way), then the fingerprints **of the listing that was shown** are
//!    proposed as the new one — the tools' fingerprints with the pins of the
//!    prompts, resources and templates shown (each with its text, for the
//!    next `drift`). The store records a proposal only when the
//!    row has no baseline, so if another replica re-recorded one in between,
//!    the one in force is reported instead of silently kept. The row's
//!    cached listing is saved back with it: when it is the listing shown
//!    (the connect in step 1 refreshed it), the store keeps it as the
//!    trusted definitions the next `drift` diffs against (a native plugin's
//!    or app's current tools, which the store does not cache, are saved
//!    with it for the same reason);
//! 4. reconnect, so the new baseline is enforced, and print what was
//!    accepted. A server that changed again since step 1 is caught here:
//!    its new changes are quarantined against the baseline just accepted,
//!    and the command says so and exits 1.
//!
//! SERVER is an upstream, an Agent Plugin's server, a native tool plugin or
//! an app (by name). A server whose baseline predates pinning is re-trusted
//! even without drift when it publishes prompts or resources, so they get
//! pinned.
//!
//! Exit codes: 0 re-trusted (or nothing to re-trust), 1 declined at the
//! prompt or the server changed again, 2 unknown SERVER, configuration
//! error, no terminal without `--yes`, server unreachable.

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use portcullis_catalog::Tool;
use portcullis_catalog::fingerprint::{Fingerprints, fingerprint_listing};
use portcullis_catalog::pins::{self, PinKind, split_baseline};
use portcullis_store::Store;

use crate::Exit;
use crate::config::{Config, StoreChoice};
use crate::diff::Style;
use crate::drift_cmd::{self, ServerDrift};
use crate::gateway::Gateway;

/// `portcullis retrust [--yes] SERVER`.
pub async fn retrust(config: &Config, server: &str, yes: bool) -> anyhow::Result<Exit> {
    if matches!(config.gateway.store, StoreChoice::Memory) {
        errln!(
            "error: {} sets store = \"memory\": baselines last one run, so there is nothing to re-trust",
            config.path.display()
        );
        return Ok(Exit::Usage);
    }
    // Refused before connecting: without a terminal nobody can answer, and a
    // script must say explicitly that it accepts whatever it is shown.
    if !yes && !std::io::stdin().is_terminal() {
        errln!(
            "error: retrust asks for confirmation and stdin is not a terminal; \
             pass --yes to accept server \"{server}\"'s current definitions without asking"
        );
        return Ok(Exit::Usage);
    }
    let style = Style::for_terminal(std::io::stdout().is_terminal());
    let store = crate::trust::open_store(config).await?;

    let shown = match look(config, store.as_ref(), server).await? {
        Ok(shown) => shown,
        Err(message) => {
            errln!("error: {message}; nothing re-trusted");
            return Ok(Exit::Usage);
        }
    };
    let fingerprints = shown.fingerprints.clone();
    if shown.is_clean() && !shown.unpinned {
        outln!(
            "{}: no drift; its baseline already matches what it publishes, nothing to re-trust",
            shown.server
        );
        return Ok(Exit::Success);
    }
    if shown.is_clean() {
        outln!(
            "{}: no drift, but its baseline predates pinning: its prompts and resources are not pinned; re-trusting pins them as listed now",
            shown.server
        );
    } else {
        out!("{}", drift_cmd::render_server(&shown, style));
    }
    if !yes && !confirm(&shown.server).await? {
        outln!(
            "not re-trusted: the baseline of {} is unchanged",
            shown.server
        );
        return Ok(Exit::ToolError);
    }

    let in_force = replace_baseline(
        store.as_ref(),
        &shown.server,
        &fingerprints,
        shown.listing.as_deref(),
    )
    .await?;
    if in_force.as_ref() != Some(&fingerprints) {
        errln!(
            "warning: another gateway recorded a different baseline for {} meanwhile; it is the one in force",
            shown.server
        );
    }

    // Reconnect: the new baseline is enforced from here on.
    out!("{}", accepted(&shown, &fingerprints));
    let after = match look(config, store.as_ref(), server).await? {
        Ok(after) => after,
        Err(message) => {
            errln!(
                "warning: the new baseline is recorded, but the check that it is enforced failed: {message}"
            );
            return Ok(Exit::Usage);
        }
    };
    let kept = store
        .trusted_tools(&shown.server)
        .await
        .context("cannot read the trusted definitions")?
        .is_some();
    if !kept {
        errln!(
            "note: the store did not keep the accepted definitions (its cached listing was not the one shown), \
             so a later drift can show the current definitions only"
        );
    }
    if !after.is_clean() {
        outln!(
            "but {} changed again since it was shown; still held back:",
            after.server
        );
        out!("{}", drift_cmd::render_server(&after, style));
        return Ok(Exit::ToolError);
    }
    Ok(Exit::Success)
}

/// Connects, reports SERVER's drift, closes. `Ok(Err(why))` when SERVER is
/// unknown or could not be reached.
async fn look(
    config: &Config,
    store: &dyn Store,
    server: &str,
) -> anyhow::Result<Result<ServerDrift, String>> {
    let narrow = drift_cmd::narrowed(config, server);
    let gateway = Gateway::start_once(narrow.as_ref().unwrap_or(config)).await?;
    let checked = match drift_cmd::known_server(config, &gateway, server) {
        Ok(()) => Ok(drift_cmd::collect(
            narrow.as_ref().unwrap_or(config),
            &gateway,
            store,
            Some(server),
        )
        .await),
        Err(message) => Err(message),
    };
    gateway.close().await;
    let mut report = match checked {
        Ok(report) => report?,
        Err(message) => return Ok(Err(message)),
    };
    if let Some(drift) = report.servers.pop() {
        return Ok(Ok(drift));
    }
    let reason = report
        .unreachable
        .first()
        .map(|u| u.reason.clone())
        .unwrap_or_else(|| "could not connect".to_owned());
    Ok(Err(format!(
        "cannot check server \"{}\": {}",
        crate::diff::inert(server),
        crate::diff::inert(&reason)
    )))
}

/// Asks on the terminal; only `y` or `yes` (any case) accepts.
async fn confirm(server: &str) -> anyhow::Result<bool> {
    crate::out::stderr(format_args!(
        "Accept these as the new trusted definitions of {server}? [y/N] "
    ));
    let _ = std::io::stderr().flush();
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .context("cannot read the answer")?
    .context("cannot read the answer")?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// Clears the baseline and proposes `fingerprints` (the listing shown) in
/// its place; returns the baseline now in force. `listing`: the current
/// tools when the store does not cache them (a native plugin or app),
/// saved with the baseline so the store keeps them as trusted.
async fn replace_baseline(
    store: &dyn Store,
    id: &str,
    fingerprints: &Fingerprints,
    listing: Option<&[Tool]>,
) -> anyhow::Result<Option<Fingerprints>> {
    let found = portcullis_store::retrust(store, id)
        .await
        .context("cannot clear the baseline")?;
    if !found {
        anyhow::bail!("the store has no row for server \"{id}\"; nothing re-trusted");
    }
    let mut row = store
        .get(id)
        .await
        .context("cannot read the server's row")?
        .with_context(|| format!("the row of server \"{id}\" vanished while re-trusting"))?;
    if let Some(tools) = listing {
        row = row.with_tools(tools.to_vec());
    }
    let tool_part = split_baseline(fingerprints).0;
    let cache_is_shown = row
        .tools
        .as_deref()
        .is_some_and(|tools| fingerprint_listing(tools) == tool_part);
    tracing::debug!(
        server = id,
        cache_is_shown,
        "recording the accepted baseline"
    );
    store
        .save(&row.with_fingerprints(fingerprints.clone()))
        .await
        .context("cannot record the new baseline")
}

/// What was accepted: the new baseline's tools, prompts, resources and
/// templates, with what changed.
fn accepted(shown: &ServerDrift, baseline: &Fingerprints) -> String {
    let mut out = String::new();
    let (tools, pinned) = split_baseline(baseline);
    let mut counts = String::new();
    if let Some(pinned) = &pinned {
        let count = |kind| pins::of_kind(pinned, kind).len();
        let _ = write!(
            counts,
            ", {} prompts, {} resources and {} resource templates pinned",
            count(PinKind::Prompt),
            count(PinKind::Resource),
            count(PinKind::Template)
        );
    }
    let _ = writeln!(
        out,
        "re-trusted {}: {} tools in the new baseline{counts}",
        shown.server,
        tools.len()
    );
    for tool in tools.keys() {
        let why = if shown.quarantined.iter().any(|q| q.tool == *tool) {
            " (changed; accepted)"
        } else if shown.withheld.iter().any(|w| w.tool == *tool) {
            " (new; accepted)"
        } else {
            ""
        };
        let _ = writeln!(out, "  {}{why}", crate::diff::inert(tool));
    }
    for tool in &shown.removed {
        let _ = writeln!(
            out,
            "  {} (no longer published, dropped from the baseline)",
            crate::diff::inert(tool)
        );
    }
    for (kind, drift) in shown.pinned_kinds() {
        let noun = kind.noun();
        for item in &drift.changed {
            let id = crate::diff::inert(&item.id);
            let _ = writeln!(out, "  {noun} {id} (changed; accepted)");
        }
        for id in &drift.added {
            let id = crate::diff::inert(id);
            let _ = writeln!(out, "  {noun} {id} (new; accepted)");
        }
        for id in &drift.removed {
            let id = crate::diff::inert(id);
            let _ = writeln!(
                out,
                "  {noun} {id} (no longer published, dropped from the baseline)"
            );
        }
    }
    out
}
