//! # portcullis-store
//!
//! What [Portcullis](https://github.com/portcullis-mcp/portcullis) remembers
//! between runs: which servers were connected, the catalogue each last
//! published (a **cache**, so a wake projects a tool map without a
//! `tools/list`), each server's trust **baseline** (the fingerprints recorded
//! the first time it was trusted), the definitions that baseline was taken
//! from (so an operator can be shown a diff), the **effect log** (so a
//! replayed turn does not call a server twice) and the **audit trail** (one
//! record per call, with the shape of its arguments but never their values).
//!
//! Three backends behave identically: [`MemoryStore`] (tests), SQLite (one
//! file, the default) and PostgreSQL (several replicas sharing one
//! database). [`open`] picks one from a [`StoreSpec`] and returns an
//! `Arc<dyn Store>`. Cargo features `sqlite` and `postgres` (both default)
//! compile the SQL backends in; PostgreSQL is reached over plain TCP (no TLS
//! stack is built), so point it at a local server or a TLS-terminating proxy.
//! The two SQL backends share one implementation of every query (a private
//! `sql` module, generic over the sqlx database); only opening and adopting
//! a legacy `mcp_servers` table differ.
//!
//! ## Invariants
//!
//! 1. **The baseline is immutable.** [`Store::save`] keeps the first baseline
//!    recorded whatever it is handed, never erases it, and when two savers
//!    race on a new server records exactly one and returns it to both.
//!    [`retrust`] is the only way to replace it.
//! 2. **Nothing that authenticates is stored in the clear.** A row has six
//!    fields ([`PersistedServer`]); a stdio server's command line is stored
//!    as a hash, a URL's userinfo and query as a digest. OAuth grants are
//!    stored only as their keeper sealed them ([`GrantLog`]): the store
//!    never holds the key.
//! 3. **A cache that no longer parses is dropped, never thrown**: losing it
//!    costs one `tools/list`.
//! 4. **Old databases open.** Schema versions ([`migration`]) run on open,
//!    including on legacy `mcp_servers` tables (the layout written before
//!    Portcullis' own schema versions); rows are kept.
//! 5. **First record wins** in the effect log, and `mcp__describe_tool` is
//!    never recorded.
//! 6. **The audit trail holds no argument value.** An [`AuditRecord`] keeps
//!    an [`ArgumentShape`] (keys and JSON type names, see
//!    [`argument_shape`]), which nothing but the arguments' shape can build.
//! 7. **Retention is explicit.** The effect log and the audit trail grow
//!    until the operator prunes them ([`EffectLog::prune_before`],
//!    [`AuditLog::prune_before`]); a replay after its record was pruned
//!    calls the server again.
//!
//! ## How the upstream client uses it
//!
//! * **Cold start**, per server, after the live `tools/list` (its row read
//!   with [`Store::get_for_trust`], then saved with [`Store::save`], which
//!   writes nothing when the row is stored already as given):
//!   when the row has a recorded baseline propose none, otherwise propose
//!   `row.baseline_or_derived()` (a pre-fingerprint row) or, with no row or
//!   no listing, the fresh listing's own fingerprints (trust on first use),
//!   either with the pins of the server's prompts, resources and templates
//!   merged in ([`portcullis_catalog::pins`]: one map, so one immutable
//!   baseline; the store compares only its tool part with a listing).
//!   save the row with the fresh listing and **enforce the baseline the
//!   save returns** — under a race it may be another replica's.
//! * **Wake**: `list()`; for each row find the configured server whose
//!   effective name is `row.id`; refuse it (diagnostic) when `row.kind` or
//!   `row.url` differs from `PersistedServer::endpoint_key(&endpoint)`;
//!   project from `row.tools` guarded by `row.baseline_or_derived()` without
//!   contacting the server, comparing `row.cached_digests()` (the store's own
//!   digests of that cache) with the baseline when the row has them. A row whose `tools` is `None` (never cached, or
//!   dropped as corrupt) needs a live listing.
//! * **Background connect after a wake**: connect and list, then `save` the
//!   fresh listing (the
//!   cache moves) proposing a baseline under the cold start's rule — only
//!   when the row had none recorded, and then the one being enforced (so a
//!   derived baseline gets recorded before the cache it was derived from is
//!   overwritten) — and enforce what `save` returns. Never re-propose a
//!   recorded baseline: a replica that has not noticed a [`retrust`] would
//!   record the old one again.
//! * **Drift report**: [`Store::trusted_tools`] beside the cached listing.
//! * **Re-trust**: [`retrust`]; the next connect records a new baseline,
//!   derived from the cached listing the operator was shown. It is two
//!   steps (remove, save back); replicas that propose a baseline
//!   only when the row they read has none (as above) cannot undo it, but a
//!   replica keeps enforcing the old baseline it holds until it reconnects.
//! * **Calls**: for every tool but `mcp__describe_tool`, compute
//!   [`effects::effect_key`], replay `effects().recorded(key)` if present,
//!   else call and `effects().record(key, …)` (`portcullis-upstream` does
//!   this in `Toolset::call` when a call carries an idempotency key).
//! * **Audit**: the gateway `audit().record(…)`s every call it answers, and
//!   an operator reads `audit().recent(n)`, newest first.
//!
//! ```
//! use portcullis_catalog::fingerprint::fingerprint_listing;
//! use portcullis_catalog::{ServerIdentity, Tool};
//! use portcullis_store::{MemoryStore, PersistedServer, Store, retrust};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), portcullis_store::StoreError> {
//! let store = MemoryStore::new();
//! let docs = ServerIdentity::streamable_http("docs", "https://mcp.example.com/mcp");
//!
//! // First connect: trust on first use.
//! let listing = vec![Tool::new("search").with_description("Search the docs")];
//! let row = PersistedServer::new("docs", &docs).with_tools(listing.clone());
//! let trusted = store.save(&row.clone().with_fingerprints(fingerprint_listing(&listing))).await?;
//!
//! // The server rewrites its tool; a later save cannot move the baseline.
//! let drifted = vec![Tool::new("search").with_description("Search, then exfiltrate")];
//! let in_force = store
//!     .save(&row.clone().with_tools(drifted.clone()).with_fingerprints(fingerprint_listing(&drifted)))
//!     .await?;
//! assert_eq!(in_force, trusted);
//! assert_eq!(store.trusted_tools("docs").await?, Some(listing));
//!
//! // Only an explicit re-trust does.
//! assert!(retrust(&store, "docs").await?);
//! let rebased = store.save(&row.with_tools(drifted.clone()).with_fingerprints(fingerprint_listing(&drifted))).await?;
//! assert_eq!(rebased, Some(fingerprint_listing(&drifted)));
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Built with no SQL backend, the shared SQL helpers (schema, column and
// outcome codecs) have no caller; that build is for memory-only embedders.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

pub mod audit;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod columns;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod decoding;
pub mod effects;
pub mod error;
pub mod grants;
pub mod memory;
pub mod migration;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod row;
pub mod spec;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod store;
mod time;
pub mod trust;

pub use audit::{
    ArgumentShape, AuditDecision, AuditLog, AuditOutcome, AuditRecord, argument_shape,
};
pub use effects::{EffectLog, Outcome, Recorded, effect_key};
pub use error::{Backend, StoreError};
pub use grants::{GrantLog, SealedGrant};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use row::PersistedServer;
pub use spec::{StoreSpec, open};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use store::{Store, retrust};
