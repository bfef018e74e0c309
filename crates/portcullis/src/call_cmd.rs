//! `portcullis call TOOL 'JSON-ARGS'`: one call through every guard — the
//! exposure gate, policy, validation, the upstream call, and framing exactly
//! as the server edge applies it.

use portcullis_catalog::ToolResult;
use serde_json::{Map, Value};

use crate::Exit;
use crate::config::Config;
use crate::gateway::Gateway;

/// Connects, makes the call, prints the result, closes.
pub async fn call(
    config: &Config,
    tool: &str,
    args: &Map<String, Value>,
    json: bool,
) -> anyhow::Result<Exit> {
    let gateway = Gateway::start(config).await?;
    let exit = call_on(&gateway, tool, args, json).await;
    gateway.close().await;
    exit
}

async fn call_on(
    gateway: &Gateway,
    tool: &str,
    args: &Map<String, Value>,
    json: bool,
) -> anyhow::Result<Exit> {
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
        return Ok(Exit::ToolError);
    }
    match gateway
        .tools
        .call(tool, Value::Object(args.clone()), None)
        .await
    {
        Ok(result) => {
            print_result(&result, json)?;
            Ok(if result.is_error {
                Exit::ToolError
            } else {
                Exit::Success
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
            Ok(Exit::Usage)
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
