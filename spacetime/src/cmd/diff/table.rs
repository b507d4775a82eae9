//! The comparison's rows, and how they are written: aligned text within the terminal's width,
//! or Markdown tables for a CI job summary.

use std::fmt::Write;

use crate::util::{
    term,
    units::{bytes, duration_ns},
};

/// The figures a threshold can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gated {
    Wall,
    Cpu,
    /// The largest single process's peak RSS.
    Peak,
    TreePeak,
    Processes,
    Failures,
}

impl Gated {
    pub fn named(s: &str) -> Option<Gated> {
        Some(match s {
            "wall" => Gated::Wall,
            "cpu" => Gated::Cpu,
            "peak" => Gated::Peak,
            "tree-peak" | "tree_peak" | "tree" => Gated::TreePeak,
            "processes" => Gated::Processes,
            "failures" | "failed" => Gated::Failures,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Gated::Wall => "wall",
            Gated::Cpu => "cpu",
            Gated::Peak => "peak",
            Gated::TreePeak => "tree-peak",
            Gated::Processes => "processes",
            Gated::Failures => "failures",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Gated::Wall | Gated::Cpu => Unit::Ns,
            Gated::Peak | Gated::TreePeak => Unit::Bytes,
            Gated::Processes | Gated::Failures => Unit::Count,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Ns,
    Count,
}

impl Unit {
    pub fn show(self, v: f64) -> String {
        match self {
            Unit::Bytes => bytes(v.max(0.0).round() as u64),
            Unit::Ns => duration_ns(v.max(0.0).round() as u64),
            Unit::Count if v.fract() == 0.0 => format!("{v}"),
            Unit::Count => format!("{v:.1}"),
        }
    }
}

/// One figure of A beside B.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The figure's name, or a program's.
    pub name: String,
    /// What a threshold names it by (None: not gated).
    pub figure: Option<Gated>,
    pub unit: Unit,
    /// Absent on a side that does not have it (a program that ran on one side only).
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// Bench: Welch's p-value of the two distributions, and whether it is significant.
    pub p_value: Option<f64>,
    pub significant: Option<bool>,
    /// Text after the figures (a program's runs).
    pub note: String,
}

impl Row {
    pub fn new(name: impl Into<String>, figure: Option<Gated>, unit: Unit) -> Row {
        Row {
            name: name.into(),
            figure,
            unit,
            a: None,
            b: None,
            p_value: None,
            significant: None,
            note: String::new(),
        }
    }

    pub fn values(mut self, a: Option<f64>, b: Option<f64>) -> Row {
        self.a = a;
        self.b = b;
        self
    }

    /// `+10.0%`, `-3`, `0`, `new`, `gone`.
    pub fn change(&self) -> String {
        match (self.a, self.b) {
            (None, Some(_)) => "new".into(),
            (Some(_), None) => "gone".into(),
            (Some(a), Some(b)) if self.unit == Unit::Count => {
                let d = b - a;
                if d == 0.0 {
                    "0".into()
                } else {
                    format!("{d:+}")
                }
            }
            (Some(a), Some(b)) if a == b => "0%".into(),
            (Some(a), Some(b)) if a > 0.0 => format!("{:+.1}%", (b - a) / a * 100.0),
            (Some(_), Some(b)) => format!("+{}", self.unit.show(b)),
            (None, None) => String::new(),
        }
    }

    fn side(&self, v: Option<f64>) -> String {
        v.map_or("–".into(), |v| self.unit.show(v))
    }

    fn significance(&self) -> String {
        let p = |p: f64| {
            if p < 0.001 {
                "p < 0.001".to_string()
            } else {
                format!("p = {p:.3}")
            }
        };
        match (self.p_value, self.significant) {
            (Some(v), Some(true)) => format!("significant, {}", p(v)),
            (Some(v), _) => p(v),
            _ => String::new(),
        }
    }
}

/// A titled group of rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub title: String,
    pub rows: Vec<Row>,
    /// Thresholds apply to its rows.
    pub gated: bool,
    /// How a crossed row is named (`gzip: ` for a bench command).
    pub gate_prefix: String,
}

/// Aligned columns within `width`: the name takes what the figures leave.
pub fn text(
    sections: &[Section],
    names: &(String, String),
    crossed: &[super::Crossed],
    width: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        term::fit(
            &format!(
                "spacetime diff: A {} · B {}",
                term::escape(names.0.as_bytes()),
                term::escape(names.1.as_bytes())
            ),
            width
        )
    );
    for s in sections {
        out.push('\n');
        let _ = writeln!(out, "{}", term::fit(&s.title, width));
        let figures = |r: &Row| {
            format!(
                "{:>10}  {:>10}  {:>8}",
                r.side(r.a),
                r.side(r.b),
                r.change()
            )
        };
        let name_w = s
            .rows
            .iter()
            .map(|r| term::width(&r.name))
            .max()
            .unwrap_or(4)
            .clamp(4, width.saturating_sub(36).max(4));
        let _ = writeln!(
            out,
            "  {:name_w$}  {:>10}  {:>10}  {:>8}",
            "", "A", "B", "change"
        );
        for r in &s.rows {
            let name = term::fit(&r.name, name_w);
            let pad = name_w.saturating_sub(term::width(&name));
            let mut line = format!("  {name}{}  {}", " ".repeat(pad), figures(r));
            for extra in [r.significance(), r.note.clone()] {
                if !extra.is_empty() {
                    let _ = write!(line, "  {extra}");
                }
            }
            let _ = writeln!(out, "{}", term::fit(&line, width));
        }
    }
    verdict(&mut out, crossed, width);
    term::localize(&out).into_owned()
}

fn verdict(out: &mut String, crossed: &[super::Crossed], width: usize) {
    out.push('\n');
    if crossed.is_empty() {
        out.push_str("no threshold crossed\n");
        return;
    }
    for c in crossed {
        let line = format!(
            "OVER THRESHOLD: {} {} (limit {})",
            c.what, c.change, c.limit
        );
        for l in term::wrap(&line, width, 2) {
            let _ = writeln!(out, "{l}");
        }
    }
}

/// A Markdown cell: `|` would end it, and names are code.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Markdown tables, one per section, and the verdict.
pub fn markdown(
    sections: &[Section],
    names: &(String, String),
    crossed: &[super::Crossed],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### spacetime diff\n\nA: `{}` · B: `{}`\n",
        cell(&names.0),
        cell(&names.1)
    );
    for s in sections {
        let _ = writeln!(out, "**{}**\n", cell(&s.title));
        let _ = writeln!(out, "| | A | B | change | |\n|:---|---:|---:|---:|:---|");
        for r in &s.rows {
            let mut extra = r.significance();
            if !r.note.is_empty() {
                if !extra.is_empty() {
                    extra.push_str("; ");
                }
                extra.push_str(&r.note);
            }
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                cell(&r.name).replace('`', "'"),
                r.side(r.a),
                r.side(r.b),
                r.change(),
                cell(&extra)
            );
        }
        out.push('\n');
    }
    if crossed.is_empty() {
        out.push_str("No threshold crossed.\n");
    } else {
        for c in crossed {
            let _ = writeln!(
                out,
                "- :x: **{}** {} (limit `{}`)",
                cell(&c.what),
                c.change,
                cell(&c.limit)
            );
        }
    }
    out
}
