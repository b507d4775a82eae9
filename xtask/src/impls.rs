//! One type, one place: a type's inherent impl blocks (`impl Type { … }`, not `impl Trait for
//! Type`) may sit in two files of `spacetime/src` at most. A type whose methods spread wider
//! has more than one responsibility: split it into types that each own their state, rather
//! than spread one over more files to meet the file-size limit.
//!
//! Read from the code without comments and strings: an `impl` item (at the start of a line's
//! item position, after `;`, `}`, `{`, `]` or `unsafe`) whose header names no trait. The type
//! is the header's last path segment before its generics (`Store<Kept>` is `Store`); a type
//! alias is not resolved.

use std::{collections::BTreeMap, path::Path};

use anyhow::{bail, Context, Result};

use crate::layers::{strip_comments_and_strings, walk};

/// Most files a type's inherent impl blocks may sit in.
pub const MAX_FILES: usize = 2;

/// Each type with inherent impl blocks (its name, and where it is defined when that is found
/// in `src`), and the files they sit in (relative to `src`).
pub fn inherent_impls(src: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let mut files = Vec::new();
    walk(src, &mut files)?;
    files.sort();
    let mut code = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let rel = rel.to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        code.push((rel, strip_comments_and_strings(&text)));
    }
    // Where each name is defined: two types of one name in two modules are two types.
    let mut defined: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (rel, code) in &code {
        for name in defined_types(code) {
            defined.entry(name).or_default().push(rel);
        }
    }
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, code) in &code {
        for ty in inherent_types(code) {
            let key = match defined.get(&ty).and_then(|d| definition_of(d, rel)) {
                Some(at) => format!("{ty} (defined in {at})"),
                None => ty,
            };
            let files = out.entry(key).or_default();
            if !files.contains(rel) {
                files.push(rel.clone());
            }
        }
    }
    Ok(out)
}

/// The names of the structs, enums, unions and type aliases `code` defines.
fn defined_types(code: &str) -> Vec<String> {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| matches!(w[0], "struct" | "enum" | "union" | "type"))
        .map(|w| w[1].to_string())
        .collect()
}

/// The module path of a file below src: `a/b/mod.rs` and `a/b.rs` are both `a/b`.
fn module_of(rel: &str) -> Vec<&str> {
    let rel = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<&str> = rel.split('/').collect();
    if parts.last() == Some(&"mod") {
        parts.pop();
    }
    parts
}

/// Of the files defining a name, the one an impl in `at` is for: the innermost module that
/// contains `at`'s (an impl sits in its type's module or below it), else the closest.
fn definition_of<'a>(defs: &[&'a str], at: &str) -> Option<&'a str> {
    let here = module_of(at);
    let common = |d: &str| {
        let m = module_of(d);
        let n = m.iter().zip(&here).take_while(|(a, b)| a == b).count();
        (n == m.len(), n)
    };
    defs.iter().copied().max_by_key(|d| common(d))
}

/// The types over [`MAX_FILES`], not allowed, with their files.
pub fn spread(src: &Path) -> Result<Vec<(String, Vec<String>)>> {
    Ok(inherent_impls(src)?
        .into_iter()
        .filter(|(_, files)| files.len() > MAX_FILES)
        .collect())
}

/// Fails naming each type whose inherent impl blocks sit in more than [`MAX_FILES`] files.
pub fn lint(src: &Path) -> Result<()> {
    let spread = spread(src)?;
    for (ty, files) in &spread {
        eprintln!(
            "  {ty}: inherent impl blocks in {} files ({}), over {MAX_FILES}: split it into \
             types that each own their state",
            files.len(),
            files.join(", ")
        );
    }
    if !spread.is_empty() {
        bail!(
            "{} types have inherent impl blocks in more than {MAX_FILES} files",
            spread.len()
        );
    }
    Ok(())
}

/// The self types of the inherent impl items in `code` (comments and strings blanked).
fn inherent_types(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("impl").map(|i| from + i) {
        from = at + 4;
        let word_before = at > 0 && is_ident(b[at - 1]);
        let word_after = b.get(at + 4).is_some_and(|&c| is_ident(c));
        if word_before || word_after || !item_position(&code[..at]) {
            continue;
        }
        let Some(header) = header(&code[at + 4..]) else {
            continue;
        };
        if let Some(ty) = inherent_self_type(header) {
            out.push(ty);
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether an `impl` right after `before` starts an item (not `-> impl Trait` or
/// `x: impl Fn()`).
fn item_position(before: &str) -> bool {
    let t = before.trim_end();
    let t = t.strip_suffix("unsafe").map_or(t, str::trim_end);
    matches!(t.as_bytes().last(), None | Some(b';' | b'}' | b'{' | b']'))
}

/// An impl header up to its body's `{`, generics after `impl` removed.
fn header(rest: &str) -> Option<&str> {
    let mut rest = rest.trim_start();
    if rest.starts_with('<') {
        rest = &rest[close_angle(rest)?..];
    }
    let end = rest.find('{')?;
    Some(rest[..end].trim())
}

/// The index just past the `>` closing the `<` that `s` starts with (`->` is no bracket).
fn close_angle(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'<' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The self type's name when the header names no trait (`Type<…> where …`).
fn inherent_self_type(header: &str) -> Option<String> {
    let header = header.strip_prefix('!').unwrap_or(header);
    // The part at angle depth 0 before a `where`: a ` for ` there makes it a trait impl.
    let mut depth = 0usize;
    let b = header.as_bytes();
    let mut top = String::new();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'<' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => top.push(c as char),
            _ => {}
        }
    }
    let words: Vec<&str> = top.split_whitespace().collect();
    let words = match words.iter().position(|w| *w == "where") {
        Some(w) => &words[..w],
        None => &words[..],
    };
    if words.contains(&"for") {
        return None;
    }
    let ty = words.iter().rev().find(|w| !matches!(**w, "dyn" | "mut"))?;
    let name = ty.trim_start_matches(['&', '(']).rsplit("::").next()?;
    let name: String = name
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherent_impls_are_found_and_trait_impls_are_not() {
        let code = strip_comments_and_strings(
            "impl Store {}\nimpl<S: Storage> Store<S> where S: Clone {}\n\
             impl<'a> fmt::Display for Row<'a> {}\nimpl<F: Fn() -> u32> Deref for Wrap<F> {}\n\
             unsafe impl Send for Raw {}\n#[cfg(test)]\nimpl crate::model::Table {}\n\
             fn f() -> impl Iterator<Item = u8> { todo!() }\nfn g(x: impl Fn()) {}\n\
             // impl Commented {}\nconst S: &str = \"impl Quoted {}\";\nimpl Tail<Kept> {}\n",
        );
        assert_eq!(inherent_types(&code), ["Store", "Store", "Table", "Tail"]);
    }

    #[test]
    fn a_type_in_three_files_fails_naming_them() {
        let d = std::env::temp_dir().join(format!("xtask-impls-{}", std::process::id()));
        let files = [
            ("model/a.rs", "impl Wide { fn a() {} }\nimpl Narrow {}\n"),
            ("model/b.rs", "impl Wide { fn b() {} }\nimpl Narrow {}\n"),
            (
                "model/c.rs",
                "impl<T> Wide<T> { fn c() {} }\nimpl Clone for Narrow {}\n",
            ),
        ];
        for (p, text) in files {
            let p = d.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let got = spread(&d);
        let lint_failed = lint(&d).is_err();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(
            got.unwrap(),
            [(
                "Wide".to_string(),
                vec![
                    "model/a.rs".to_string(),
                    "model/b.rs".to_string(),
                    "model/c.rs".to_string()
                ]
            )]
        );
        assert!(lint_failed, "a type in three files must fail the lint");
    }

    #[test]
    fn two_types_of_one_name_in_two_modules_are_two_types() {
        let d = std::env::temp_dir().join(format!("xtask-impls-two-{}", std::process::id()));
        let files = [
            ("report/rows.rs", "pub struct Layout;\nimpl Layout {}\n"),
            ("report/rows/wide.rs", "impl Layout {}\n"),
            ("cmd/watch/layout.rs", "struct Layout;\nimpl Layout {}\n"),
            ("cmd/watch/out.rs", "impl super::layout::Layout {}\n"),
        ];
        for (p, text) in files {
            let p = d.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let got = inherent_impls(&d);
        let _ = std::fs::remove_dir_all(&d);
        let got = got.unwrap();
        assert_eq!(
            got.get("Layout (defined in report/rows.rs)").map(Vec::len),
            Some(2),
            "{got:?}"
        );
        assert_eq!(
            got.get("Layout (defined in cmd/watch/layout.rs)")
                .map(Vec::len),
            Some(2),
            "{got:?}"
        );
    }
}
