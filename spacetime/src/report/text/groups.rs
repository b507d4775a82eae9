//! The tree of a large run, grouped: under each node, the children of all its processes that
//! ran the same program make one row (`cc1 ×31`, the largest peak of them, their CPU summed),
//! the way a build runs one compiler per file. The heaviest process, the one that used the
//! most CPU and every failed one are kept as rows of their own under their group, so what
//! matters is never folded away. Built without recursion: a chain of 100 000 shells is a
//! chain of rows.

use std::fmt::Write;

use super::{
    red,
    rows::{clamp_indent, row, Figures, RowLayout},
    sections::heading,
    Options, ProcessReport, Report,
};
use crate::{
    model::{children::Children, labels::basename},
    util::term,
};
use rustc_hash::FxHashMap;

/// A row of the grouped tree.
struct Node {
    kind: Kind,
    /// The processes it stands for (one, or a group's).
    members: Vec<usize>,
    children: Vec<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    One(usize),
    Group,
    /// A member of the group above kept as its own row.
    Kept(usize),
}

/// What groups processes: the program they ran last, and whether they ran none of their own.
fn key<'a>(p: &ProcessReport<'a>) -> (&'a [u8], bool) {
    let own = p.own_images().next_back();
    match own.or_else(|| p.images().next()) {
        Some(img) => (img.program(), own.is_none()),
        None => (b"", true),
    }
}

/// Splits `members` (in start order) by program, in order of each program's first start.
fn partition(r: &Report, members: &[usize]) -> Vec<Vec<usize>> {
    let mut at: FxHashMap<(&[u8], bool), usize> = FxHashMap::default();
    let mut parts: Vec<Vec<usize>> = Vec::new();
    for &m in members {
        let k = key(&r.processes[m]);
        let i = *at.entry(k).or_insert_with(|| {
            parts.push(Vec::new());
            parts.len() - 1
        });
        parts[i].push(m);
    }
    parts
}

fn build(r: &Report, kept: &[bool]) -> (Vec<Node>, Vec<usize>) {
    let n = r.processes.len();
    let children = Children::new(n, |i| r.analysis.parents[i]);
    let roots: Vec<usize> = children.of(n).iter().map(|&i| i as usize).collect();
    let mut nodes: Vec<Node> = Vec::new();
    let make = |nodes: &mut Vec<Node>, members: &[usize]| -> Vec<usize> {
        let mut out = Vec::new();
        for part in partition(r, members) {
            let kind = match part.as_slice() {
                [one] => Kind::One(*one),
                _ => Kind::Group,
            };
            let keep: Vec<usize> = match kind {
                Kind::Group => part.iter().copied().filter(|&m| kept[m]).collect(),
                _ => Vec::new(),
            };
            nodes.push(Node {
                kind,
                members: part,
                children: Vec::new(),
            });
            let id = nodes.len() - 1;
            for m in keep {
                nodes.push(Node {
                    kind: Kind::Kept(m),
                    members: vec![m],
                    children: Vec::new(),
                });
                let k = nodes.len() - 1;
                nodes[id].children.push(k);
            }
            out.push(id);
        }
        out
    };
    let top = make(&mut nodes, &roots);
    let mut work: Vec<usize> = top.clone();
    while let Some(id) = work.pop() {
        if matches!(nodes[id].kind, Kind::Kept(_)) {
            continue;
        }
        let mut kids: Vec<usize> = nodes[id]
            .members
            .iter()
            .flat_map(|&m| children.of(m).iter().map(|&k| k as usize))
            .collect();
        kids.sort_unstable();
        let made = make(&mut nodes, &kids);
        work.extend(&made);
        nodes[id].children.extend(made);
    }
    (nodes, top)
}

/// A group's row: its size, largest peak, CPU and failures, and the program's name.
fn group_row(node: &Node, r: &Report, indent: &str, width: usize) -> String {
    let procs = || node.members.iter().map(|&m| &r.processes[m]);
    let lay = RowLayout::for_width(width);
    let failed = procs().filter(|p| p.failed()).count();
    let mut s = lay.figures(
        &Figures::Group {
            count: node.members.len(),
            peak_rss_bytes: procs().map(|p| p.peak_rss_bytes()).max().unwrap_or(0),
            cpu_ns: procs().map(|p| p.cpu_ns()).sum(),
            failed,
        },
        r,
    );
    let room = width.saturating_sub(term::width(&s));
    s.push_str(&clamp_indent(indent, room));
    let first = &r.processes[node.members[0]];
    let (exe, fork) = key(first);
    let mut name = String::new();
    if fork {
        name.push_str("(fork) ");
    }
    name.push_str(&term::escape(basename(exe)));
    if !lay.has_exit() && failed > 0 {
        name = format!("[{failed} failed] {name}");
    }
    let _ = write!(name, " ×{}", node.members.len());
    let left = width.saturating_sub(term::width(&s)).max(8);
    s + &term::fit(&name, left)
}

/// The grouped tree, at most `--top` rows.
pub(super) fn grouped(out: &mut String, r: &Report, width: usize, wide: bool, o: &Options) {
    let mut kept = vec![false; r.processes.len()];
    for &f in &r.analysis.failures {
        kept[f] = true;
    }
    for p in r.top_by(1, |p| p.peak_rss_bytes()) {
        kept[p.pos()] = true;
    }
    for p in r.top_by(1, |p| p.cpu_ns()) {
        kept[p.pos()] = true;
    }
    let (nodes, top) = build(r, &kept);
    heading(
        out,
        &format!(
            "{} processes, each program's runs under one parent grouped (the heaviest, the busiest and the failed kept as rows; --top 0 lists all):",
            r.processes.len()
        ),
        width,
    );
    let _ = writeln!(out, "{}", RowLayout::for_width(width).header());
    let mut shown = 0;
    let mut stack: Vec<(usize, String, bool, bool)> = top
        .iter()
        .rev()
        .map(|&i| (i, String::new(), true, true))
        .collect();
    while let Some((id, prefix, last, is_top)) = stack.pop() {
        if shown == o.top.max(8) {
            // Every node is a row.
            let left = nodes.len() - shown;
            let _ = writeln!(out, "  … {left} more rows");
            break;
        }
        shown += 1;
        let node = &nodes[id];
        let branch = if is_top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "└─ " } else { "├─ " })
        };
        let line = match node.kind {
            Kind::One(p) | Kind::Kept(p) => row(&r.processes[p], r, &branch, width, wide),
            Kind::Group => group_row(node, r, &branch, width),
        };
        let failed = match node.kind {
            Kind::One(p) | Kind::Kept(p) => r.processes[p].failed(),
            Kind::Group => false,
        };
        let line = term::fit(&line, width);
        let _ = writeln!(out, "{}", if failed { red(&line, o.style) } else { line });
        let child_prefix = if is_top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "   " } else { "│  " })
        };
        let kids = &node.children;
        for (n, &k) in kids.iter().enumerate().rev() {
            stack.push((k, child_prefix.clone(), n + 1 == kids.len(), false));
        }
    }
}
