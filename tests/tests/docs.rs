//! The README and docs/ against the program and against themselves: every long option the
//! command line accepts is documented somewhere, every relative link (and its `#anchor`)
//! leads to a file and a heading that exist, and the README keeps its two set-up commands.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use spacetime_tests::{spacetime_bin, workspace_root};

/// The subcommands whose options a user reads about.
const SUBCOMMANDS: [&str; 7] = [
    "trace", "bench", "watch", "agent", "report", "diff", "doctor",
];

/// README.md, ARCHITECTURE.md, BENCHMARKS.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut pages: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/ exists");
    for entry in docs {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `--name` options on the option lines of `spacetime SUB --help` (not the prose).
fn long_options(sub: &str) -> BTreeSet<String> {
    let out = Command::new(spacetime_bin())
        .args([sub, "--help"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spacetime {sub} --help: {e}"));
    assert!(out.status.success(), "spacetime {sub} --help failed");
    let help = String::from_utf8(out.stdout).expect("UTF-8 help");
    let mut found = BTreeSet::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        for name in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            if name.len() > 2 && name.starts_with("--") {
                found.insert(name.to_string());
            }
        }
    }
    found.remove("--help");
    found.remove("--version");
    assert!(
        !found.is_empty(),
        "no options read from spacetime {sub} --help"
    );
    found
}

#[test]
fn every_long_option_is_documented() {
    let text: String = pages().iter().map(|p| read(p)).collect();
    let mut missing = Vec::new();
    for sub in SUBCOMMANDS {
        for opt in long_options(sub) {
            let documented = text.match_indices(&opt).any(|(i, _)| {
                // `--top` must not be found inside `--top-level`.
                let next = text[i + opt.len()..].chars().next();
                !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            });
            if !documented {
                missing.push(format!("spacetime {sub} {opt}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "options no page of README.md or docs/ mentions: {missing:?}"
    );
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation dropped.
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

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

/// The lines of a page outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The targets of a page's Markdown links that are not URLs: `(path#anchor)`.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            if !target.contains("://") && !target.starts_with("mailto:") {
                links.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    links
}

#[test]
fn every_relative_link_leads_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().expect("a page has a directory");
        for link in relative_links(&text) {
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
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                if !anchors(&read(&target)).contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_keeps_its_two_set_up_commands() {
    let readme = read(&workspace_root().join("README.md"));
    for command in ["cargo xtask run -- trace -- ls -l", "cargo xtask test"] {
        assert!(
            readme.lines().any(|l| l.trim_start().starts_with(command)),
            "the README must show `{command}` as a line of its own"
        );
    }
}
