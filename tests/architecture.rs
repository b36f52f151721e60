//! The architecture invariants of ARCHITECTURE.md that are about which code may use what,
//! checked on the source text: module layering (`crate::` paths outside comments), a core
//! without I/O, Yew and web-sys only under `src/web`, typed errors outside the shells.
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
    // A module is a folder (`src/passes/`) or one file (`src/report.rs`).
    let dir = src().join(module);
    let files = if dir.is_dir() {
        rust_files(&dir)
    } else {
        vec![src().join(format!("{module}.rs"))]
    };
    for f in files {
        let text = code(&f);
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::slots!` is a macro at the crate root (exported from `ir`), not a module.
            let is_macro = text[i + 7 + name.len()..].starts_with('!');
            if name != module && !name.is_empty() && !is_macro {
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
        ("import", &["ir", "dist", "plan"]),
        ("passes", &["ir", "dist", "spmd", "plan"]),
        ("exec", &["ir", "dist", "passes"]),
        ("cost", &["ir", "dist", "plan", "passes"]),
        ("export", &["ir", "dist", "passes", "exec"]),
        (
            "suggest",
            &["ir", "dist", "plan", "models", "passes", "cost"],
        ),
        // The shells: the report, the page's messages, the session (below the engine, which
        // opens sessions to do their jobs), the engine, and the two front ends.
        ("report", &["ir", "dist", "passes", "cost"]),
        ("protocol", &["ir", "dist", "exec", "cost", "export"]),
        (
            "session",
            &[
                "ir", "dist", "plan", "spmd", "models", "passes", "exec", "cost", "export",
                "suggest", "protocol",
            ],
        ),
        (
            "engine",
            &[
                "ir", "dist", "plan", "models", "passes", "exec", "cost", "export", "suggest",
                "protocol", "session", "import",
            ],
        ),
        (
            "cli",
            &[
                "ir", "dist", "plan", "spmd", "models", "passes", "exec", "cost", "export",
                "suggest", "report", "import",
            ],
        ),
        (
            "web",
            &[
                "ir", "dist", "plan", "spmd", "models", "passes", "exec", "cost", "export",
                "suggest", "report", "protocol", "session", "engine",
            ],
        ),
    ];
    for (module, ok) in allowed {
        // `sort` and `cores` are leaves every layer may use (the crate's one stable sort,
        // the cores read once).
        let bad: Vec<String> = used_modules(module)
            .into_iter()
            .filter(|m| !ok.contains(&m.as_str()) && m != "sort" && m != "cores")
            .collect();
        assert!(bad.is_empty(), "src/{module} uses crate::{bad:?}");
    }
}

/// The standard library's stable sorts are instantiated once per call site (~3-5 KB of
/// wasm each): the library sorts through `crate::sort`, whose one instance serves all.
#[test]
fn stable_sorts_go_through_the_one_sort() {
    let calls = [
        ".sort()",
        ".sort_by(",
        ".sort_by_key(",
        ".sort_by_cached_key(",
    ];
    let mut found = Vec::new();
    for f in rust_files(&src()) {
        if f.ends_with("sort.rs") {
            continue;
        }
        let text = code(&f);
        for call in calls {
            if text.contains(call) {
                found.push(format!("{}: {call}", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "use crate::sort instead: {found:?}");
    // The check sees what it looks for: the one sort itself calls the standard one.
    assert!(code(&src().join("sort.rs")).contains(".sort_by("));
}

/// The standard library reads the cores from cgroup files on every call: the crate asks
/// `crate::cores`, which reads them once.
#[test]
fn the_cores_are_read_once() {
    let mut found = Vec::new();
    for f in rust_files(&src()) {
        if !f.ends_with("cores.rs") && code(&f).contains("available_parallelism") {
            found.push(f.display().to_string());
        }
    }
    assert!(found.is_empty(), "use crate::cores::cores(): {found:?}");
    assert!(code(&src().join("cores.rs")).contains("available_parallelism"));
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
        "ir", "dist", "plan", "spmd", "models", "passes", "exec", "session", "cost", "suggest",
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

/// The longest a function may be. Longer ones are listed in `LONG_FUNCTIONS` with the
/// length they have now, exactly: a function that shrinks must have its entry lowered (or
/// removed), one that grows fails, and new ones may not join (a ratchet).
const MAX_FN_LINES: usize = 80;

/// (file under src/, function, lines): the functions longer than `MAX_FN_LINES`. The Yew
/// components are view templates (one `html!` each); the rest are dispatch tables and
/// passes that are still to be split.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[
    ("web/program_view.rs", "ProgramView", 152),
    ("web/app.rs", "App", 137),
    ("cli/run.rs", "run", 107),
    ("spmd/cases.rs", "case_rule", 88),
    ("web/mesh_editor.rs", "MeshEditor", 116),
    ("passes/backward.rs", "append_backward", 122),
    ("exec/gather.rs", "gather", 107),
    ("spmd/registry.rs", "forward_rule", 83),
    ("passes/optimizer.rs", "append_optimizer", 84),
    ("exec/bound/optim.rs", "adam", 99),
    ("web/inspector.rs", "Inspector", 91),
    ("passes/complete/mod.rs", "complete_from", 92),
    ("passes/complete/print.rs", "explain_text", 85),
    ("plan/parse.rs", "parse_shard", 82),
];

/// Every function of `text` as (name, lines): from its `fn` line to the closing brace at
/// the same indentation (rustfmt's layout).
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let rest = line.trim_start();
        let rest = rest.strip_prefix("pub ").unwrap_or(rest);
        let rest = rest
            .strip_prefix("pub(crate) ")
            .or_else(|| rest.strip_prefix("pub(super) "))
            .unwrap_or(rest);
        let rest = rest.strip_prefix("const ").unwrap_or(rest);
        if let Some(sig) = rest.strip_prefix("fn ") {
            let name: String = sig
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let close = format!("{}}}", " ".repeat(indent));
            if !line.trim_end().ends_with(';') {
                if let Some(end) = (i + 1..lines.len()).find(|&j| lines[j] == close) {
                    out.push((name, end - i + 1));
                    i = end;
                }
            }
        }
        i += 1;
    }
    out
}

/// Every source file under `src/`: its path relative to `src/` (with `/`) and its text.
fn sources() -> Vec<(String, String)> {
    let root = src();
    rust_files(&root)
        .into_iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(&f).unwrap())
        })
        .collect()
}

#[test]
fn functions_stay_short() {
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for (rel, text) in sources() {
        for (name, n) in function_lengths(&text) {
            if n <= MAX_FN_LINES {
                continue;
            }
            let entry = LONG_FUNCTIONS
                .iter()
                .find(|(file, fname, _)| *file == rel && *fname == name);
            if entry.is_some() {
                seen.push((rel.clone(), name.clone()));
            }
            match entry {
                Some((_, _, was)) if n == *was => {}
                Some((_, _, was)) if n < *was => problems.push(format!(
                    "{rel}: {name} shrank to {n} lines (was {was}): record {n} in LONG_FUNCTIONS"
                )),
                Some((_, _, was)) => {
                    problems.push(format!("{rel}: {name} grew to {n} lines (was {was})"))
                }
                None => problems.push(format!(
                    "{rel}: {name} has {n} lines; split it (at most {MAX_FN_LINES})"
                )),
            }
        }
    }
    // A ratchet holds only if it follows the code down: an entry whose function is gone or
    // no longer long would let it grow back unseen.
    for (file, name, was) in LONG_FUNCTIONS {
        if !seen.iter().any(|(f, n)| f == file && n == name) {
            problems.push(format!(
                "{file}: {name} (recorded {was} lines) is gone or at most {MAX_FN_LINES} \
                 lines: remove its LONG_FUNCTIONS entry"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_length_check_measures_functions() {
    let text =
        "fn a() {\n    x;\n}\n\nimpl T {\n    pub fn b(&self) -> u8 {\n        1\n    }\n}\n";
    assert_eq!(
        function_lengths(text),
        vec![("a".to_string(), 3), ("b".to_string(), 3)]
    );
}

/// No source file over this many lines: a file has one purpose, and one purpose fits.
const MAX_FILE_LINES: usize = 600;

/// Files still over [`MAX_FILE_LINES`], with their length: each may only shrink, and its
/// entry goes when it is under. All three are op tables that the op registry (one op, one
/// place) splits by op.
const LONG_FILES: &[(&str, usize)] = &[];

#[test]
fn files_stay_short() {
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for (rel, text) in sources() {
        let n = text.lines().count();
        let entry = LONG_FILES.iter().find(|(file, _)| *file == rel);
        if entry.is_some() {
            seen.push(rel.clone());
        }
        match entry {
            Some((_, was)) if n == *was => {}
            Some((_, was)) if n < *was && n > MAX_FILE_LINES => problems.push(format!(
                "{rel} shrank to {n} lines (was {was}): record {n} in LONG_FILES"
            )),
            Some((_, _)) if n <= MAX_FILE_LINES => {
                problems.push(format!("{rel} has {n} lines: remove its LONG_FILES entry"))
            }
            Some((_, was)) => problems.push(format!("{rel} grew to {n} lines (was {was})")),
            None if n > MAX_FILE_LINES => problems.push(format!(
                "{rel} has {n} lines; split it by purpose (at most {MAX_FILE_LINES})"
            )),
            None => {}
        }
    }
    for (file, _) in LONG_FILES {
        if !seen.iter().any(|f| f == file) {
            problems.push(format!("{file} is gone: remove its LONG_FILES entry"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Lines of `text` (comments dropped) that return a bare message as an error.
fn string_errors(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| {
            l.find("Result<")
                .is_some_and(|i| l[i..].contains(", String>"))
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// The core's errors are typed enums; only the shells, which print them, pass messages.
#[test]
fn only_the_shells_return_string_errors() {
    let problems: Vec<String> = sources()
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("cli/") && !rel.starts_with("web/"))
        .flat_map(|(rel, text)| {
            string_errors(&text)
                .into_iter()
                .map(move |l| format!("{rel}: `{l}`: return a typed error"))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_string_error_check_sees_them() {
    let text = "type Res<T> = Result<T, String>;\nfn f() -> Result<usize, String> {}\n\
                // Result<(), String> in a comment\nfn g() -> Result<(), MyError> {}\n";
    assert_eq!(string_errors(text).len(), 2);
}

/// Lines that case-map Unicode text (`to_lowercase`, `to_uppercase`): each links the
/// Unicode case tables, about 10 KB of the playground's gzipped page module
/// (docs/benchmarks.md). Our names, keywords and answers are ASCII.
fn unicode_case_maps(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| l.contains(".to_lowercase()") || l.contains(".to_uppercase()"))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn the_browser_code_lowercases_ascii_only() {
    let problems: Vec<String> = sources()
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("cli/"))
        .flat_map(|(rel, text)| {
            unicode_case_maps(&text)
                .into_iter()
                .map(move |l| format!("{rel}: `{l}`: use to_ascii_lowercase"))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_case_map_check_sees_them() {
    let text = "let a = s.to_lowercase();\n// s.to_uppercase() in a comment\n\
                let b = s.to_ascii_lowercase();\nlet c = t.to_uppercase();\n";
    assert_eq!(unicode_case_maps(text).len(), 2);
}
