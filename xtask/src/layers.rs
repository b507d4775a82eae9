//! The layering of `spacetime/src`, checked: every file lives in one layer folder and names
//! only its own layer and those below it. The order, lowest first, is the one ARCHITECTURE.md
//! draws: util → kernel → model → report → run → cmd.
//!
//! What counts as naming a layer: a `crate::LAYER` path anywhere in code (a `use`, a
//! qualified call, a type), a `use crate::{LAYER…}` group, and a `super::` chain that climbs
//! to the crate root and names a layer from there. Comments and string literals are not code.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// The layers, lowest first.
pub const LAYERS: [&str; 6] = ["util", "kernel", "model", "report", "run", "cmd"];

/// A file that names a layer above its own.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation {
    pub file: String,
    pub line: usize,
    pub from: &'static str,
    pub to: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {} names {}, a layer above it (imports point down: {})",
            self.file,
            self.line,
            self.from,
            self.to,
            LAYERS.iter().rev().copied().collect::<Vec<_>>().join(" → ")
        )
    }
}

/// What the check found in a source tree.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<Violation>,
    /// Files under src/ outside every layer folder (lib.rs and main.rs excepted).
    pub outside: Vec<String>,
    /// `unsafe` blocks, and `unsafe fn`/`unsafe impl` items, in code.
    pub unsafe_blocks: usize,
    pub unsafe_items: usize,
    /// Files over the line limit, with their line counts.
    pub long_files: Vec<(String, usize)>,
}

/// Most lines a file of spacetime/src may have.
pub const MAX_FILE_LINES: usize = 700;

fn layer_rank(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

/// Checks every `.rs` file below `src`.
pub fn check(src: &Path) -> Result<Findings> {
    let mut files = Vec::new();
    walk(src, &mut files)?;
    files.sort();
    let mut out = Findings::default();
    for path in files {
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let rel_s = rel.to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            out.long_files.push((rel_s.clone(), lines));
        }
        let code = strip_comments_and_strings(&text);
        let (blocks, items) = count_unsafe(&code);
        out.unsafe_blocks += blocks;
        out.unsafe_items += items;
        let module = module_path(rel);
        let Some(from) = module.first().and_then(|m| layer_rank(m)) else {
            if rel_s != "lib.rs" && rel_s != "main.rs" {
                out.outside.push(rel_s);
            }
            continue;
        };
        for (line, to) in named_layers(&code, &module) {
            if to > from {
                out.violations.push(Violation {
                    file: rel_s.clone(),
                    line,
                    from: LAYERS[from],
                    to: LAYERS[to],
                });
            }
        }
    }
    Ok(out)
}

pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The module a file is, as components below the crate root: `kernel/remote/mod.rs` is
/// `kernel::remote`, `kernel/remote/client.rs` is `kernel::remote::client`. A `foo_tests.rs`
/// included with `#[path]` sits in its folder like any sibling, which is what `super` sees
/// from it closely enough: it never climbs out of its layer in practice, and if it did the
/// climb would be checked from the folder.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// Every layer `code` names, with the line it is named on.
fn named_layers(code: &str, module: &[String]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = find_path_start(rest) {
            let (path, after) = take_path(&rest[at..]);
            if let Some(layer) = resolve(&path, module) {
                out.push((i + 1, layer));
            }
            rest = after;
        }
    }
    // `use crate::{kernel::…, model::…}` over several lines: the group's items.
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::{") {
        let start = from + at + "crate::{".len();
        let line = code[..start].lines().count().max(1);
        let mut depth = 1;
        let mut end = start;
        for (j, ch) in code[start..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = start + j;
                break;
            }
        }
        for item in top_level_items(&code[start..end]) {
            if let Some(layer) = item
                .split(|c: char| c == ':' || c.is_whitespace())
                .next()
                .and_then(layer_rank)
            {
                out.push((line, layer));
            }
        }
        from = end.max(start);
    }
    out
}

/// Where the next `crate::` or `super::` path starts in `s` (not inside an identifier).
fn find_path_start(s: &str) -> Option<usize> {
    let mut best: Option<usize> = None;
    for pat in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = s[from..].find(pat) {
            let at = from + at;
            let prev = s[..at].chars().next_back();
            if !prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                best = Some(best.map_or(at, |b| b.min(at)));
                break;
            }
            from = at + pat.len();
        }
    }
    best
}

/// The `a::b::c` path at the start of `s`, split, and what follows it.
fn take_path(s: &str) -> (Vec<&str>, &str) {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    let path = s[..end].split("::").filter(|p| !p.is_empty()).collect();
    (path, &s[end..])
}

/// The layer a path names, seen from `module`, if it leaves the module's own layer by the
/// crate root.
fn resolve(path: &[&str], module: &[String]) -> Option<usize> {
    match path.first() {
        Some(&"crate") => path.get(1).and_then(|l| layer_rank(l)),
        Some(&"super") => {
            let ups = path.iter().take_while(|p| **p == "super").count();
            // `super` of a module is its parent: climbing `ups` levels from a module `depth`
            // deep reaches the root when ups >= depth.
            if ups >= module.len() {
                path.get(ups).and_then(|l| layer_rank(l))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn top_level_items(group: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, ch) in group.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(group[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// `unsafe {` blocks, and `unsafe fn` / `unsafe impl` / `unsafe extern` items.
fn count_unsafe(code: &str) -> (usize, usize) {
    let mut blocks = 0;
    let mut items = 0;
    let mut from = 0;
    while let Some(at) = code[from..].find("unsafe") {
        let at = from + at;
        from = at + "unsafe".len();
        let before = code[..at].chars().next_back();
        let after = code[from..].chars().next();
        let word = !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !word {
            continue;
        }
        let next = code[from..].trim_start();
        if next.starts_with('{') {
            blocks += 1;
        } else if next.starts_with("fn")
            || next.starts_with("impl")
            || next.starts_with("extern")
            || next.starts_with("trait")
        {
            items += 1;
        }
    }
    (blocks, items)
}

/// The code with comments and the insides of string and char literals blanked (newlines
/// kept, so line numbers hold).
pub(crate) fn strip_comments_and_strings(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &str| {
        out.extend(s.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = src[i..].find('\n').map_or(b.len(), |e| i + e);
            blank(&mut out, &src[i..end]);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            blank(&mut out, &src[i..end]);
            i = end;
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            let end = src[body..]
                .find(&close)
                .map_or(b.len(), |e| body + e + close.len());
            blank(&mut out, &src[i..end]);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, &src[i..end]);
            i = end;
        } else {
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Files over [`MAX_FILE_LINES`] in the other crates (`dirs`, relative to `root`): the limit
/// holds for the whole workspace, not only for spacetime/src.
pub fn long_files(root: &Path, dirs: &[&str]) -> Result<Vec<(String, usize)>> {
    let mut files = Vec::new();
    for d in dirs {
        walk(&root.join(d), &mut files)?;
    }
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push((rel.to_string_lossy().into_owned(), lines));
        }
    }
    Ok(out)
}

/// `cargo xtask lint`'s layer step: fails on a violation or a file outside the layers;
/// prints the unsafe count either way.
pub fn lint(src: &Path) -> Result<()> {
    let f = check(src)?;
    eprintln!(
        "xtask: layers: {} unsafe blocks, {} unsafe fn/impl items in spacetime/src",
        f.unsafe_blocks, f.unsafe_items
    );
    for v in &f.violations {
        eprintln!("  {v}");
    }
    for o in &f.outside {
        eprintln!("  {o}: outside every layer folder ({})", LAYERS.join(", "));
    }
    for (file, n) in &f.long_files {
        eprintln!("  {file}: {n} lines, over the {MAX_FILE_LINES}-line limit");
    }
    if !f.violations.is_empty() || !f.outside.is_empty() || !f.long_files.is_empty() {
        bail!(
            "the layering of spacetime/src is broken: {} upward imports, {} files outside the \
             layers, {} files too long",
            f.violations.len(),
            f.outside.len(),
            f.long_files.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempdir::Dir {
        let d = tempdir::Dir::new();
        for (path, text) in files {
            let p = d.0.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        d
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "xtask-layers-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn downward_imports_pass() {
        let d = tree(&[
            ("lib.rs", "pub mod util; pub mod model;"),
            ("util/clock.rs", "pub fn now() {}"),
            (
                "model/tree.rs",
                "use crate::util::clock;\nuse crate::{kernel::events, util::units};\n",
            ),
        ]);
        let f = check(&d.0).unwrap();
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert!(f.outside.is_empty(), "{:?}", f.outside);
    }

    #[test]
    fn a_lower_layer_naming_a_higher_one_fails() {
        let d = tree(&[
            ("util/units.rs", "fn f() { crate::run::session::go(); }\n"),
            (
                "model/memory.rs",
                "use crate::{\n    kernel::events,\n    report::status::StatusLine,\n};\n",
            ),
            (
                "kernel/remote/client.rs",
                "use super::super::super::cmd::agent;\n",
            ),
        ]);
        let f = check(&d.0).unwrap();
        let got: Vec<_> = f
            .violations
            .iter()
            .map(|v| (v.file.as_str(), v.from, v.to))
            .collect();
        assert!(got.contains(&("util/units.rs", "util", "run")), "{got:?}");
        assert!(
            got.contains(&("model/memory.rs", "model", "report")),
            "{got:?}"
        );
        assert!(
            got.contains(&("kernel/remote/client.rs", "kernel", "cmd")),
            "{got:?}"
        );
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(lint(&d.0).is_err());
    }

    #[test]
    fn comments_and_strings_are_not_imports() {
        let d = tree(&[(
            "util/term.rs",
            "// see crate::cmd::trace\n/// [`crate::run::session`]\nconst S: &str = \"crate::cmd::x\";\nconst R: &str = r#\"crate::run\"#;\n",
        )]);
        let f = check(&d.0).unwrap();
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn files_outside_the_layers_and_unsafe_are_found() {
        let d = tree(&[
            ("lib.rs", ""),
            ("stray.rs", "fn f() { unsafe { g() } }\nunsafe fn g() {}\n"),
        ]);
        let f = check(&d.0).unwrap();
        assert_eq!(f.outside, vec!["stray.rs".to_string()]);
        assert_eq!((f.unsafe_blocks, f.unsafe_items), (1, 1));
    }
}
