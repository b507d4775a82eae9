//! The comparison for people, after every command ran: hyperfine's `Summary` (the
//! reference ran N times faster than each other command) or, with `--sort command`, its
//! relative speed table; then memory the same way ("4.01× smaller than"), with whether each
//! difference is significant.

use std::fmt::Write;

use super::{
    compare::{Comparison, Metric, Relative},
    model::CommandResult,
    summary::{Layout, Paint},
};

/// The comparison; `by_time`: the others ordered by mean time (else as given).
pub fn render(results: &[CommandResult], c: &Comparison, by_time: bool, layout: &Layout) -> String {
    let mut s = String::new();
    if by_time {
        let _ = writeln!(s, "{}", layout.paint("Summary", Paint::Bold));
        let reference = name(results, c.wall_ns.reference, layout, 6);
        let _ = writeln!(s, "  {} ran", layout.paint(&reference, Paint::Cyan));
        for i in order(&c.wall_ns, results, true) {
            let rel = &c.wall_ns.relative[i];
            let ratio = faster_slower(rel);
            line(&mut s, &ratio, " times", results, i, rel, layout);
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
        let reference = name(results, m.reference, layout, what.len() + 4);
        let _ = writeln!(s, "  {what}: {}", layout.paint(&reference, Paint::Cyan));
        for i in order(m, results, by_time) {
            let rel = &m.relative[i];
            let ratio = smaller_larger(rel);
            line(&mut s, &ratio, "×", results, i, rel, layout);
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

/// How the reference compares with another command: the ratio ≥ 1 (in 8 columns), its
/// uncertainty (if known) and the word.
struct Ratio {
    value: String,
    uncertainty: Option<String>,
    word: &'static str,
}

fn faster_slower(rel: &Relative) -> Ratio {
    flip(rel, "faster", "slower")
}

fn smaller_larger(rel: &Relative) -> Ratio {
    flip(rel, "smaller", "larger")
}

/// `rel.ratio` is the other over the reference: above 1 the reference is "less" (faster,
/// smaller) by that much; below, "more" by its inverse.
fn flip(rel: &Relative, less: &'static str, more: &'static str) -> Ratio {
    let Some(r) = rel.ratio else {
        return Ratio {
            value: format!("{:>8}", "∞"),
            uncertainty: None,
            word: less,
        };
    };
    let (v, word) = if r >= 1.0 { (r, less) } else { (1.0 / r, more) };
    // The uncertainty scales with the ratio it is given for.
    let uncertainty = rel
        .uncertainty
        .map(|u| format!("{:.2}", if r >= 1.0 { u } else { u / (r * r) }));
    Ratio {
        value: format!("{v:8.2}"),
        uncertainty,
        word,
    }
}

/// `RATIO[ ± U]{times} WORD than NAME` and whether the difference is significant, on one
/// line when it fits; painted as hyperfine's (the ratio bold green, the other command
/// magenta), measured unpainted.
fn line(
    s: &mut String,
    ratio: &Ratio,
    times: &str,
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
    let tail = format!("{times} {} than ", ratio.word);
    let plus_minus = |u: String| {
        ratio
            .uncertainty
            .as_ref()
            .map_or(String::new(), |_| format!(" ± {u}"))
    };
    let u = ratio.uncertainty.clone().unwrap_or_default();
    let left = format!("{}{}{tail}", ratio.value, plus_minus(u.clone()));
    let who = name(results, i, layout, left.len());
    let one = format!("{left}{who}  {sig}");
    let fits = crate::util::term::width(&one) <= layout.width;
    let painted = format!(
        "{}{}{tail}{}",
        layout.paint(&ratio.value, Paint::BoldGreen),
        plus_minus(layout.paint(&u, Paint::Green)),
        layout.paint(&who, Paint::Magenta)
    );
    if fits {
        let _ = writeln!(s, "{painted}  {sig}");
    } else {
        let _ = writeln!(s, "{painted}");
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
            color: false,
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
