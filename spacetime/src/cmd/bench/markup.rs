//! The comparison as a table to paste, in hyperfine's three markup dialects (Markdown,
//! AsciiDoc, org-mode) and its columns (mean ± σ, min, max in one unit, relative), with
//! memory beside time.

use super::{
    args::TimeUnit,
    compare::{Comparison, Metric},
    model::CommandResult,
    stats::Stats,
    summary::Layout,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Markdown,
    AsciiDoc,
    OrgMode,
}

/// How the tables are ordered.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `--sort mean-time`: by mean time; else as given.
    pub by_time: bool,
}

/// Left-aligned (the command) or right-aligned (figures).
const ALIGN: [bool; 9] = [true, false, false, false, false, false, false, false, false];

pub fn table(
    d: Dialect,
    results: &[CommandResult],
    cmp: Option<&Comparison>,
    opts: &Options,
    layout: &Layout,
) -> String {
    let unit = layout
        .unit
        .unwrap_or_else(|| TimeUnit::auto(results.first().map_or(1.0, |r| r.hyperfine.mean)));
    let u = unit.short();
    let head = [
        "Command".to_string(),
        format!("Mean [{u}]"),
        format!("Min [{u}]"),
        format!("Max [{u}]"),
        "Relative".into(),
        "Peak RSS [MiB]".into(),
        "Tree peak [MiB]".into(),
        "Relative memory".into(),
        "Processes".into(),
    ];
    let mut order: Vec<usize> = (0..results.len()).collect();
    if opts.by_time {
        order.sort_by(|&a, &b| {
            results[a]
                .hyperfine
                .mean
                .total_cmp(&results[b].hyperfine.mean)
        });
    }
    let mut s = header(d);
    s.push_str(&row(d, &head));
    s.push_str(&divider(d));
    for i in order {
        let r = &results[i];
        let h = &r.hyperfine;
        let sd = h
            .stddev
            .map_or(String::new(), |v| format!(" ± {}", unit.value(v)));
        let mib = |v: f64| format!("{:.2}", v / (1u64 << 20) as f64);
        let tree = r.tree_peak_rss_bytes.as_ref().map_or("–".into(), |t| {
            format!("{} ± {}", mib(t.mean), mib(t.sd()))
        });
        let cells = [
            code(d, &r.shown),
            format!("{}{sd}", unit.value(h.mean)),
            unit.value(h.min),
            unit.value(h.max),
            relative(cmp.map(|c| &c.wall_ns), i),
            format!(
                "{} ± {}",
                mib(r.peak_rss_bytes.mean),
                mib(r.peak_rss_bytes.sd())
            ),
            tree,
            relative(cmp.map(|c| &c.peak_rss_bytes), i),
            count(&r.processes),
        ];
        s.push_str(&row(d, &cells));
    }
    s.push_str(&footer(d));
    s
}

fn header(d: Dialect) -> String {
    match d {
        Dialect::AsciiDoc => {
            let cols: Vec<&str> = ALIGN.iter().map(|&l| if l { "<" } else { ">" }).collect();
            format!("[cols=\"{}\"]\n|===", cols.join(","))
        }
        _ => String::new(),
    }
}

fn row(d: Dialect, cells: &[String]) -> String {
    match d {
        Dialect::Markdown => format!("| {} |\n", cells.join(" | ")),
        Dialect::AsciiDoc => format!("\n| {} \n", cells.join(" \n| ")),
        Dialect::OrgMode => format!("| {}  |  {} |\n", cells[0], cells[1..].join(" |  ")),
    }
}

fn divider(d: Dialect) -> String {
    match d {
        Dialect::Markdown => {
            let cells: String = ALIGN
                .iter()
                .map(|&l| if l { ":---|" } else { "---:|" })
                .collect();
            format!("|{cells}\n")
        }
        Dialect::AsciiDoc => String::new(),
        Dialect::OrgMode => format!("|{}--|\n", "--+".repeat(ALIGN.len() - 1)),
    }
}

fn footer(d: Dialect) -> String {
    match d {
        Dialect::AsciiDoc => "|===\n".into(),
        _ => String::new(),
    }
}

/// A command as code in a cell: already escaped for a terminal; `|` would end the cell, and
/// in Markdown a backtick the code span.
fn code(d: Dialect, shown: &str) -> String {
    let cell = shown.replace('|', "\\|");
    match d {
        Dialect::Markdown if cell.contains('`') => format!("`` {cell} ``"),
        Dialect::Markdown | Dialect::AsciiDoc => format!("`{cell}`"),
        Dialect::OrgMode => format!("={cell}="),
    }
}

/// `1.00` for the reference, `2.31 ± 0.05` otherwise; `1.00` without a comparison.
fn relative(m: Option<&Metric>, i: usize) -> String {
    let Some(rel) = m.and_then(|m| m.relative.get(i)) else {
        return "1.00".into();
    };
    match (rel.ratio, rel.uncertainty) {
        (Some(r), Some(u)) if m.is_some_and(|m| m.reference != i) => format!("{r:.2} ± {u:.2}"),
        (Some(r), _) => format!("{r:.2}"),
        _ => "–".into(),
    }
}

fn count(s: &Stats) -> String {
    if s.min == s.max {
        s.min.to_string()
    } else {
        format!("{:.1}", s.mean)
    }
}
