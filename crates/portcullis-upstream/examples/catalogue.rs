//! Connects to the servers of an `mcpServers` JSON config (Claude Desktop,
//! Cursor) or a VS Code `servers` config, and prints the projected catalogue
//! as the model would see it, then what was held back and why.
//!
//! ```sh
//! cargo run -p portcullis-upstream --example catalogue -- ~/.cursor/mcp.json
//! cargo run -p portcullis-upstream --example catalogue -- config.json --json
//! ```

use std::process::ExitCode;
use std::time::Duration;

use portcullis_upstream::{ConnectOptions, connect, parse_mcp_servers_json};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: catalogue CONFIG.json [--json]");
        return ExitCode::from(2);
    };
    let json_output = args.any(|a| a == "--json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let parsed = match parse_mcp_servers_json(&text) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    for diagnostic in &parsed.diagnostics {
        eprintln!("{diagnostic}");
    }
    let options = ConnectOptions::default().with_timeout(Duration::from_secs(30));
    let toolset = match connect(parsed.servers, options).await {
        Ok(toolset) => toolset,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    for diagnostic in toolset.diagnostics() {
        eprintln!("{diagnostic}");
    }
    let catalogue = toolset.catalogue();
    if json_output {
        match serde_json::to_string_pretty(&catalogue.status_rows()) {
            Ok(rows) => println!("{rows}"),
            Err(e) => eprintln!("{e}"),
        }
    } else {
        for entry in catalogue.entries() {
            let description = entry.definition.description.as_deref().unwrap_or("");
            println!(
                "{:<48} [{}] {}",
                entry.name,
                entry.tier.as_str(),
                first_line(description)
            );
        }
        for withheld in catalogue.withheld() {
            println!("{:<48} [withheld] {}", withheld.name, withheld.reason);
        }
    }
    toolset.close().await;
    ExitCode::SUCCESS
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 100 {
        format!("{}…", line.chars().take(100).collect::<String>())
    } else {
        line.to_owned()
    }
}
