//! A fresh listing of a known server held to its baseline and put in
//! force, in two steps shared by the reconcile of a wake
//! (`crate::reconcile`) and a reconnect (`crate::supervisor`):
//! [`settle`] (the cache saved, the baseline kept) and [`apply`] (the
//! server's listing and the tool map swapped in). A server's listing is
//! never trusted by coming back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use portcullis_catalog::fingerprint::{Fingerprints, fingerprint_listing};
use portcullis_catalog::{ServerIdentity, Tool};

use crate::connection::Connection;
use crate::toolset::Inner;
use crate::trust::{save, with_live_pins};

/// Whether two listings publish the same definitions, whatever their order.
pub(crate) fn same_listing(a: &[Tool], b: &[Tool]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut a: Vec<&Tool> = a.iter().collect();
    let mut b: Vec<&Tool> = b.iter().collect();
    a.sort_by(|x, y| x.name.cmp(&y.name));
    b.sort_by(|x, y| x.name.cmp(&y.name));
    a == b
}

/// The baseline to enforce on a fresh listing of the source `id` (and
/// whether the store now holds one): the listing is saved as the cache,
/// a baseline is proposed only while none is recorded (the derived one
/// being enforced, else trust on first use), and whatever the store
/// answers is enforced. A store that answers with none (an operator's
/// re-trust meanwhile) leaves the baseline this toolset holds in force
/// until it reconnects. Shared by the reconcile and a reconnect
/// (`crate::supervisor`): a server's listing is never trusted by coming
/// back.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn settle(
    inner: &Inner,
    id: &str,
    identity: &ServerIdentity,
    name: &str,
    recorded: bool,
    baseline: Option<Fingerprints>,
    fresh: &[Tool],
    connection: &Connection,
) -> (Option<Fingerprints>, bool) {
    let mut in_force = baseline.clone();
    let mut now_recorded = recorded;
    if let Some(store) = &inner.store {
        // A proposal pins prompts and resources as a cold start's does;
        // a derived baseline (from the cached listing) has tools only.
        let proposal = match recorded {
            true => None,
            false => {
                let tools = baseline
                    .clone()
                    .unwrap_or_else(|| fingerprint_listing(fresh));
                let tools = portcullis_catalog::pins::split_baseline(&tools).0;
                Some(with_live_pins(tools, connection).await)
            }
        };
        match save(store.as_ref(), id, identity, fresh, proposal).await {
            Ok(kept) => {
                if kept.is_some() {
                    in_force = kept;
                }
                now_recorded = true;
            }
            Err(reason) => {
                tracing::warn!(server = %name, "the refreshed catalogue could not be stored: {reason}");
            }
        }
    }
    (in_force, now_recorded)
}

/// Puts a settled fresh listing of the source `id` in force: what the
/// server publishes, then (when the listing or baseline moved) the tool
/// map, swapped and announced. With `swap` = `(old, new)` (a reconnect)
/// the source must still route to `old`; `new` takes its place and the
/// snapshot is swapped even when nothing else moved, announced only when
/// the tool map did. False when the toolset closed or the source is gone
/// or was replaced: nothing was changed.
pub(crate) fn apply(
    inner: &Inner,
    id: &str,
    swap: Option<(&Arc<Connection>, &Arc<Connection>)>,
    fresh: Vec<Tool>,
    settled: (Option<Fingerprints>, bool),
) -> bool {
    let (in_force, now_recorded) = settled;
    let names: BTreeSet<String> = fresh.iter().map(|t| t.name.clone()).collect();
    let mut sources = inner.sources();
    if inner.closed.load(Ordering::Acquire) {
        return false;
    }
    let Some(source) = sources
        .iter_mut()
        .find(|s| s.id == id && swap.is_none_or(|(old, _)| Arc::ptr_eq(&s.connection, old)))
    else {
        return false;
    };
    // What the server publishes moves first: between here and the swap a
    // call for a withdrawn tool is already refused.
    match swap {
        Some((_, new)) => new.set_published(names),
        None => source.connection.set_published(names),
    }
    source.recorded = now_recorded;
    let moved = !same_listing(&source.tools, &fresh);
    let changed = moved || source.baseline != in_force;
    if moved {
        source.tools = fresh.into();
    }
    source.baseline = in_force;
    match swap {
        Some((_, new)) => {
            source.connection = new.clone();
            inner.swap(&sources, changed);
        }
        None if changed => inner.reproject(&sources),
        None => {}
    }
    true
}
