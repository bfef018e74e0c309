//! The toolset's swappable state: every connected server's current listing
//! and baseline (the *sources*), and the projection built from them (a
//! *snapshot*: catalogue, compiled validators, routes to connections).
//!
//! A snapshot is immutable and shared behind an `Arc`. A call takes the
//! snapshot in force when it starts and keeps it to the end; a reconcile that
//! corrects the tool map builds a new snapshot from the sources and swaps it
//! in, so the next call sees the correction and none sees half of one.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use portcullis_catalog::catalogue::{EntryKind, ListingRef};
use portcullis_catalog::classification::Classification;
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::{
    ArgumentValidator, Catalogue, Diagnostic, ProjectionOptions, Rule, Schema, ServerIdentity,
    ServerListing, Tool, ToolFilter,
};
use tokio_util::sync::CancellationToken;

use crate::config::McpServerConfig;
use crate::connection::Connection;
use crate::output::LazyOutput;
use crate::report::DiagnosticSink;

/// One connected server: what it publishes (live, or the store's cache
/// until a reconcile) and the baseline enforced on it.
pub(crate) struct Source {
    /// The row id in the store: the server's effective name among every
    /// configured server (stable whether or not its siblings connect).
    pub(crate) id: String,
    /// The config it was connected from.
    pub(crate) config: McpServerConfig,
    /// Who it is.
    pub(crate) identity: ServerIdentity,
    /// What the model may see of it.
    pub(crate) filter: ToolFilter,
    /// Which of its tools only read, by the operator's word and its own.
    pub(crate) classification: Classification,
    /// Its current listing, shared with the catalogues projected from it.
    pub(crate) tools: Arc<[Tool]>,
    /// The baseline enforced on it (`None`: trusted as listed).
    pub(crate) baseline: Option<Fingerprints>,
    /// Whether the store holds a recorded baseline for it, so a reconcile
    /// never proposes one again (a derived or first-use baseline is proposed
    /// once, then recorded).
    pub(crate) recorded: bool,
    /// The live connection.
    pub(crate) connection: Arc<Connection>,
}

impl Source {
    fn listing(&self) -> ListingRef<'_> {
        ListingRef {
            identity: &self.identity,
            tools: &self.tools,
            digests: None,
            baseline: self.baseline.as_ref(),
            filter: &self.filter,
            classification: &self.classification,
            shared: Some(&self.tools),
        }
    }
}

/// A server woken from the store whose connection is not open yet
/// (`crate::wake`): its cached listing is projected, guarded by its
/// baseline, so its tools are visible at once; but it has no connection,
/// so no call can reach it until a connection listed its tools live and
/// the drift guard compared that listing with the baseline
/// (`crate::reconcile`), which turns it into a [`Source`].
pub(crate) struct Waking {
    /// The row id (as [`Source::id`]).
    pub(crate) id: String,
    /// The config it is connected from.
    pub(crate) config: McpServerConfig,
    /// Who it is.
    pub(crate) identity: ServerIdentity,
    /// What the model may see of it.
    pub(crate) filter: ToolFilter,
    /// Which of its tools only read.
    pub(crate) classification: Classification,
    /// The row's cached listing, shared with the catalogues projected
    /// from it.
    pub(crate) tools: Arc<[Tool]>,
    /// The digest of each cached tool, as the store wrote them beside the
    /// cache ([`portcullis_store::PersistedServer::cached_digests`]): the
    /// projection compares these with the baseline instead of hashing the
    /// cached tools again. Only ever the store's; a live listing (a
    /// [`Source`]) is always hashed.
    pub(crate) digests: Option<Vec<String>>,
    /// The row's baseline (recorded, or derived from the cached listing).
    pub(crate) baseline: Option<Fingerprints>,
    /// Whether the store holds a recorded baseline for it.
    pub(crate) recorded: bool,
    /// Fires when the first attempt to connect it has ended, joined or
    /// not (and when that attempt is abandoned): a call waits for it.
    pub(crate) settled: CancellationToken,
}

impl Waking {
    fn listing(&self) -> ListingRef<'_> {
        ListingRef {
            identity: &self.identity,
            tools: &self.tools,
            digests: self.digests.as_deref(),
            baseline: self.baseline.as_ref(),
            filter: &self.filter,
            classification: &self.classification,
            shared: Some(&self.tools),
        }
    }
}

/// One projection of the sources: everything a call reads.
#[derive(Default)]
pub(crate) struct Snapshot {
    pub(crate) catalogue: Arc<Catalogue>,
    /// Argument validators by projected name, compiled on a tool's first
    /// call ([`Snapshot::validator`]) and shared with later snapshots while
    /// the schema stays the same: compiling thousands of schemas up front
    /// was most of a wake's time, for tools most of which are never called.
    /// `None`: the schema cannot be compiled (reported once).
    pub(crate) validators: Mutex<HashMap<String, Option<Arc<ArgumentValidator>>>>,
    /// Output schemas the servers promised, compiled once.
    pub(crate) outputs: HashMap<String, Arc<LazyOutput>>,
    /// By effective (projected) server name.
    pub(crate) connections: HashMap<String, Arc<Connection>>,
    /// Servers projected from the store's cache that have no connection
    /// yet, by effective name, each with its [`Waking::settled`]: a call
    /// to one waits for it, then routes on the snapshot in force then.
    pub(crate) waking: HashMap<String, CancellationToken>,
    /// Names a reconcile took out of the tool map, with their server: a
    /// model still holding the older list is told "no longer published".
    pub(crate) retired: HashMap<String, String>,
}

impl Snapshot {
    /// The argument validator of the remote tool projected as `name`,
    /// compiled now if this is its first call. `None` when its schema
    /// cannot be compiled: the first such call reports it, and the server
    /// checks its own arguments.
    pub(crate) fn validator(
        &self,
        name: &str,
        diagnostics: &DiagnosticSink,
    ) -> Option<Arc<ArgumentValidator>> {
        let entry = self.catalogue.get(name)?;
        let mut validators = self
            .validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = validators.get(name) {
            return known.clone();
        }
        let compiled = match ArgumentValidator::compile(name, entry.full_input_schema()) {
            Ok(validator) => Some(Arc::new(validator)),
            // The server checks its own arguments; we report that ours cannot.
            Err(e) => {
                diagnostics.report(Diagnostic::new(
                    Rule::ServerEntryInvalid,
                    entry.server.clone(),
                    format!("{e}; its arguments are passed to the server unchecked."),
                ));
                None
            }
        };
        validators.insert(name.to_owned(), compiled.clone());
        compiled
    }

    /// This snapshot with the routes recomputed for `sources` and
    /// `waking`, everything else shared: for a server that moved from
    /// waking to connected with the very listing and baseline it was
    /// projected with, whose projection is therefore the same.
    pub(crate) fn relinked(&self, sources: &[Source], waking: &[Waking]) -> Snapshot {
        let (connections, pending) = links(&self.catalogue, sources, waking);
        let validators = self
            .validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Snapshot {
            catalogue: self.catalogue.clone(),
            validators: Mutex::new(validators),
            outputs: self.outputs.clone(),
            connections,
            waking: pending,
            retired: self.retired.clone(),
        }
    }
}

/// Each projected server's connection, or its [`Waking::settled`] while it
/// has none, by effective name.
type Links = (
    HashMap<String, Arc<Connection>>,
    HashMap<String, CancellationToken>,
);

fn links(catalogue: &Catalogue, sources: &[Source], waking: &[Waking]) -> Links {
    let mut connections = HashMap::new();
    let mut pending = HashMap::new();
    for summary in catalogue.servers() {
        if let Some(source) = sources.iter().find(|s| s.identity == summary.identity) {
            connections.insert(summary.name.clone(), source.connection.clone());
        } else if let Some(woken) = waking.iter().find(|w| w.identity == summary.identity) {
            pending.insert(summary.name.clone(), woken.settled.clone());
        }
    }
    (connections, pending)
}

/// Projects `sources` into a snapshot. Diagnostics the previous snapshot
/// already reported (a collision, a budget overrun, a drift unchanged since)
/// are not reported again; validators whose schema did not change are
/// reused.
pub(crate) fn project(
    sources: &[Source],
    waking: &[Waking],
    others: &[ServerListing],
    options: &ProjectionOptions,
    diagnostics: &DiagnosticSink,
    previous: Option<&Snapshot>,
) -> Snapshot {
    // Lent, not copied: the catalogue copies only what it keeps, and the
    // listings stay here for the next projection.
    let listings = sources
        .iter()
        .map(Source::listing)
        .chain(waking.iter().map(Waking::listing))
        .chain(others.iter().map(ListingRef::from));
    let catalogue = Catalogue::project(listings, options);
    let already: &[Diagnostic] = previous.map(|p| p.catalogue.diagnostics()).unwrap_or(&[]);
    for diagnostic in catalogue.diagnostics() {
        if !already.contains(diagnostic) {
            diagnostics.report(diagnostic.clone());
        }
    }

    let (connections, pending) = links(&catalogue, sources, waking);
    let mut identities: HashMap<&str, &ServerIdentity> = HashMap::new();
    for summary in catalogue.servers() {
        let identity = sources
            .iter()
            .map(|s| &s.identity)
            .chain(waking.iter().map(|w| &w.identity))
            .find(|identity| **identity == summary.identity);
        if let Some(identity) = identity {
            identities.insert(summary.name.as_str(), identity);
        }
    }
    // Output schemas by (server, remote tool name): the catalogue keeps
    // disclosed definitions, and the promise is the server's own.
    let mut output_schemas: HashMap<(&ServerIdentity, &str), &Schema> = HashMap::new();
    let published = sources
        .iter()
        .map(|s| (&s.identity, &*s.tools))
        .chain(waking.iter().map(|w| (&w.identity, &*w.tools)));
    for (identity, tools) in published {
        for tool in tools {
            if let Some(schema) = &tool.output_schema {
                output_schemas.insert((identity, tool.name.as_str()), schema);
            }
        }
    }

    let mut validators = HashMap::new();
    let compiled = previous.map(|p| {
        p.validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    });
    let mut outputs = HashMap::new();
    for entry in catalogue.entries() {
        if entry.kind != EntryKind::Remote {
            continue;
        }
        // Most servers promise no output schema: then no lookup per tool.
        let schema = (!output_schemas.is_empty())
            .then(|| identities.get(entry.server.as_str()))
            .flatten()
            .and_then(|identity| output_schemas.get(&(*identity, entry.remote_name.as_str())));
        if let Some(schema) = schema {
            outputs.insert(
                entry.name.clone(),
                Arc::new(LazyOutput::new((*schema).clone())),
            );
        }
        // A validator already compiled carries over while the schema is
        // the same; the others are compiled on first call.
        // Looked up first: a schema held as stored text is parsed only to
        // be compared with one that was compiled.
        let reusable = previous.zip(compiled.as_ref()).and_then(|(p, compiled)| {
            let validator = compiled.get(&entry.name)?;
            let before = p.catalogue.get(&entry.name)?;
            let same = before.kind == EntryKind::Remote
                && before.server == entry.server
                && before.full_input_schema() == entry.full_input_schema();
            same.then(|| validator.clone())
        });
        if let Some(validator) = reusable {
            validators.insert(entry.name.clone(), validator);
        }
    }

    let mut retired = HashMap::new();
    if let Some(previous) = previous {
        let now: BTreeSet<&str> = catalogue
            .entries()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        for (name, server) in &previous.retired {
            if !now.contains(name.as_str()) {
                retired.insert(name.clone(), server.clone());
            }
        }
        for entry in previous.catalogue.entries() {
            if entry.kind != EntryKind::DescribeTool && !now.contains(entry.name.as_str()) {
                retired.insert(entry.name.clone(), entry.server.clone());
            }
        }
    }

    Snapshot {
        catalogue: Arc::new(catalogue),
        validators: Mutex::new(validators),
        outputs,
        connections,
        waking: pending,
        retired,
    }
}
