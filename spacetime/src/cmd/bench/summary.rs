//! The bench's summary for people: hyperfine's `Benchmark N:` header as a command starts, its
//! block (time, then memory) once its runs end, and after all of them the table of a
//! parameter scan. Every line fits the width it is given (80 columns off a terminal); only
//! an untrusted command line is ever cut.

use std::fmt::Write;

use super::{args::TimeUnit, model::CommandResult, stats::Stats, warnings::Warning};
use crate::util::units::bytes;

/// Where the text goes and how it looks.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Lines are kept to this many columns.
    pub width: usize,
    /// Command lines are cut to the width (a terminal); else only prose is wrapped.
    pub cut: bool,
    /// `-u`: the unit of every time; else each command's mean chooses.
    pub unit: Option<TimeUnit>,
    /// hyperfine's colours (`--style`, `NO_COLOR`).
    pub color: bool,
}

/// hyperfine's colours, each where hyperfine puts it.
#[derive(Debug, Clone, Copy)]
pub enum Paint {
    /// `Benchmark N`, `Summary`.
    Bold,
    /// The mean and its name.
    BoldGreen,
    /// The standard deviation and σ; a ratio's uncertainty.
    Green,
    /// User and system time.
    Blue,
    /// The minimum; the reference command.
    Cyan,
    /// The maximum; the commands compared with it.
    Magenta,
    /// The run count.
    Dim,
    /// `Warning`.
    Yellow,
}

impl Paint {
    fn sgr(self) -> &'static str {
        match self {
            Paint::Bold => "1",
            Paint::BoldGreen => "1;32",
            Paint::Green => "32",
            Paint::Blue => "34",
            Paint::Cyan => "36",
            Paint::Magenta => "35",
            Paint::Dim => "2",
            Paint::Yellow => "33",
        }
    }
}

/// Column where figures start, as hyperfine's.
const LABEL: usize = 21;

impl Layout {
    /// `text` in `paint` when colour is on.
    pub fn paint(&self, text: &str, paint: Paint) -> String {
        match self.color {
            true => format!("\x1b[{}m{text}\x1b[0m", paint.sgr()),
            false => text.to_string(),
        }
    }

    /// A label of pieces, each painted or not, padded to the figures' column.
    fn label(&self, pieces: &[(&str, Option<Paint>)]) -> String {
        let mut out = String::from("  ");
        let mut cols = 0;
        for (text, paint) in pieces {
            cols += crate::util::term::width(text);
            match paint {
                Some(p) => out.push_str(&self.paint(text, *p)),
                None => out.push_str(text),
            }
        }
        out.push_str(&" ".repeat(LABEL.saturating_sub(cols)));
        out
    }

    fn command(&self, shown: &str, room: usize) -> String {
        match self.cut {
            true => crate::util::term::fit_command(shown, self.width.saturating_sub(room)),
            false => shown.to_string(),
        }
    }

    /// `left` and `right` on one line when it fits, else `right` on the next one under the
    /// figures.
    fn pair(&self, s: &mut String, left: &str, right: &str) {
        let one = format!("{left}    {right}");
        if crate::util::term::visible_width(&one) <= self.width {
            let _ = writeln!(s, "{one}");
        } else {
            let _ = writeln!(s, "{left}");
            let _ = writeln!(s, "{}{right}", " ".repeat(LABEL + 2));
        }
    }

    fn prose(&self, s: &mut String, text: &str) {
        for l in crate::util::term::wrap(text, self.width, 4) {
            let _ = writeln!(s, "{l}");
        }
    }

    /// `  Warning: TEXT`, wrapped, `Warning` in yellow.
    fn warning(&self, s: &mut String, text: &str) {
        let mut w = String::new();
        self.prose(&mut w, &format!("  Warning: {text}"));
        s.push_str(&w.replacen("Warning", &self.paint("Warning", Paint::Yellow), 1));
    }
}

/// `Benchmark N: COMMAND`, printed as its runs start.
pub fn header(index: usize, shown: &str, layout: &Layout) -> String {
    let room = format!("Benchmark {index}: ").len();
    format!(
        "{}{}: {}",
        layout.paint("Benchmark ", Paint::Bold),
        layout.paint(&index.to_string(), Paint::Bold),
        layout.command(shown, room)
    )
}

fn label(l: &str) -> String {
    format!("  {l:<LABEL$}")
}

/// The block of one command once its runs are done.
pub fn block(r: &CommandResult, warnings: &[Warning], layout: &Layout) -> String {
    let mut s = String::new();
    let h = &r.hyperfine;
    let unit = layout.unit.unwrap_or(TimeUnit::auto(h.mean));
    let t = |v: f64, p: Paint| layout.paint(&format!("{:>8}", unit.show(v)), p);
    let cpu = format!(
        "[User: {}, System: {}]",
        layout.paint(&unit.show(h.user), Paint::Blue),
        layout.paint(&unit.show(h.system), Paint::Blue)
    );
    if r.runs == 1 {
        let label = layout.label(&[
            ("Time (", None),
            ("abs", Some(Paint::BoldGreen)),
            (" ", None),
            ("≡", Some(Paint::Green)),
            ("):", None),
        ]);
        let left = format!("{label}{}", t(h.mean, Paint::BoldGreen));
        layout.pair(&mut s, &left, &cpu);
    } else {
        let label = layout.label(&[
            ("Time (", None),
            ("mean", Some(Paint::BoldGreen)),
            (" ± ", None),
            ("σ", Some(Paint::Green)),
            ("):", None),
        ]);
        let left = format!(
            "{label}{} ± {}",
            t(h.mean, Paint::BoldGreen),
            t(h.stddev.unwrap_or(0.0), Paint::Green)
        );
        layout.pair(&mut s, &left, &cpu);
        let label = layout.label(&[
            ("Range (", None),
            ("min", Some(Paint::Cyan)),
            (" … ", None),
            ("max", Some(Paint::Magenta)),
            ("):", None),
        ]);
        let left = format!(
            "{label}{} … {}",
            t(h.min, Paint::Cyan),
            t(h.max, Paint::Magenta)
        );
        let runs = layout.paint(&format!("{} runs", r.runs), Paint::Dim);
        layout.pair(&mut s, &left, &runs);
    }
    memory(&mut s, r, layout);
    let p = &r.processes;
    let procs = match p.min == p.max {
        true => format!("{}", p.min),
        false => format!("{:.1}    [{} … {}]", p.mean, p.min, p.max),
    };
    let _ = writeln!(s, "{}{procs}", label("Processes:"));
    if r.failed_runs() > 0 {
        layout.warning(
            &mut s,
            &format!(
                "{} of {} runs exited non-zero (exit codes: {})",
                r.failed_runs(),
                r.runs,
                codes(&r.exit_codes)
            ),
        );
    }
    if !r.incomplete_runs.is_empty() {
        let lost: u64 = r.lost_events.iter().sum();
        let runs: Vec<String> = r
            .incomplete_runs
            .iter()
            .map(|i| (i + 1).to_string())
            .collect();
        layout.warning(
            &mut s,
            &format!(
                "runs {} lost {lost} records: their figures may miss processes",
                runs.join(", ")
            ),
        );
    }
    for w in warnings {
        layout.warning(&mut s, &w.text());
    }
    s
}

/// Peak RSS: one line when every run was one process (its peak is the tree's), else the
/// largest process's and the whole tree's; the cgroup's with `--cgroup-peak`.
fn memory(s: &mut String, r: &CommandResult, layout: &Layout) {
    let line = |s: &mut String, name: &str, st: &Stats| {
        let b = |v: u64, p: Paint| layout.paint(&format!("{:>8}", bytes(v)), p);
        let left = format!(
            "{}{} ± {}",
            label(name),
            b(st.mean.round() as u64, Paint::BoldGreen),
            b(st.sd().round() as u64, Paint::Green)
        );
        let right = format!(
            "[{} … {}]",
            layout.paint(&bytes(st.min), Paint::Cyan),
            layout.paint(&bytes(st.max), Paint::Magenta)
        );
        layout.pair(s, &left, &right);
    };
    match &r.tree_peak_rss_bytes {
        Some(_) if r.single_process() => line(s, "Peak RSS (mean ± σ):", &r.peak_rss_bytes),
        Some(t) => {
            line(s, "Peak RSS, largest:", &r.peak_rss_bytes);
            line(s, "Peak RSS, tree:", t);
        }
        None => {
            line(s, "Peak RSS, largest:", &r.peak_rss_bytes);
            let _ = writeln!(
                s,
                "{}unknown (no kernel RSS tracking)",
                label("Peak RSS, tree:")
            );
        }
    }
    if let Some(c) = &r.cgroup_peak_bytes {
        line(s, "cgroup peak:", c);
    }
}

/// Exit codes with repeats folded: `0 ×3, 1 ×2`.
fn codes(all: &[i32]) -> String {
    let mut seen: Vec<(i32, usize)> = Vec::new();
    for &c in all {
        match seen.iter_mut().find(|(k, _)| *k == c) {
            Some((_, n)) => *n += 1,
            None => seen.push((c, 1)),
        }
    }
    let parts: Vec<String> = seen.iter().map(|(c, n)| format!("{c} ×{n}")).collect();
    parts.join(", ")
}

/// A parameter scan's results, one row per benchmark: its number, each parameter's value,
/// time and memory. None without parameters.
pub fn parameter_table(results: &[CommandResult], layout: &Layout) -> Option<String> {
    let names: Vec<&str> = results
        .iter()
        .find(|r| !r.params.is_empty())?
        .params
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    let unit = layout.unit.unwrap_or(TimeUnit::auto(
        results
            .iter()
            .map(|r| r.hyperfine.mean)
            .fold(f64::INFINITY, f64::min),
    ));
    let tree = results.iter().any(|r| !r.single_process());
    let mut head: Vec<String> = vec!["#".into()];
    head.extend(
        names
            .iter()
            .map(|n| crate::util::term::escape(n.as_bytes())),
    );
    head.extend(["Time (mean ± σ)".into(), "Peak RSS".into()]);
    if tree {
        head.push("Tree peak".into());
    }
    let mut rows = vec![head];
    for (i, r) in results.iter().enumerate() {
        let mut row = vec![(i + 1).to_string()];
        for n in &names {
            let v = r.params.iter().find(|(k, _)| k == n).map_or("", |(_, v)| v);
            row.push(layout.command(&crate::util::term::escape(v.as_bytes()), layout.width / 2));
        }
        let h = &r.hyperfine;
        row.push(format!(
            "{} ± {}",
            unit.show(h.mean),
            unit.show(h.stddev.unwrap_or(0.0))
        ));
        row.push(bytes(r.peak_rss_bytes.mean.round() as u64));
        if tree {
            row.push(
                r.tree_peak_rss_bytes
                    .as_ref()
                    .map_or("?".into(), |t| bytes(t.mean.round() as u64)),
            );
        }
        rows.push(row);
    }
    Some(table(&rows))
}

/// Columns right-aligned (the first left), two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows[0].len();
    let w: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| crate::util::term::width(&r[c]))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::from("Parameter scan\n");
    for r in rows {
        let mut line = String::from(" ");
        for (c, cell) in r.iter().enumerate() {
            let pad = w[c] - crate::util::term::width(cell);
            line.push_str("  ");
            line.push_str(&" ".repeat(pad));
            line.push_str(cell);
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    s
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
