//! `portcullis tools`: the catalogue as the model sees it, and what is held
//! back and why. `--json` prints exactly one JSON array of
//! `{name, source, tier, status, reason, access, classified_by}`.

use std::fmt::Write as _;

use crate::Exit;
use crate::config::Config;
use crate::gateway::{Gateway, Row};

/// Connects, prints the catalogue, closes.
pub async fn tools(config: &Config, json: bool) -> anyhow::Result<Exit> {
    let gateway = Gateway::start(config).await?;
    let rows = gateway.rows();
    gateway.close().await;
    if json {
        // A reason may quote an upstream's error, which may quote its URL.
        let json = serde_json::to_string_pretty(&rows)?;
        println!("{}", crate::redact::text(&json));
    } else {
        print!("{}", crate::redact::text(&table(&rows)));
    }
    Ok(Exit::Success)
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
    if rows.is_empty() {
        out.push_str("(no tools)\n");
    }
    out
}
