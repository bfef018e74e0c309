//! `portcullis tools`: the catalogue as the model sees it, and what is held
//! back and why. `--json` prints exactly one JSON array of
//! `{name, source, tier, status, reason, access, classified_by}`.

use std::fmt::Write as _;

use crate::Exit;
use crate::config::Config;
use crate::gateway::{Gateway, Row};

/// Connects, prints the catalogue, closes.
pub async fn tools(config: &Config, json: bool) -> anyhow::Result<Exit> {
    let gateway = Gateway::start_once(config).await?;
    let rows = gateway.rows();
    let missing = gateway.missing();
    gateway.close().await;
    // The catalogue is printed (and the exit is 0) whatever failed: it is
    // what the model would see. Why a server's tools are absent goes to
    // stderr, one line per server, whatever the log level.
    crate::gateway::report_missing(&missing);
    if json {
        // A reason may quote an upstream's error, which may quote its URL.
        let json = serde_json::to_string_pretty(&rows)?;
        outln!("{}", crate::redact::text(&json));
    } else {
        out!("{}", crate::redact::text(&table(&rows)));
        if rows.is_empty() {
            outln!("{}", why_empty(config, missing.len()));
        }
    }
    Ok(Exit::Success)
}

/// Why the catalogue is empty, in one line.
fn why_empty(config: &Config, missing: usize) -> String {
    let declared = config.upstreams.len()
        + config.plugins.len()
        + config.tool_plugins.len()
        + config.apps.len();
    if declared == 0 {
        format!(
            "(no tools: {} declares no upstreams, plugins or apps)",
            config.path.display()
        )
    } else if missing > 0 {
        format!("(no tools: {missing} upstream(s) could not be connected; see the lines above)")
    } else {
        "(no tools: the configured sources list none)".to_owned()
    }
}

/// The human-readable listing: one line per tool, reasons after the held-back
/// ones.
fn table(rows: &[Row]) -> String {
    let width = |f: fn(&Row) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let access = |r: &Row| match (&r.access, &r.classified_by) {
        (Some(access), Some(by)) => format!("{access} ({by})"),
        (Some(access), None) => access.clone(),
        _ => "-".to_owned(),
    };
    let (name_w, source_w, tier_w) = (
        width(|r| &r.name, "NAME"),
        width(|r| &r.source, "SOURCE"),
        width(|r| &r.tier, "TIER"),
    );
    let access_w = rows
        .iter()
        .map(|r| access(r).len())
        .chain(["ACCESS".len()])
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:name_w$}  {:source_w$}  {:tier_w$}  {:access_w$}  STATUS",
        "NAME", "SOURCE", "TIER", "ACCESS"
    );
    for row in rows {
        let _ = write!(
            out,
            "{:name_w$}  {:source_w$}  {:tier_w$}  {:access_w$}  {}",
            row.name,
            row.source,
            row.tier,
            access(row),
            row.status
        );
        if let Some(reason) = &row.reason {
            let _ = write!(out, " ({reason})");
        }
        out.push('\n');
    }
    out
}
