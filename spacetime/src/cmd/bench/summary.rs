//! The bench's summary for people: one block per command as its runs end, then the
//! comparison, in hyperfine's layout with memory beside time.

use std::fmt::Write;

use super::{
    compare::{Comparison, Metric},
    model::CommandResult,
    stats::Stats,
};
use crate::util::units::{bytes, duration_ns};

/// The block of one command (`index` counts from 1).
pub fn command_block(index: usize, r: &CommandResult) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Benchmark {index}: {}", r.shown);
    let t = &r.wall_ns;
    let _ = writeln!(
        s,
        "  Time (mean ± σ):       {} ± {}    [User: {}, System: {}]",
        ns(t.mean),
        ns(t.sd()),
        ns(r.user_ns.mean),
        ns(r.sys_ns.mean)
    );
    let _ = writeln!(
        s,
        "  Range (min … max):     {} … {}    {} run{}",
        duration_ns(t.min),
        duration_ns(t.max),
        r.runs,
        if r.runs == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "  Peak RSS (mean ± σ):   {}    largest process",
        mem(&r.peak_rss_bytes)
    );
    match &r.tree_peak_rss_bytes {
        Some(tp) => {
            let _ = writeln!(
                s,
                "  Tree peak (mean ± σ):  {}    all processes at once",
                mem(tp)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "  Tree peak:             unknown (no kernel RSS tracking)"
            );
        }
    }
    if let Some(c) = &r.cgroup_peak_bytes {
        let _ = writeln!(
            s,
            "  cgroup peak (mean ± σ): {}    distinct pages, page cache included",
            mem(c)
        );
    }
    let p = &r.processes;
    let procs = if p.min == p.max {
        format!("{}", p.min)
    } else {
        format!("{:.1} (min … max: {} … {})", p.mean, p.min, p.max)
    };
    let _ = writeln!(s, "  Processes:             {procs}");
    if r.failed_runs() > 0 {
        let _ = writeln!(
            s,
            "  Warning: {} of {} runs exited non-zero (exit codes: {})",
            r.failed_runs(),
            r.runs,
            codes(&r.exit_codes)
        );
    }
    if !r.incomplete_runs.is_empty() {
        let lost: u64 = r.lost_events.iter().sum();
        let runs: Vec<String> = r
            .incomplete_runs
            .iter()
            .map(|i| (i + 1).to_string())
            .collect();
        let _ = writeln!(
            s,
            "  Warning: runs {} lost {lost} records: their figures may miss processes",
            runs.join(", ")
        );
    }
    s
}

fn ns(v: f64) -> String {
    duration_ns(v.round() as u64)
}

fn mem(s: &Stats) -> String {
    let sd = s.sd().round() as u64;
    format!(
        "{} ± {}    [min … max: {} … {}]",
        bytes(s.mean.round() as u64),
        bytes(sd),
        bytes(s.min),
        bytes(s.max)
    )
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

/// The comparison: who ran faster, who used less memory, and whether that is significant.
pub fn comparison(results: &[CommandResult], c: &Comparison) -> String {
    let mut s = String::from("Summary\n");
    let name = |i: usize| results[i].shown.as_str();
    let _ = writeln!(s, "  {} ran", name(c.wall_ns.reference));
    lines(&mut s, &c.wall_ns, results, "faster than");
    let _ = writeln!(
        s,
        "  {} used the least memory (peak RSS of the largest process)",
        name(c.peak_rss_bytes.reference)
    );
    lines(&mut s, &c.peak_rss_bytes, results, "less than");
    if let Some(t) = &c.tree_peak_rss_bytes {
        let _ = writeln!(
            s,
            "  {} used the least memory (tree peak)",
            name(t.reference)
        );
        lines(&mut s, t, results, "less than");
    }
    s
}

fn lines(s: &mut String, m: &Metric, results: &[CommandResult], what: &str) {
    let name = |i: usize| results[i].shown.as_str();
    for (i, rel) in m.relative.iter().enumerate() {
        if i == m.reference {
            continue;
        }
        let ratio = match (rel.ratio, rel.uncertainty) {
            (Some(r), Some(u)) => format!("{r:.2} ± {u:.2} times"),
            _ => "infinitely".into(),
        };
        let sig = match rel.p_value {
            Some(p) if rel.significant => format!("significant, {}", p_text(p)),
            Some(p) => format!("not significant, {}", p_text(p)),
            None => "significance unknown: one run".into(),
        };
        let _ = writeln!(s, "    {ratio} {what} {}  ({sig})", name(i));
    }
}

fn p_text(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".into()
    } else {
        format!("p = {p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::{compare::compare, model::testing::result};

    #[test]
    fn blocks_and_comparison() {
        let mib = 1 << 20;
        let a = result(
            "small \x1b[31m",
            &[10_000_000, 12_000_000],
            &[10 * mib, 10 * mib],
        );
        let b = result("big", &[30_000_000, 34_000_000], &[20 * mib, 20 * mib]);
        let block = command_block(1, &a);
        assert!(block.starts_with("Benchmark 1: small \\e[31m\n"), "{block}");
        assert!(
            block.contains("Time (mean ± σ):       11.0 ms ± 1.4 ms"),
            "{block}"
        );
        assert!(block.contains("10.0 MiB ± 0 B"), "{block}");
        assert!(!block.contains("Warning"), "{block}");
        let results = [a, b];
        let c = compare(&results).expect("two");
        let text = comparison(&results, &c);
        assert!(
            text.contains("2.00 ± 0.00 times less than big  (significant, p < 0.001)"),
            "{text}"
        );
        assert!(text.contains("2.91 ± "), "{text}");
    }

    #[test]
    fn failures_and_loss_are_flagged() {
        let mut r = result("x", &[1, 2, 3], &[4096; 3]);
        r.exit_codes = vec![0, 1, 1];
        r.incomplete_runs = vec![2];
        r.lost_events = vec![0, 0, 7];
        let block = command_block(2, &r);
        assert!(
            block.contains("2 of 3 runs exited non-zero (exit codes: 0 ×1, 1 ×2)"),
            "{block}"
        );
        assert!(block.contains("runs 3 lost 7 records"), "{block}");
    }
}
