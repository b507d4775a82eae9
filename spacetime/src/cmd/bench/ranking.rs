//! The comparison for people, after every command ran: hyperfine's `Summary` (the
//! reference ran N times faster than each other command) or, with `--sort command`, its
//! relative speed table; then memory the same way ("4.01× smaller than"), with whether each
//! difference is significant.

use std::fmt::Write;

use super::{
    compare::{Comparison, Metric, Relative},
    model::CommandResult,
    summary::Layout,
};

/// The comparison; `by_time`: the others ordered by mean time (else as given).
pub fn render(results: &[CommandResult], c: &Comparison, by_time: bool, layout: &Layout) -> String {
    let mut s = String::new();
    if by_time {
        let _ = writeln!(s, "Summary");
        let _ = writeln!(s, "  {} ran", name(results, c.wall_ns.reference, layout, 6));
        for i in order(&c.wall_ns, results, true) {
            let rel = &c.wall_ns.relative[i];
            let (ratio, word) = faster_slower(rel);
            line(
                &mut s,
                &format!("{ratio} times {word} than"),
                results,
                i,
                rel,
                layout,
            );
        }
    } else {
        let _ = writeln!(s, "Relative speed comparison");
        for (i, rel) in c.wall_ns.relative.iter().enumerate() {
            let r = rel.ratio.map_or("∞".into(), |r| format!("{r:.2}"));
            // hyperfine's columns: the ratio in 10, its uncertainty in 8.
            let u = match (i == c.wall_ns.reference, rel.uncertainty) {
                (false, Some(u)) => format!(" ± {u:5.2}"),
                _ => " ".repeat(8),
            };
            let left = format!("  {r:>10}{u}  ");
            let _ = writeln!(s, "{left}{}", name(results, i, layout, left.len()));
        }
    }
    let single = results.iter().all(CommandResult::single_process);
    let memory = [
        (
            "Peak RSS (largest process)",
            Some(&c.peak_rss_bytes),
            single,
        ),
        (
            "Peak RSS (whole tree)",
            c.tree_peak_rss_bytes.as_ref(),
            false,
        ),
    ];
    for (what, m, alone) in memory {
        let Some(m) = m else { continue };
        if single && !alone {
            continue;
        }
        let what = if single { "Peak RSS" } else { what };
        let _ = writeln!(
            s,
            "  {what}: {}",
            name(results, m.reference, layout, what.len() + 4)
        );
        for i in order(m, results, by_time) {
            let rel = &m.relative[i];
            let (ratio, word) = smaller_larger(rel);
            line(
                &mut s,
                &format!("{ratio}× {word} than"),
                results,
                i,
                rel,
                layout,
            );
        }
    }
    s
}

fn name(results: &[CommandResult], i: usize, layout: &Layout, room: usize) -> String {
    match layout.cut {
        true => {
            crate::util::term::fit_command(&results[i].shown, layout.width.saturating_sub(room))
        }
        false => results[i].shown.clone(),
    }
}

/// The other commands, by mean or as given.
fn order(m: &Metric, results: &[CommandResult], by_mean: bool) -> Vec<usize> {
    let mut v: Vec<usize> = (0..results.len()).filter(|&i| i != m.reference).collect();
    if by_mean {
        v.sort_by(|&a, &b| {
            let r = |i: usize| m.relative[i].ratio.unwrap_or(f64::INFINITY);
            r(a).total_cmp(&r(b))
        });
    }
    v
}

/// How the reference compares: the ratio ≥ 1 and its word.
fn faster_slower(rel: &Relative) -> (String, &'static str) {
    flip(rel, "faster", "slower")
}

fn smaller_larger(rel: &Relative) -> (String, &'static str) {
    flip(rel, "smaller", "larger")
}

/// `rel.ratio` is the other over the reference: above 1 the reference is "less" (faster,
/// smaller) by that much; below, "more" by its inverse.
fn flip(rel: &Relative, less: &'static str, more: &'static str) -> (String, &'static str) {
    let Some(r) = rel.ratio else {
        return ("∞".into(), less);
    };
    let (v, word) = if r >= 1.0 { (r, less) } else { (1.0 / r, more) };
    // The uncertainty scales with the ratio it is given for.
    let u = rel.uncertainty.map_or(String::new(), |u| {
        format!(" ± {:.2}", if r >= 1.0 { u } else { u / (r * r) })
    });
    (format!("{v:8.2}{u}"), word)
}

/// `RATIO WORDS NAME` and whether the difference is significant, on one line when it fits.
fn line(
    s: &mut String,
    words: &str,
    results: &[CommandResult],
    i: usize,
    rel: &Relative,
    layout: &Layout,
) {
    let sig = match rel.p_value {
        Some(p) if rel.significant => format!("(significant, {})", p_text(p)),
        Some(p) => format!("(not significant, {})", p_text(p)),
        None => "(significance unknown: one run)".into(),
    };
    let left = format!("{words} ");
    let who = name(results, i, layout, left.len());
    let one = format!("{left}{who}  {sig}");
    if crate::util::term::width(&one) <= layout.width {
        let _ = writeln!(s, "{one}");
    } else {
        let _ = writeln!(s, "{left}{who}");
        let _ = writeln!(s, "{:12}{sig}", "");
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

    fn layout() -> Layout {
        Layout {
            width: 80,
            cut: false,
            unit: None,
        }
    }

    #[test]
    fn summary_says_faster_and_smaller() {
        let mib = 1 << 20;
        let a = result("small", &[30_000_000, 34_000_000], &[10 * mib, 10 * mib]);
        let b = result("big", &[10_000_000, 12_000_000], &[40 * mib + mib / 10; 2]);
        let results = [a, b];
        let c = compare(&results, None).expect("two");
        let text = render(&results, &c, true, &layout());
        assert!(text.starts_with("Summary\n  big ran\n"), "{text}");
        assert!(
            text.contains("\n    2.91 ± 0.45 times faster than small  (significant, p = 0.027)"),
            "{text}"
        );
        assert!(
            text.contains("  Peak RSS: small\n"),
            "one process each: {text}"
        );
        assert!(
            text.contains("\n    4.01 ± 0.00× smaller than big  (significant, p < 0.001)"),
            "{text}"
        );
        assert!(!text.contains("times less"), "{text}");
        for l in text.lines() {
            assert!(crate::util::term::width(l) <= 80, "{l}");
        }
        // --reference on the slower one: it ran slower, and is smaller.
        let c = compare(&results, Some(0)).expect("two");
        let text = render(&results, &c, true, &layout());
        assert!(
            text.contains("  small ran\n    2.91 ± 0.45 times slower than big"),
            "{text}"
        );
        let text = render(&results, &c, false, &layout());
        assert!(text.starts_with("Relative speed comparison\n"), "{text}");
        assert!(text.contains("\n        1.00          small\n"), "{text}");
        assert!(text.contains("\n        0.34 ±  0.05  big\n"), "{text}");
    }
}
