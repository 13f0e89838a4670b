//! The shape the redesign of issue 10 promised, kept by tests rather than by memory:
//! - `ferry-core` (every decision) depends on neither tokio, quinn, rusqlite nor axum, so no
//!   decision can sleep, dial, or touch a disk;
//! - `ferry-kit` (the app library) pulls in none of the gateway's rusqlite, axum or quinn;
//! - a root `cargo build` (the default members) compiles no test-only feature into the gateway;
//! - within each crate, no two top-level modules import each other, directly or around a
//!   circle (what `cargo modules` would show, checked here without it);
//! - `unsafe` is allowed in one module only, `gateway/src/call_log/danger_mapped.rs` (the
//!   workspace denies it; a second `allow` would otherwise go in unnoticed).

// Tests may unwrap: a panic here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// What `cargo tree ARGS` prints, run at the workspace's root.
fn cargo_tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args(["tree", "--offline"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names of the packages `package` depends on (normal dependencies, all the way down).
fn dependency_tree(package: &str) -> BTreeSet<String> {
    cargo_tree(&[
        "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
    ])
    .lines()
    .filter_map(|line| line.split_whitespace().next())
    .map(str::to_string)
    .collect()
}

#[test]
fn the_core_has_no_io_in_its_dependencies() {
    let tree = dependency_tree("ferry-core");
    assert!(tree.contains("ferry-core"), "the tree was read: {tree:?}");
    for banned in ["tokio", "quinn", "quinn-proto", "rusqlite", "axum", "hyper"] {
        assert!(
            !tree.contains(banned),
            "ferry-core depends on {banned}: {tree:?}"
        );
    }
}

#[test]
fn the_kit_does_not_pull_in_the_gateway() {
    let tree = dependency_tree("ferry-kit");
    assert!(tree.contains("ferry-kit"), "the tree was read: {tree:?}");
    for banned in ["rusqlite", "axum", "quinn", "ferry-gateway", "ferry-peer"] {
        assert!(!tree.contains(banned), "ferry-kit depends on {banned}");
    }
}

/// A bare `cargo build --release` at the root (the workspace's default members) compiles the
/// gateway without the test package's fault points and known bugs, which feature unification
/// would otherwise put into its `ferry` (issue 43). `cargo tree` with no `-p` resolves the
/// features exactly as that build does, without building anything.
#[test]
fn the_root_build_turns_on_no_test_only_feature() {
    let tree = cargo_tree(&[
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p} [{f}]",
    ]);
    assert!(
        tree.lines().any(|line| line.starts_with("ferry-gateway ")),
        "the root build builds the gateway: {tree}"
    );
    for line in tree.lines().filter(|line| line.starts_with("ferry-")) {
        assert!(
            !line.contains("fault-injection") && !line.contains("bug-injection"),
            "the root build compiles a test-only feature in: {line}"
        );
    }
}

/// Every `.rs` file under `dir`, build output (`target`) left out.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && path.file_name().is_some_and(|name| name != "target") {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`None`: the crate root).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
}

/// Which top-level modules each top-level module names as `crate::<module>`, outside comments
/// and unit tests.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = top_module(src, &file) else {
            continue;
        };
        if file.file_stem().is_some_and(|stem| stem == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may reach anywhere: a `#[cfg(test)] mod ...` ends what is read (house
        // style: tests last).
        let end = text
            .match_indices("#[cfg(test)]")
            .map(|(at, attr)| at + attr.len())
            .find(|&after| text[after..].trim_start().starts_with("mod "))
            .map_or(text.len(), |after| after - "#[cfg(test)]".len());
        let code: String = text[..end]
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let edges = graph.entry(from.clone()).or_default();
        for to in named_modules(&code) {
            if to != from {
                edges.insert(to);
            }
        }
    }
    graph
}

/// The top-level modules `code` names as `crate::<module>`, including inside grouped imports
/// (`use crate::{a::X, b};`, over several lines too).
fn named_modules(code: &str) -> BTreeSet<String> {
    let ident = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group's top-level items: split on commas outside nested braces.
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

/// The circles of `graph`: its strongly connected components of more than one module.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two modules are on one circle when each reaches the other; with tens of modules, a
    // reachability set per module is plenty.
    let reach = |start: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(module) = stack.pop() {
            for next in graph.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for module in graph.keys() {
        if placed.contains(module) || !reaches[module].contains(module) {
            continue;
        }
        let circle: Vec<String> = graph
            .keys()
            .filter(|other| {
                reaches[module].contains(*other)
                    && reaches.get(other).is_some_and(|r| r.contains(module))
            })
            .cloned()
            .collect();
        placed.extend(circle.iter().cloned());
        found.push(circle);
    }
    found
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = workspace();
    for src in [
        "ticket/src",
        "cache/src",
        "peer/core/src",
        "peer/src",
        "gateway/src",
        "gateway/kit/src",
        "tests/harness/src",
        "tests/bench/src",
    ] {
        let graph = module_graph(&root.join(src));
        assert!(graph.len() > 1, "{src}: no modules found");
        let found = circles(&graph);
        assert!(
            found.is_empty(),
            "{src}: modules import each other: {found:?}"
        );
    }
}

#[test]
fn unsafe_is_allowed_in_one_module_only() {
    let root = workspace();
    let mut files = Vec::new();
    for dir in ["ticket", "cache", "peer", "gateway", "tests", "fuzz"] {
        if root.join(dir).is_dir() {
            sources(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() > 100, "the sources were read: {}", files.len());
    let allows: Vec<String> = files
        .iter()
        .filter(|file| {
            // Any attribute that lets `unsafe_code` through: `allow` or `expect`, alone or in a
            // list, on an item or a whole file.
            std::fs::read_to_string(file).unwrap().lines().any(|line| {
                let line = line.trim_start();
                line.starts_with("#")
                    && (line.contains("allow(") || line.contains("expect("))
                    && line.contains("unsafe_code")
            })
        })
        .map(|file| file.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(
        allows,
        vec!["gateway/src/call_log/mod.rs".to_string()],
        "only `call_log::danger_mapped` may be allowed `unsafe` (its `mod` line is in call_log/mod.rs)"
    );
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("unsafe_code = \"deny\""),
        "the workspace denies unsafe code"
    );
}

#[test]
fn grouped_imports_are_seen() {
    let code = "use crate::{\n    alpha::A,\n    beta::{B, C},\n    gamma,\n};\nfn f() { crate::delta::go() }";
    let names: Vec<String> = named_modules(code).into_iter().collect();
    assert_eq!(names, ["alpha", "beta", "delta", "gamma"]);
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(circles(&graph), vec![vec!["a", "b", "c"]]);
}
