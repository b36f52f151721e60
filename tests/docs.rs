//! The front door and the book stay what they claim: the README under 250 lines, every
//! page of `docs/` in the book's summary, and every relative link of the README,
//! ARCHITECTURE.md and the book pointing at a file that exists (and, with `#anchor`, at a
//! heading of that file). `scripts/test.sh` builds the book with mdBook.
#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The markdown pages checked: the README, ARCHITECTURE.md and every page of the book.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    let mut book: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    book.sort();
    out.extend(book);
    out
}

/// The targets of `[text](target)` links, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// mdBook's and GitHub's anchor of a heading: lower case, spaces as dashes, other
/// punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn the_readme_is_a_front_door() {
    let n = read(&root().join("README.md")).lines().count();
    assert!(
        n < 250,
        "README.md has {n} lines; the guide belongs in docs/"
    );
}

#[test]
fn every_page_is_in_the_summary() {
    let summary = read(&root().join("docs/SUMMARY.md"));
    let listed = links(&summary);
    for page in pages().iter().skip(2) {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        if name == "SUMMARY.md" {
            continue;
        }
        assert!(
            listed.contains(&name),
            "docs/{name} is not in docs/SUMMARY.md"
        );
    }
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if let Some(a) = anchor.filter(|_| target.extension().is_some_and(|e| e == "md")) {
                if !anchors(&read(&target)).iter().any(|h| h == a) {
                    broken.push(format!("{}: {link}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_link_checker_finds_what_is_broken() {
    assert_eq!(
        links("see [a](b.md#c) and `[x](y)`\n```\n[no](z)\n```"),
        vec!["b.md#c", "y"]
    );
    assert_eq!(slug(" Known blind spots"), "known-blind-spots");
    assert_eq!(slug("The plan format, and why"), "the-plan-format-and-why");
}

/// The plan format's table of ops is the registry's, row for row: a new or changed op fails
/// here until the book says so.
#[test]
fn the_book_lists_every_op_as_declared() {
    use shardlab::ir::{Arity, ForwardOp, SlotSpec};
    let slots = |s: &[SlotSpec]| {
        s.iter()
            .map(|x| match x.arity {
                Arity::One => x.name.to_string(),
                Arity::Optional => format!("{}?", x.name),
                Arity::List | Arity::Many => format!("[{}]", x.name),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = read(&root().join("docs/plan-format.md"));
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("| op | family |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    let want: Vec<String> = ForwardOp::ALL
        .iter()
        .map(|f| {
            let d = f.def();
            let attrs = d
                .attrs
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "| `{}` | {:?} | {} | {} | {} | `{}` |",
                d.name,
                d.family,
                slots(d.inputs),
                slots(d.outputs),
                if attrs.is_empty() { "-".into() } else { attrs },
                d.pir_name
            )
        })
        .collect();
    assert_eq!(rows, want, "docs/plan-format.md's table of ops");
}
