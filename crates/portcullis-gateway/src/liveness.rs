//! Whether an upstream is up, as `/healthz`, `/metrics` and the status
//! rows count it: connected, reachable, and a stdio upstream's child still
//! running. When an upstream goes down and comes back is told in
//! [`crate::health`].

use portcullis_upstream::Toolset;

/// Whether the upstream of that effective name is up: connected and
/// reachable (see [`crate::health`]), and, for a stdio upstream, its child
/// still running.
pub fn upstream_up(toolset: &Toolset, server: &str) -> bool {
    toolset.is_up(server) && toolset.child_pid(server).is_none_or(child_alive)
}

/// Whether the stdio child `pid` is still running (not gone, not a
/// zombie). Where `/proc` cannot tell, the child is taken to be alive.
#[cfg(target_os = "linux")]
pub fn child_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with(['Z', 'X']),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}

/// Whether the stdio child `pid` is still running: without `/proc`, the
/// child is taken to be alive.
#[cfg(not(target_os = "linux"))]
pub fn child_alive(_pid: u32) -> bool {
    true
}
