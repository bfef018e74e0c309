//! Progress while connecting, end to end through the real `portcullis`
//! binary with two upstreams (the demo upstream twice): in a pipe stderr
//! carries no progress at all; on a terminal (a pseudo-terminal from
//! util-linux `script`) one line counts the servers and is erased at the
//! end; with `--log-format json` the terminal gets none either.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{portcullis, text, write_config};

fn two_upstreams(dir: &Path) -> std::path::PathBuf {
    write_config(
        dir,
        "[gateway]\nstore = \"memory\"\n\n\
         [upstreams.alpha]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\n\n\
         [upstreams.beta]\ntype = \"stdio\"\ncommand = \"portcullis\"\nargs = [\"demo-upstream\"]\n",
    )
}

#[test]
fn a_pipe_gets_no_progress() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = two_upstreams(dir.path());
    let out = portcullis(&["tools", "--config", config.to_str().expect("UTF-8")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("connecting upstreams"), "{err:?}");
    assert!(!err.contains('\r'), "{err:?}");
}

/// Runs `portcullis ARGS…` on a pseudo-terminal; everything it wrote there
/// (stdout and stderr together), or `None` when `script` is not installed.
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_portcullis"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let run = Command::new("script")
        .args(["-q", "-e", "-c", &quoted.join(" "), "/dev/null"])
        .stdin(Stdio::null())
        .output();
    match run {
        Ok(out) => {
            assert!(out.status.success(), "{}", text(&out.stdout));
            Some(text(&out.stdout))
        }
        Err(error) => {
            println!("SKIPPED: util-linux `script` cannot run ({error})");
            None
        }
    }
}

#[test]
fn a_terminal_gets_one_line_rewritten_then_erased_unless_logs_are_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = two_upstreams(dir.path());
    let path = config.to_str().expect("UTF-8");
    let Some(shown) = on_a_terminal(&["tools", "--config", path]) else {
        return;
    };
    assert!(
        shown.contains("\r\x1b[2Kconnecting upstreams 0/2 (alpha, beta)"),
        "{shown:?}"
    );
    assert!(
        shown.contains("\r\x1b[2Kconnecting upstreams 1/2 (alpha)")
            || shown.contains("\r\x1b[2Kconnecting upstreams 1/2 (beta)"),
        "{shown:?}"
    );
    assert!(
        !shown.contains("connecting upstreams 2/2"),
        "the last server erases the line instead: {shown:?}"
    );
    // Erased before the table is printed.
    let erased = shown.rfind("\r\x1b[2K").expect("an erase");
    let table = shown.find("NAME").expect("the table");
    assert!(erased < table, "{shown:?}");

    let Some(json) = on_a_terminal(&["--log-format", "json", "tools", "--config", path]) else {
        return;
    };
    assert!(!json.contains("connecting upstreams"), "{json:?}");
}
