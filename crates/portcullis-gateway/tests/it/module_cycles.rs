//! No module of a workspace crate depends on itself through others: the
//! modules of one crate name each other (`crate::x`) in one direction, as
//! the crates do. Comments and a file's trailing unit tests do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of a crate and the modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, the binaries' `src/bin` left out.
fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() && !path.ends_with("src/bin") {
            sources(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    sources(src, &mut files);
    let module = |file: &Path| {
        let first = file.strip_prefix(src).ok().and_then(|p| p.iter().next());
        let name = first.expect("a file under src").to_string_lossy();
        name.trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module(f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let from = module(file);
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let code = text.split("#[cfg(test)]\nmod tests {").next();
        let lines = code.unwrap_or_default().lines();
        for line in lines.filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c == '_'));
                let to = &rest[..end.unwrap_or(rest.len())];
                if to != from && modules.contains(to) {
                    graph.entry(from.clone()).or_default().insert(to.to_owned());
                }
            }
        }
    }
    graph
}

/// Whether `start` reaches itself.
fn in_cycle(graph: &Graph, start: &str) -> bool {
    let (mut seen, mut stack) = (BTreeSet::new(), vec![start]);
    while let Some(module) = stack.pop() {
        for next in graph.get(module).into_iter().flatten() {
            if seen.insert(next.as_str()) {
                stack.push(next);
            }
        }
    }
    seen.contains(start)
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).expect("the crates directory") {
        let entry = entry.expect("a directory entry");
        let (name, src) = (entry.file_name(), entry.path().join("src"));
        let name = name.to_string_lossy();
        if !src.is_dir() {
            continue;
        }
        let graph = graph(&src);
        let cyclic: Vec<_> = graph
            .iter()
            .filter(|(module, _)| in_cycle(&graph, module))
            .collect();
        assert!(cyclic.is_empty(), "{name}: modules in a cycle: {cyclic:?}");
        checked += 1;
    }
    // A wrong path must not pass for a clean workspace.
    assert!(checked >= 5, "only {checked} crates under {crates:?}");
}
