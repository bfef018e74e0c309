//! A cold start ([`connect`]): every configured server opened at once, the
//! toolset assembled from those ready by the start deadline, the rest left
//! to join in the background.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use portcullis_catalog::ServerIdentity;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::McpServerConfig;
use crate::error::WiringError;
use crate::open::{Attempted, http_client, try_cold_source};
use crate::options::{ConnectOptions, check_wiring};
use crate::report::DiagnosticSink;
use crate::state::{self, Source, Waking};
use crate::toolset::{Inner, Toolset, resolved};

/// Projects the sources (and, for a wake, the servers still waking) into a
/// toolset. `reconciled` says whether the tool map is already checked
/// against every server (a cold start) or a reconcile will report it.
pub(crate) fn assemble(
    sources: Vec<Source>,
    waking: Vec<Waking>,
    configured: Vec<ServerIdentity>,
    options: &ConnectOptions,
    diagnostics: DiagnosticSink,
    reconciled: watch::Receiver<bool>,
) -> Toolset {
    let projection = resolved(&options.projection, &configured, &options.other_sources);
    let snapshot = state::project(
        &sources,
        &waking,
        &options.other_sources,
        &projection,
        &diagnostics,
        None,
    );
    let (changes, _) = watch::channel(snapshot.catalogue.clone());
    let toolset = Toolset {
        inner: Arc::new(Inner {
            state: RwLock::new(Arc::new(snapshot)),
            sources: Mutex::new(sources),
            waking: Mutex::new(waking),
            projection: options.projection.clone(),
            configured: Mutex::new(configured),
            other_sources: options.other_sources.clone(),
            store: options.store.clone(),
            diagnostics,
            policy: options.policy.clone(),
            auth: options.auth.clone(),
            server_auth: options.server_auth.clone(),
            session: options.session.clone(),
            closed: AtomicBool::new(false),
            reconciled,
            changes,
            reopen: Mutex::new(options.clone()),
            supervisors: TaskTracker::new(),
            stop: CancellationToken::new(),
            pending: Mutex::new(HashMap::new()),
            starting: Mutex::default(),
            listeners: Mutex::default(),
        }),
    };
    crate::supervisor::supervise_all(&toolset.inner);
    toolset
}

/// Connects every server concurrently, lists their tools and projects them
/// (a cold start).
///
/// Never fails because of a server: one that cannot be reached, refuses our
/// credentials, names a blocked host or times out becomes a
/// `connection-failure` diagnostic and is skipped while the others connect;
/// unless [`ConnectOptions::reconnect`] is off, it is then retried in the
/// background and joins the tool map when it connects.
/// Only wiring mistakes are errors (`auth` or a resolver `allowed_hosts`
/// without a session).
///
/// With [`ConnectOptions::start_deadline`] it returns at the deadline with
/// the servers ready by then; the others keep connecting in the background
/// and join the tool map one by one, each settled against its baseline
/// first ([`Toolset::starting`] names them meanwhile).
///
/// With a store ([`ConnectOptions::with_store`]) every server that lists is
/// persisted — the fresh listing as the catalogue cache, and on first use its
/// fingerprints as the trust baseline — and the baseline the store holds is
/// enforced (a recorded one, else one derived from a pre-fingerprint row's
/// cached listing, else the first one recorded, possibly by a replica that
/// raced this one). Each server is settled as soon as it has answered (a
/// start deadline must not wait for the slowest to settle the others). A
/// server whose baseline cannot be read or recorded is not connected:
/// serving it would serve a possibly drifted listing as trusted. stdio servers are
/// persisted too, keyed by a hash of their command line. Without a store,
/// [`ConnectOptions::baselines`] applies.
pub async fn connect(
    servers: Vec<McpServerConfig>,
    options: ConnectOptions,
) -> Result<Toolset, WiringError> {
    check_wiring(&options)?;
    let diagnostics = DiagnosticSink::new(options.on_diagnostic.clone());
    let http = http_client(&options);
    let ids = crate::trust::row_ids(&servers, &options.projection, &options.other_sources);
    let names: Vec<String> = servers.iter().map(|s| s.name().to_owned()).collect();
    let identities: Vec<ServerIdentity> = servers.iter().map(McpServerConfig::identity).collect();
    let tracker = crate::options::ConnectTracker::new(options.on_connect.clone(), &names);

    let configured: Vec<(McpServerConfig, String)> = servers.into_iter().zip(ids).collect();
    let count = configured.len();
    // Owned by each attempt, so one still running at the start deadline
    // can go on in the background; each has a token a reconfigure (or the
    // toolset's end) stops it with.
    let shared = Arc::new(options.clone());
    let mut running: FuturesUnordered<BoxFuture<'static, Attempted>> = FuturesUnordered::new();
    let mut tokens = Vec::with_capacity(count);
    for (index, (config, id)) in configured.iter().cloned().enumerate() {
        let token = CancellationToken::new();
        tokens.push(token.clone());
        let options = shared.clone();
        let diagnostics = diagnostics.clone();
        let http = http.clone();
        let tracker = tracker.clone();
        running.push(Box::pin(async move {
            let name = config.name().to_owned();
            let attempt = try_cold_source(config.clone(), id.clone(), &options, &diagnostics, http);
            let outcome = tokio::select! {
                () = token.cancelled() => None,
                outcome = tracker.track(name, attempt) => Some(outcome),
            };
            Attempted {
                index,
                config,
                id,
                outcome,
            }
        }));
    }
    let deadline = options
        .start_deadline
        .map(|wait| tokio::time::Instant::now() + wait);
    let mut finished = Vec::with_capacity(count);
    loop {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, running.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => running.next().await,
        };
        let Some(attempted) = next else { break };
        if let Some(Err(diagnostic)) = &attempted.outcome {
            diagnostics.report(diagnostic.clone());
        }
        finished.push(attempted);
    }
    // In the configured order, as if every server had been awaited.
    finished.sort_by_key(|a| a.index);
    let mut sources = Vec::with_capacity(finished.len());
    let mut failed = Vec::new();
    let mut done = vec![false; count];
    for attempted in finished {
        done[attempted.index] = true;
        match attempted.outcome {
            Some(Ok(source)) => sources.push(source),
            _ => failed.push((attempted.config, attempted.id)),
        }
    }
    // Every listing is live: nothing is left to reconcile.
    let (_, reconciled) = watch::channel(true);
    let toolset = assemble(
        sources,
        Vec::new(),
        identities,
        &options,
        diagnostics,
        reconciled,
    );
    // A server that failed now is tried again in the background and joins
    // the tool map when it connects.
    for (config, id) in failed {
        crate::supervisor::join_later(&toolset.inner, id, config);
    }
    // Those still connecting at the deadline go on in the background.
    let late: Vec<(String, String, CancellationToken)> = configured
        .iter()
        .zip(tokens)
        .zip(&done)
        .filter(|(_, done)| !**done)
        .map(|(((config, id), token), _)| (id.clone(), config.name().to_owned(), token))
        .collect();
    if !late.is_empty() {
        crate::supervisor::finish_later(&toolset.inner, running, late);
    }
    Ok(toolset)
}
