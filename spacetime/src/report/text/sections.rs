//! The summary's sections beside the tree: the failed processes (first, always), the top
//! processes by CPU and by memory, the programs, and the critical path.

use std::fmt::Write;

use super::{exit_text, name, prose, red, Options, Report};
use crate::util::{
    term,
    units::{bytes, duration_ns},
};

/// A section's title, wrapped.
pub(super) fn heading(out: &mut String, text: &str, width: usize) {
    prose(out, text, width);
}

/// Every process that ended with a non-zero status or a signal: its pid, status, when it
/// ended, its name and its parent's. Before the tables, however large the tree; at most
/// `--top` rows (0: all), the count always.
pub(super) fn failed(out: &mut String, r: &Report, width: usize, o: &Options) {
    let failures = &r.analysis.failures;
    if failures.is_empty() {
        return;
    }
    let wide = o.width.is_none();
    let n = failures.len();
    let title = format!(
        "FAILED: {} of {} (non-zero exit or signal):",
        super::count(n as u64, "process", "processes"),
        r.processes.len()
    );
    for l in term::wrap(&title, width, 2) {
        let _ = writeln!(out, "{}", red(&l, o.style));
    }
    let _ = writeln!(out, "    PID  EXIT           AT  COMMAND  ← PARENT");
    let limit = if o.top == 0 { n } else { o.top.max(10) };
    for &i in failures.iter().take(limit) {
        let p = &r.processes[i];
        let head = format!(
            "{:>7}  {:<8} {:>8}  ",
            p.pid(),
            exit_text(p.exit().as_ref(), p.state()),
            duration_ns(p.end_ns().unwrap_or(r.wall_ns))
        );
        let room = width.saturating_sub(term::width(&head));
        let parent = r.analysis.parents[i].map(|pp| &r.processes[pp]);
        // The failed process first; its parent gets what is left, at most two fifths.
        let parent_room = parent.map_or(0, |_| (room * 2 / 5).min(room.saturating_sub(12)));
        let own = name(r, p, room.saturating_sub(parent_room).max(8), wide);
        let mut line = head + &own;
        if let Some(pp) = parent {
            let left = width.saturating_sub(term::width(&line) + 4);
            if left >= 6 {
                let _ = write!(
                    line,
                    "  ← {} {}",
                    pp.pid(),
                    name(
                        r,
                        pp,
                        left.saturating_sub(pp.pid().to_string().len() + 1).max(3),
                        wide
                    )
                );
            }
        }
        let _ = writeln!(out, "{}", red(&term::fit(&line, width), o.style));
    }
    if n > limit {
        let _ = writeln!(
            out,
            "{}",
            red(
                &format!(
                    "  … {} more failed (all are in the JSON report's `failures`)",
                    n - limit
                ),
                o.style
            )
        );
    }
    out.push('\n');
}

/// The top processes by CPU beside the top by peak RSS (one above the other when narrow).
pub(super) fn tops(out: &mut String, r: &Report, width: usize, wide: bool) {
    const N: usize = 5;
    let by_cpu = r.top_by(N, |p| p.cpu_ns());
    let by_mem = r.top_by(N, |p| p.peak_rss_bytes());
    let side = width >= 72;
    let mut col = if side { (width - 2) / 2 } else { width };
    let cell = |fig: String, p: &super::ProcessReport| {
        let head = format!("  {fig:>8}  ");
        let room = col.saturating_sub(term::width(&head)).max(4);
        head + &name(r, p, room, wide)
    };
    let cpu: Vec<String> = by_cpu
        .iter()
        .map(|p| cell(duration_ns(p.cpu_ns()), p))
        .collect();
    let mem: Vec<String> = by_mem
        .iter()
        .map(|p| cell(bytes(p.peak_rss_bytes()), p))
        .collect();
    let title = "top by CPU";
    if wide {
        // Uncut: the left column is as wide as its widest line (padding to half of an
        // unbounded width would not fit in memory).
        col = cpu
            .iter()
            .map(|s| term::width(s))
            .fold(title.len(), usize::max);
    }
    out.push('\n');
    if side {
        let pad = |s: &str| " ".repeat(col.saturating_sub(term::width(s)));
        let _ = writeln!(out, "{title}{}  top by peak RSS", pad(title));
        for k in 0..cpu.len().max(mem.len()) {
            let left = cpu.get(k).map_or("", String::as_str);
            let right = mem.get(k).map_or("", String::as_str);
            let _ = writeln!(out, "{left}{}  {right}", pad(left));
        }
    } else {
        for (title, list) in [(title, &cpu), ("top by peak RSS", &mem)] {
            let _ = writeln!(out, "{title}");
            for s in list {
                let _ = writeln!(out, "{s}");
            }
        }
    }
}

/// The programs that ran, by peak RSS: runs, peak, CPU (and failures, when any).
pub(super) fn programs(out: &mut String, r: &Report, width: usize, top: usize) {
    let list = &r.analysis.programs;
    let any_failed = list.iter().any(|p| p.failed > 0);
    let _ = writeln!(out, "\nprograms run ({}), by peak RSS:", list.len());
    let mut head = String::from("   RUNS  PEAK RSS       CPU  ");
    if any_failed {
        head.push_str("FAILED  ");
    }
    let _ = writeln!(out, "{head}PROGRAM");
    for p in list.iter().take(top) {
        let mut s = format!(
            "{:>7}  {:>8}  {:>8}  ",
            p.runs,
            bytes(p.peak_rss_bytes),
            duration_ns(p.cpu_ns)
        );
        if any_failed {
            let _ = write!(s, "{:>6}  ", p.failed);
        }
        let room = width.saturating_sub(term::width(&s)).max(8);
        let _ = writeln!(out, "{s}{}", term::fit_path(&term::escape(&p.path), room));
    }
}

/// Most steps of the critical path listed; the others are counted.
const PATH_STEPS: usize = 6;

/// The indices of the `n` longest of `lens` (the earlier of equals), in index order: the
/// steps of a chain shown in the order they ran. Kept `n` at a time: a 100 000-process build's
/// path has 200 000 steps, whose lengths and indices sorted whole were three 1.6 MB copies at
/// the top of spacetime's own peak.
fn longest_in_order(lens: impl IntoIterator<Item = u64>, n: usize) -> Vec<usize> {
    // Longest first; among equals the earlier, which arrived first and stays ahead.
    let mut top: Vec<(u64, usize)> = Vec::with_capacity(n + 1);
    for (i, len) in lens.into_iter().enumerate() {
        if top.len() == n && top.last().is_none_or(|&(shortest, _)| len <= shortest) {
            continue;
        }
        let at = top.partition_point(|&(l, _)| l >= len);
        top.insert(at, (len, i));
        top.truncate(n);
    }
    let mut longest: Vec<usize> = top.into_iter().map(|(_, i)| i).collect();
    longest.sort_unstable();
    longest
}

/// The critical path: its time by program, then its longest steps in the order they ran
/// (under a title that says so when some are left out), each with its share of the wall.
pub(super) fn critical_path(out: &mut String, r: &Report, width: usize, wide: bool) {
    let path = &r.analysis.critical_path;
    if r.processes.len() < 2 || path.is_empty() || r.wall_ns == 0 {
        return;
    }
    let share = |ns: u64| ns as f64 * 100.0 / r.wall_ns as f64;
    out.push('\n');
    heading(
        out,
        &format!(
            "critical path: the chain of processes that set the wall time, {}",
            super::count(path.len() as u64, "step", "steps")
        ),
        width,
    );
    let parts: Vec<String> = r
        .analysis
        .path_programs
        .iter()
        .map(|g| {
            let name = match g.name.as_slice() {
                b"" => "(no traced process)".to_string(),
                n => term::escape(n),
            };
            format!("{name} {:.1}% ({})", share(g.ns), g.steps)
        })
        .collect();
    let mut line = String::from("  by program: ");
    line.push_str(&parts.join(" · "));
    for l in term::wrap(&line, width, 4) {
        let _ = writeln!(out, "{l}");
    }
    let longest = longest_in_order(path.iter().map(|s| s.len_ns()), PATH_STEPS);
    if path.len() > longest.len() {
        // A chain reads in the order it ran: the title says these are not the longest first.
        let _ = writeln!(
            out,
            "  its {} longest steps, in the order they ran:",
            longest.len()
        );
    }
    for &i in &longest {
        let s = &path[i];
        let head = format!(
            "  {:>5.1}%  {:>8}  ",
            share(s.len_ns()),
            duration_ns(s.len_ns())
        );
        let room = width.saturating_sub(term::width(&head)).max(8);
        let who = match s.node() {
            Some(p) => name(r, &r.processes[p], room, wide),
            None => "(no traced process)".into(),
        };
        let _ = writeln!(out, "{head}{who}");
    }
    if path.len() > longest.len() {
        let rest: u64 = path.iter().map(|s| s.len_ns()).sum::<u64>()
            - longest.iter().map(|&i| path[i].len_ns()).sum::<u64>();
        let _ = writeln!(
            out,
            "  {:>5.1}%  {:>8}  … {} more {}",
            share(rest),
            duration_ns(rest),
            path.len() - longest.len(),
            if path.len() - longest.len() == 1 {
                "step"
            } else {
                "steps"
            }
        );
    }
}

#[cfg(test)]
mod path_tests {
    #[test]
    fn the_longest_steps_are_listed_in_the_order_they_ran() {
        // Steps 1, 3 and 4 are the three longest; they are shown as they ran, not by length.
        assert_eq!(
            super::longest_in_order([5, 90, 10, 70, 80, 1], 3),
            [1, 3, 4]
        );
        assert_eq!(super::longest_in_order([3, 2, 1], 6), [0, 1, 2]);
        // Among equals, the earlier: the first two 7s, not the third.
        assert_eq!(super::longest_in_order([7, 1, 7, 7, 2], 2), [0, 2]);
        assert_eq!(super::longest_in_order([1, 7, 7, 9], 2), [1, 3]);
        assert!(super::longest_in_order([4, 5], 0).is_empty());
    }
}
