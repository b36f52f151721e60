//! The architecture invariants of ARCHITECTURE.md that are about which code may use what,
//! checked on the source text: module layering (`crate::` paths outside comments), a core
//! without I/O, and Yew and web-sys only under `src/web`.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without its comments (line comments and doc comments).
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules a module's code names through `crate::`.
fn used_modules(module: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for f in rust_files(&src().join(module)) {
        let text = code(&f);
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != module && !name.is_empty() {
                used.insert(name);
            }
        }
    }
    used
}

#[test]
fn modules_depend_only_downward() {
    let allowed: &[(&str, &[&str])] = &[
        ("ir", &[]),
        ("dist", &[]),
        ("plan", &["ir", "dist"]),
        ("spmd", &["ir", "dist"]),
        ("models", &["ir", "plan"]),
        ("passes", &["ir", "dist", "spmd", "plan"]),
        ("exec", &["ir", "dist", "passes"]),
    ];
    for (module, ok) in allowed {
        let bad: Vec<String> = used_modules(module)
            .into_iter()
            .filter(|m| !ok.contains(&m.as_str()))
            .collect();
        assert!(bad.is_empty(), "src/{module} uses crate::{bad:?}");
    }
}

/// The check itself sees a dependency (so an empty result above means something).
#[test]
fn the_layering_check_sees_uses() {
    assert!(used_modules("passes").contains("spmd"));
    assert!(used_modules("exec").contains("passes"));
}

#[test]
fn the_core_has_no_io_and_no_browser() {
    let core = [
        "ir", "dist", "plan", "spmd", "models", "passes", "exec", "session",
    ];
    let mut files: Vec<PathBuf> = core
        .iter()
        .flat_map(|m| rust_files(&src().join(m)))
        .collect();
    files.push(src().join("report.rs"));
    assert!(files.len() > 50, "the core's files were found");
    let io = [
        "std::fs",
        "std::env",
        "std::process",
        "std::net",
        "println!",
        "eprintln!",
        "print!(",
        "eprint!(",
    ];
    let browser = ["yew", "web_sys", "gloo", "js_sys", "wasm_bindgen"];
    for f in &files {
        let text = code(f);
        for word in io.iter().chain(&browser) {
            assert!(
                !text.contains(word),
                "{} uses {word}: only cli does I/O and only web touches the browser",
                f.display()
            );
        }
    }
    // Everything outside src/web stays off Yew and web-sys (main.rs only mounts the app).
    for f in rust_files(&src()) {
        if f.starts_with(src().join("web")) || f.ends_with("main.rs") {
            continue;
        }
        let text = code(&f);
        for word in ["yew::", "web_sys::"] {
            assert!(!text.contains(word), "{} uses {word}", f.display());
        }
    }
}

/// Namescopes are spelled only in `ir::Purpose` (everything else writes and reads them
/// through `Purpose::namescope` and `Op::purpose`).
#[test]
fn namescopes_are_spelled_only_in_purpose() {
    for f in rust_files(&src()) {
        if f.ends_with("ir/purpose.rs") {
            continue;
        }
        assert!(
            !code(&f).contains("/auto_parallel/"),
            "{} spells a namescope; use ir::Purpose",
            f.display()
        );
    }
}
