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
use portcullis_catalog::gate::{CallDecision, CallReport};

use crate::config::Config;
use crate::gateway::Gateway;
use crate::metrics::UNKNOWN_TOOL;

/// Connects, makes the call, prints the result, records it, closes.
pub async fn call(
    config: &Config,
    tool: &str,
    args: &Map<String, Value>,
    json: bool,
) -> anyhow::Result<Exit> {
    let gateway = Gateway::start_once(config).await?;
    crate::gateway::report_missing(&gateway.missing());
    let time = SystemTime::now();
    let started = Instant::now();
    // Taken before the arguments move on: the trail never holds a value.
    let shape = ArgumentShape::of(&Value::Object(args.clone()));
    let called = call_on(&gateway, tool, args).await;
    let (audited_tool, report) = (called.tool, called.report.clone());
    // Printing may fail (a closed pipe); the call itself was made.
    let exit = called.print(json);
    // A call an upstream refused for want of scope: the command that
    // grants it.
    for hint in gateway.oauth.step_up_hints() {
        errln!("{}", crate::redact::text(&hint));
    }
    let duration = started.elapsed();
    let source = gateway
        .rows()
        .into_iter()
        .find(|row| row.name == audited_tool)
        .map(|row| row.source)
        .unwrap_or_default();
    crate::audit::log_call(&source, audited_tool, &report, duration);
    let record = crate::audit::audit_record(
        time,
        crate::audit::identity(config),
        audited_tool,
        report,
        duration,
        shape,
    );
    if let Err(error) = gateway.store.audit().record(&record).await {
        // The call happened; a trail that cannot be written is said, not
        // turned into the call's failure.
        tracing::warn!(%error, "the audit record of this call could not be written");
    }
    gateway.close().await;
    exit
}

/// What [`call_on`] did: the exit code, the name the trail records (the
/// qualified name, or one label for every unknown name), what the gate and
/// the tool made of the call, and what to print.
struct Called<'a> {
    exit: Exit,
    tool: &'a str,
    asked: &'a str,
    report: CallReport,
    shown: Shown,
}

/// What `call` prints.
enum Shown {
    /// The result (a refusal the gateway wrote included); with `--json` the
    /// refusal's words also go to stderr.
    Result(ToolResult, Option<String>),
    /// A name nobody serves, with the closest names.
    Unknown(Vec<String>),
}

impl Called<'_> {
    fn print(&self, json: bool) -> anyhow::Result<Exit> {
        match &self.shown {
            Shown::Result(result, refusal) => {
                print_result(result, json)?;
                if let (true, Some(message)) = (json, refusal) {
                    errln!("{message}");
                }
            }
            Shown::Unknown(close) if close.is_empty() => {
                errln!(
                    "error: unknown tool \"{}\"; `portcullis tools` lists them",
                    self.report_name()
                );
            }
            Shown::Unknown(close) => errln!(
                "error: unknown tool \"{}\"; did you mean: {}?",
                self.report_name(),
                close.join(", ")
            ),
        }
        Ok(self.exit)
    }

    fn report_name(&self) -> &str {
        match &self.shown {
            Shown::Unknown(_) => self.asked,
            Shown::Result(..) => self.tool,
        }
    }
}

async fn call_on<'a>(gateway: &Gateway, tool: &'a str, args: &Map<String, Value>) -> Called<'a> {
    let rows = gateway.rows();
    // Withheld (never registered) or quarantined (never called): refused
    // here with the reason, as the surface would refuse it.
    if let Some(row) = rows
        .iter()
        .find(|r| r.name == tool && r.status != "available")
    {
        let reason = row.reason.as_deref().unwrap_or("held back by the gateway");
        let message = format!("refused: tool \"{tool}\" is {}: {reason}", row.status);
        let decision = if row.status == "quarantined" {
            CallDecision::Quarantined
        } else {
            CallDecision::Denied
        };
        return Called {
            exit: Exit::ToolError,
            tool,
            asked: tool,
            report: CallReport::refused(decision),
            shown: Shown::Result(ToolResult::error_text(message.clone()), Some(message)),
        };
    }
    match gateway
        .tools
        .call_reported(tool, Value::Object(args.clone()), None)
        .await
    {
        Ok((result, report)) => Called {
            exit: if result.is_error {
                Exit::ToolError
            } else {
                Exit::Success
            },
            tool,
            asked: tool,
            report,
            shown: Shown::Result(result, None),
        },
        Err(_) => {
            let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
            let close = close_names(tool, &names);
            Called {
                exit: Exit::Usage,
                tool: UNKNOWN_TOOL,
                asked: tool,
                report: CallReport::refused(CallDecision::Denied),
                shown: Shown::Unknown(close.into_iter().map(str::to_owned).collect()),
            }
        }
    }
}

/// Prints a result: its text (other content as JSON), or with `--json` the
/// whole MCP `CallToolResult`.
fn print_result(result: &ToolResult, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(result)?);
        return Ok(());
    }
    for item in &result.content {
        match portcullis_catalog::result::text_of(item) {
            Some(text) => outln!("{text}"),
            None => outln!("{item}"),
        }
    }
    if let Some(structured) = &result.structured_content {
        outln!("{structured}");
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
            let distance = strsim::levenshtein(&wanted_lower, &lower);
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
