//! Trust baselines through the store ([`crate::ConnectOptions::with_store`]):
//! which stored row belongs to a configured server, which baseline a save
//! proposes, and the diagnostics for rows that cannot be woken.
//!
//! The rules of trust on first use are the store's
//! ([`portcullis_store::trust`], written once for every kind of source:
//! which row belongs to a server, what a save proposes, enforcing the
//! baseline a save returns). What is the upstream's own is pinning:
//!
//! * A proposal pins the server's prompts, resources and resource templates
//!   too ([`portcullis_catalog::pins`]), listed live from the server when it
//!   proposes (so only a first trust, or the first connect after a re-trust,
//!   pays for those lists), and only the kinds the server advertises. A
//!   server that advertises none still gets the `pins:v1` marker: prompts it
//!   starts publishing later are withheld as added. A list that fails
//!   leaves the proposal without pins (prompts and resources then pass
//!   unpinned, as under a baseline from before pinning) rather than pinning
//!   an empty list that would withhold everything the server has.

use portcullis_catalog::definition::{Prompt, Resource, ResourceTemplate};
use portcullis_catalog::fingerprint::Fingerprints;
use portcullis_catalog::pins::{merge_baseline, pin_all};
use portcullis_catalog::server::SourceNames;
use portcullis_catalog::{
    Diagnostic, ProjectionOptions, Rule, ServerIdentity, ServerListing, Tool,
};
use portcullis_store::{PersistedServer, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::McpServerConfig;
use crate::connection::Connection;

/// The effective name of every configured server, parallel to `servers`:
/// the ids of their rows. Computed over every configured server (not only
/// those that connect) and the other sources projected beside them
/// ([`crate::ConnectOptions::other_sources`]), exactly as the catalogue
/// names them, so a row keeps its id whether or not a sibling of the same
/// name is reachable today.
pub(crate) fn row_ids(
    servers: &[McpServerConfig],
    projection: &ProjectionOptions,
    others: &[ServerListing],
) -> Vec<String> {
    let identities: Vec<ServerIdentity> = servers.iter().map(McpServerConfig::identity).collect();
    let named = naming_set(&identities, projection, others);
    let names = SourceNames::new(&named, &projection.keep_names);
    identities
        .iter()
        .map(|identity| {
            names
                .name_of(identity)
                .map_or_else(|| identity.name.clone(), str::to_owned)
        })
        .collect()
}

/// Everything names are decided over: the caller's configured sources
/// ([`ProjectionOptions::configured`], e.g. a gateway's apps that failed to
/// load), the configured `servers`, and the `others` projected beside them
/// ([`crate::ConnectOptions::other_sources`]). [`SourceNames`] counts each
/// identity once.
pub(crate) fn naming_set(
    servers: &[ServerIdentity],
    projection: &ProjectionOptions,
    others: &[ServerListing],
) -> Vec<ServerIdentity> {
    projection
        .configured
        .iter()
        .chain(servers)
        .chain(others.iter().map(|o| &o.identity))
        .cloned()
        .collect()
}

pub(crate) use portcullis_store::trust::belongs_to as matches;

/// The baseline in force after a cold start listed `listing`: reads the row,
/// saves the fresh listing as the cache (proposing a baseline only when none
/// is recorded) and returns what the store says is in force.
/// `connection` is the server's, for listing what the proposal pins.
pub(crate) async fn settle_cold(
    store: &dyn Store,
    id: &str,
    identity: &ServerIdentity,
    listing: &[Tool],
    connection: &Connection,
) -> Result<Option<Fingerprints>, String> {
    let row = store.get_for_trust(id).await.map_err(|e| e.to_string())?;
    let proposal = cold_proposal(row.as_ref(), identity, listing, connection).await;
    save(store, id, identity, listing, proposal).await
}

/// What a cold start's save proposes (the store's rule,
/// [`portcullis_store::trust::proposal`]), with the pins of what the server
/// publishes besides tools.
pub(crate) async fn cold_proposal(
    row: Option<&PersistedServer>,
    identity: &ServerIdentity,
    listing: &[Tool],
    connection: &Connection,
) -> Option<Fingerprints> {
    match portcullis_store::trust::proposal(row, identity, listing) {
        Some(tools) => Some(with_live_pins(tools, connection).await),
        None => None,
    }
}

/// `tools` (a proposal's tool fingerprints) with the pins of what the
/// server behind `connection` publishes besides tools, when those could be
/// listed (see the module doc).
pub(crate) async fn with_live_pins(tools: Fingerprints, connection: &Connection) -> Fingerprints {
    match live_pins(connection).await {
        Ok(pins) => merge_baseline(&tools, &pins),
        Err(reason) => {
            tracing::warn!(
                server = %connection.server(),
                "the prompts and resources could not be listed, so the trust baseline pins tools only: {reason}"
            );
            tools
        }
    }
}

/// Reads a list item through JSON (rmcp's models and the catalogue's share
/// the MCP shape); one the catalogue cannot read is left unpinned, so it is
/// withheld as unknown, as the gateway never shows it either.
fn read_all<T: Serialize, U: DeserializeOwned>(items: Vec<T>) -> Vec<U> {
    items
        .into_iter()
        .filter_map(|item| {
            serde_json::to_value(item)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
        })
        .collect()
}

/// One list's answer within `timeout`, or why not.
fn answered<T>(
    what: &str,
    timeout: std::time::Duration,
    listed: Result<Result<T, rmcp::ServiceError>, tokio::time::error::Elapsed>,
) -> Result<T, String> {
    match listed {
        Ok(Ok(items)) => Ok(items),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: no answer within {} ms",
            timeout.as_millis()
        )),
    }
}

/// The pins of the prompts, resources and templates the server advertises,
/// each list within the connection's timeout.
async fn live_pins(connection: &Connection) -> Result<Fingerprints, String> {
    let peer = connection.peer();
    let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
    let prompts_advertised = capabilities.as_ref().is_some_and(|c| c.prompts.is_some());
    let resources_advertised = capabilities.as_ref().is_some_and(|c| c.resources.is_some());
    let timeout = connection.request_timeout();
    let mut prompts: Vec<Prompt> = Vec::new();
    let mut resources: Vec<Resource> = Vec::new();
    let mut templates: Vec<ResourceTemplate> = Vec::new();
    if prompts_advertised {
        let listed = tokio::time::timeout(timeout, peer.list_all_prompts()).await;
        prompts = read_all(answered("prompts/list", timeout, listed)?);
    }
    if resources_advertised {
        let listed = tokio::time::timeout(timeout, peer.list_all_resources()).await;
        resources = read_all(answered("resources/list", timeout, listed)?);
        let listed = tokio::time::timeout(timeout, peer.list_all_resource_templates()).await;
        templates = read_all(answered("resources/templates/list", timeout, listed)?);
    }
    Ok(pin_all(&prompts, &resources, &templates))
}

/// Saves `listing` as the row's cache with `proposal`, returning the
/// baseline in force ([`portcullis_store::trust::record`]).
pub(crate) async fn save(
    store: &dyn Store,
    id: &str,
    identity: &ServerIdentity,
    listing: &[Tool],
    proposal: Option<Fingerprints>,
) -> Result<Option<Fingerprints>, String> {
    portcullis_store::trust::record(store, id, identity, listing, proposal)
        .await
        .map_err(|e| e.to_string())
}

/// A server dropped because its baseline could not be read or recorded:
/// without it, a drifted listing would be served as trusted.
pub(crate) fn store_failure(server: &str, reason: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::ConnectionFailure,
        server,
        format!(
            "MCP server \"{server}\" is not connected: its trust baseline could not be read from or recorded in the store ({reason})."
        ),
    )
}

/// The diagnostic for a stored row no configured server matches.
pub(crate) fn no_matching_config(id: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::ConnectionFailure,
        id,
        format!(
            "MCP server \"{id}\" has no matching config on wake; supply the server definition again."
        ),
    )
}

/// The diagnostic for a stored row whose config now names another
/// transport or endpoint: a different endpoint is a different catalogue.
pub(crate) fn config_mismatch(id: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::ConnectionFailure,
        id,
        format!("MCP server \"{id}\" does not match the supplied config (type or url differ)."),
    )
}

/// The diagnostic for a woken server whose first connection (handshake
/// and listing) failed: `message` is the connection failure's own.
pub(crate) fn wake_failure(server: &str, message: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::ConnectionFailure,
        server,
        format!(
            "{message} Its tools stay listed from the store's cache, but no call reaches it until it connects and lists them; it is retried in the background."
        ),
    )
}
