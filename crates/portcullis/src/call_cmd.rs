//! `portcullis call TOOL 'JSON-ARGS'`: one call through every guard — the
//! exposure gate, policy, validation, the upstream call, and framing exactly
//! as the server edge applies it — written to the audit trail like every
//! call `serve` answers (same record: time, identity, qualified tool,
//! decision, duration, outcome, argument shape; through the gateway's own
//! store).

use std::time::{Instant, SystemTime};

use portcullis_catalog::ToolResult;
use portcullis_store::audit::ArgumentShape;
use serde_json::{Map, Value};

use crate::Exit;
use crate::audit::{Decision, Verdict};
use crate::config::Config;
use crate::gateway::Gateway;
use crate::metrics::{Outcome, UNKNOWN_TOOL};

/// Connects, makes the call, prints the result, records it, closes.
pub async fn call(
    config: &Config,
    tool: &str,
    args: &Map<String, Value>,
    json: bool,
) -> anyhow::Result<Exit> {
    let gateway = Gateway::start_once(config).await?;
    crate::gateway::report_missing(&crate::gateway::missing(&gateway.toolset));
    let time = SystemTime::now();
    let started = Instant::now();
    // Taken before the arguments move on: the trail never holds a value.
    let shape = ArgumentShape::of(&Value::Object(args.clone()));
    let (exit, verdict) = crate::audit::with_verdict(call_on(&gateway, tool, args, json)).await;
    let (audited_tool, verdict) = match (&exit, verdict) {
        (Ok(called), Some(noted)) => (called.tool, noted),
        (Ok(called), None) => (called.tool, called.verdict.clone()),
        // Printing failed: the call itself was made and noted.
        (Err(_), Some(noted)) => (tool, noted),
        (Err(_), None) => (tool, refused(Decision::Denied)),
    };
    let duration = started.elapsed();
    let source = gateway
        .rows()
        .into_iter()
        .find(|row| row.name == audited_tool)
        .map(|row| row.source)
        .unwrap_or_default();
    crate::audit::log_call(&source, audited_tool, &verdict, duration);
    let record = crate::audit::audit_record(
        time,
        crate::audit::identity(config),
        audited_tool,
        verdict,
        duration,
        shape,
    );
    if let Err(error) = gateway.store.audit().record(&record).await {
        // The call happened; a trail that cannot be written is said, not
        // turned into the call's failure.
        tracing::warn!(%error, "the audit record of this call could not be written");
    }
    gateway.close().await;
    exit.map(|called| called.exit)
}

/// What [`call_on`] did: the exit code, the name the trail records (the
/// qualified name, or one label for every unknown name), and the verdict
/// when no handler noted one (the call was refused before a handler ran).
struct Called<'a> {
    exit: Exit,
    tool: &'a str,
    verdict: Verdict,
}

fn refused(decision: Decision) -> Verdict {
    Verdict {
        decision,
        outcome: Outcome::Refused,
        code: None,
    }
}

async fn call_on<'a>(
    gateway: &Gateway,
    tool: &'a str,
    args: &Map<String, Value>,
    json: bool,
) -> anyhow::Result<Called<'a>> {
    let rows = gateway.rows();
    // Withheld (never registered) or quarantined (never called): refused
    // here with the reason, as the surface would refuse it.
    if let Some(row) = rows
        .iter()
        .find(|r| r.name == tool && r.status != "available")
    {
        let reason = row.reason.as_deref().unwrap_or("held back by the gateway");
        let message = format!("refused: tool \"{tool}\" is {}: {reason}", row.status);
        print_result(&ToolResult::error_text(message.clone()), json)?;
        if json {
            eprintln!("{message}");
        }
        let decision = if row.status == "quarantined" {
            Decision::Quarantined
        } else {
            Decision::Denied
        };
        return Ok(Called {
            exit: Exit::ToolError,
            tool,
            verdict: refused(decision),
        });
    }
    match gateway
        .tools
        .call(tool, Value::Object(args.clone()), None)
        .await
    {
        Ok(result) => {
            print_result(&result, json)?;
            Ok(Called {
                exit: if result.is_error {
                    Exit::ToolError
                } else {
                    Exit::Success
                },
                tool,
                verdict: crate::audit::classify_result(&result),
            })
        }
        Err(_) => {
            let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
            let close = close_names(tool, &names);
            if close.is_empty() {
                eprintln!("error: unknown tool \"{tool}\"; `portcullis tools` lists them");
            } else {
                eprintln!(
                    "error: unknown tool \"{tool}\"; did you mean: {}?",
                    close.join(", ")
                );
            }
            Ok(Called {
                exit: Exit::Usage,
                tool: UNKNOWN_TOOL,
                verdict: refused(Decision::Denied),
            })
        }
    }
}

/// Prints a result: its text (other content as JSON), or with `--json` the
/// whole MCP `CallToolResult`.
fn print_result(result: &ToolResult, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(result)?);
        return Ok(());
    }
    for item in &result.content {
        match portcullis_catalog::result::text_of(item) {
            Some(text) => println!("{text}"),
            None => println!("{item}"),
        }
    }
    if let Some(structured) = &result.structured_content {
        println!("{structured}");
    }
    Ok(())
}

/// The names closest to `wanted`: same bare name, a substring either way, or
/// a small edit distance; at most five, nearest first.
pub fn close_names<'a>(wanted: &str, names: &[&'a str]) -> Vec<&'a str> {
    let wanted_lower = wanted.to_lowercase();
    let bare = |n: &str| n.rsplit("__").next().unwrap_or(n).to_lowercase();
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .filter_map(|&name| {
            let lower = name.to_lowercase();
            let distance = edit_distance(&wanted_lower, &lower);
            let related = bare(name) == bare(wanted)
                || lower.contains(&wanted_lower)
                || wanted_lower.contains(&lower)
                || distance <= wanted.len().max(3) / 3;
            related.then_some((distance, name))
        })
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(ca != *cb);
            current.push(substitute.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_find_typos_and_bare_names() {
        let names = ["demo__echo", "demo__add", "demo__write_note"];
        assert_eq!(close_names("demo__ecko", &names), ["demo__echo"]);
        assert_eq!(close_names("echo", &names), ["demo__echo"]);
        assert!(close_names("zzzzzzzz", &names).is_empty());
    }
}
