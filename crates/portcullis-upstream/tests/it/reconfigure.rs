//! `Toolset::reconfigure`: unchanged servers keep their connection (the
//! same child process, no new `tools/list`), new ones connect, removed ones
//! close, and the tool map is swapped in place. Real server processes.
// Every server here is a child process over stdio.
#![cfg(feature = "stdio")]

use crate::drift_support;

use drift_support::*;
use portcullis_upstream::{CallContext, CallError, ConnectOptions, Reconfigured, connect};
use serde_json::json;

#[tokio::test]
async fn unchanged_servers_stay_connected_new_ones_connect_removed_ones_close() {
    let (a, b, c) = (
        Fixture::new(&original()),
        Fixture::new(&original()),
        Fixture::new(&original()),
    );
    let toolset = connect(
        vec![a.config_named("a"), b.config_named("b")],
        ConnectOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let pid_a = toolset.child_pid("a");
    assert!(pid_a.is_some() && toolset.child_pid("b").is_some());
    let mut changes = toolset.watch_catalogue();
    let before = toolset.catalogue();

    let report = toolset
        .reconfigure(
            vec![a.config_named("a"), c.config_named("c")],
            &ConnectOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        report,
        Reconfigured {
            kept: vec!["a".into()],
            connected: vec!["c".into()],
            closed: vec!["b".into()],
        }
    );
    assert_eq!(toolset.child_pid("a"), pid_a, "the same child process");
    assert_eq!(toolset.child_pid("b"), None);
    assert_eq!(a.lists(), 1, "a kept server is not listed again");
    assert!(changes.has_changed().unwrap_or(false));
    let now = changes.borrow_and_update().clone();
    assert!(now.get("c__echo").is_some() && now.get("b__echo").is_none());
    assert!(
        before.get("b__echo").is_some(),
        "an earlier snapshot is untouched"
    );

    let answer = call_ok(&toolset, "c__echo", json!({"message": "new"})).await;
    assert!(!answer.is_error, "{}", text(&answer));
    assert_eq!(c.calls("echo"), 1);
    let gone = toolset
        .call(
            "b__echo",
            Some(json!({"message": "old"})),
            &CallContext::default(),
        )
        .await;
    assert!(
        matches!(gone, Err(CallError::NoLongerPublished { .. })),
        "{gone:?}"
    );
    assert_eq!(b.calls("echo"), 0);

    // A changed config (another environment) is a reconnect.
    let other = a.dir.path().join("other.json");
    write(&other, &original());
    let mut changed = a.config_named("a");
    changed = changed.with_env("DRIFT_TOOLS", other.to_string_lossy());
    let report = toolset
        .reconfigure(
            vec![changed, c.config_named("c")],
            &ConnectOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.kept, ["c"]);
    assert_eq!(report.connected, ["a"]);
    assert_eq!(report.closed, ["a"]);
    assert!(toolset.child_pid("a").is_some());
    assert_ne!(toolset.child_pid("a"), pid_a, "a new child process");
    toolset.close().await;
}
