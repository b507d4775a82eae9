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
}

/// Column where figures start, as hyperfine's.
const LABEL: usize = 21;

impl Layout {
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
        if crate::util::term::width(&one) <= self.width {
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
}

/// `Benchmark N: COMMAND`, printed as its runs start.
pub fn header(index: usize, shown: &str, layout: &Layout) -> String {
    let head = format!("Benchmark {index}: ");
    format!("{head}{}", layout.command(shown, head.len()))
}

fn label(l: &str) -> String {
    format!("  {l:<LABEL$}")
}

/// The block of one command once its runs are done.
pub fn block(r: &CommandResult, warnings: &[Warning], layout: &Layout) -> String {
    let mut s = String::new();
    let h = &r.hyperfine;
    let unit = layout.unit.unwrap_or(TimeUnit::auto(h.mean));
    let t = |v: f64| unit.show(v);
    let cpu = format!("[User: {}, System: {}]", t(h.user), t(h.system));
    if r.runs == 1 {
        let left = format!("{}{:>8}", label("Time (abs ≡):"), t(h.mean));
        layout.pair(&mut s, &left, &cpu);
    } else {
        let left = format!(
            "{}{:>8} ± {:>8}",
            label("Time (mean ± σ):"),
            t(h.mean),
            t(h.stddev.unwrap_or(0.0))
        );
        layout.pair(&mut s, &left, &cpu);
        let left = format!(
            "{}{:>8} … {:>8}",
            label("Range (min … max):"),
            t(h.min),
            t(h.max)
        );
        layout.pair(&mut s, &left, &format!("{} runs", r.runs));
    }
    memory(&mut s, r, layout);
    let p = &r.processes;
    let procs = match p.min == p.max {
        true => format!("{}", p.min),
        false => format!("{:.1}    [{} … {}]", p.mean, p.min, p.max),
    };
    let _ = writeln!(s, "{}{procs}", label("Processes:"));
    if r.failed_runs() > 0 {
        layout.prose(
            &mut s,
            &format!(
                "  Warning: {} of {} runs exited non-zero (exit codes: {})",
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
        layout.prose(
            &mut s,
            &format!(
                "  Warning: runs {} lost {lost} records: their figures may miss processes",
                runs.join(", ")
            ),
        );
    }
    for w in warnings {
        layout.prose(&mut s, &format!("  Warning: {}", w.text()));
    }
    s
}

/// Peak RSS: one line when every run was one process (its peak is the tree's), else the
/// largest process's and the whole tree's; the cgroup's with `--cgroup-peak`.
fn memory(s: &mut String, r: &CommandResult, layout: &Layout) {
    let line = |s: &mut String, name: &str, st: &Stats| {
        let left = format!(
            "{}{:>8} ± {:>8}",
            label(name),
            bytes(st.mean.round() as u64),
            bytes(st.sd().round() as u64)
        );
        let right = format!("[{} … {}]", bytes(st.min), bytes(st.max));
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
