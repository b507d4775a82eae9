//! The comparison of commands: for time and memory, each command relative to the one with
//! the least (the fastest, the smallest), with the ratio's uncertainty and whether the
//! difference is significant.

use serde::Serialize;

use super::{model::CommandResult, stats};

/// Significance level of the two-sided Welch test.
pub const ALPHA: f64 = 0.05;

/// One figure compared across the commands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    /// Index (in `results`) of the reference: `--reference`'s, else the command with the
    /// least mean.
    pub reference: usize,
    /// One entry per command, in `results` order.
    pub relative: Vec<Relative>,
}

/// A command against the reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Relative {
    /// This command's mean over the reference's (≥ 1 unless `--reference` names one that is
    /// not the least); null when the reference's mean is 0.
    pub ratio: Option<f64>,
    /// The ratio's standard uncertainty, propagated from both commands' spread.
    pub uncertainty: Option<f64>,
    /// Welch's two-sided p-value against the reference; null for the reference itself, or
    /// when a command has a single run with spread on the other side.
    pub p_value: Option<f64>,
    /// The difference is significant at the 5 % level.
    pub significant: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub wall_ns: Metric,
    pub peak_rss_bytes: Metric,
    /// Null when a command has no tree peak.
    pub tree_peak_rss_bytes: Option<Metric>,
}

/// None with fewer than two commands. `reference`: the index of `--reference`'s command.
pub fn compare(results: &[CommandResult], reference: Option<usize>) -> Option<Comparison> {
    if results.len() < 2 {
        return None;
    }
    let of = |all: &[&stats::Stats]| metric(all, reference);
    let trees: Option<Vec<&stats::Stats>> = results
        .iter()
        .map(|r| r.tree_peak_rss_bytes.as_ref())
        .collect();
    Some(Comparison {
        wall_ns: of(&results.iter().map(|r| &r.wall_ns).collect::<Vec<_>>()),
        peak_rss_bytes: of(&results
            .iter()
            .map(|r| &r.peak_rss_bytes)
            .collect::<Vec<_>>()),
        tree_peak_rss_bytes: trees.map(|t| of(&t)),
    })
}

fn metric(all: &[&stats::Stats], reference: Option<usize>) -> Metric {
    let reference = reference.filter(|&r| r < all.len()).unwrap_or_else(|| {
        (0..all.len())
            .min_by(|&a, &b| all[a].mean.total_cmp(&all[b].mean))
            .unwrap_or(0)
    });
    let base = all[reference];
    let relative = all
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let r = stats::ratio(s, base);
            let p = (i != reference).then(|| stats::welch_p(s, base)).flatten();
            Relative {
                ratio: r.map(|r| r.0),
                uncertainty: r.map(|r| r.1),
                p_value: p,
                significant: p.is_some_and(|p| p < ALPHA),
            }
        })
        .collect();
    Metric {
        reference,
        relative,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::model::testing::result;

    #[test]
    fn relative_to_the_least() {
        let mib = 1 << 20;
        let small = result("small", &[300, 310, 290], &[100 * mib; 3]);
        let big = result("big", &[100, 110, 90], &[200 * mib; 3]);
        let c = compare(&[small.clone(), big.clone()], None).expect("two commands");
        // Time: "big" is the fastest, "small" 3x slower with a spread.
        assert_eq!(c.wall_ns.reference, 1);
        let slow = &c.wall_ns.relative[0];
        assert_eq!(slow.ratio, Some(3.0));
        // 3 · √((10/300)² + (10/100)²) = 3 · √(1/900 + 1/100) = 0.31623
        assert!((slow.uncertainty.unwrap() - 0.316_227_766).abs() < 1e-6);
        assert!(slow.significant && slow.p_value.unwrap() < 1e-3);
        let fast = &c.wall_ns.relative[1];
        assert_eq!(
            (fast.ratio, fast.p_value, fast.significant),
            (Some(1.0), None, false)
        );
        // Memory: "small" is the reference, "big" uses exactly 2x, with certainty.
        assert_eq!(c.peak_rss_bytes.reference, 0);
        let more = &c.peak_rss_bytes.relative[1];
        assert_eq!((more.ratio, more.uncertainty), (Some(2.0), Some(0.0)));
        assert!(more.significant);
        assert!(c.tree_peak_rss_bytes.is_some());
        // --reference: the first command, slower and smaller, is the one compared against.
        let c = compare(&[small, big], Some(0)).expect("two commands");
        assert_eq!(c.wall_ns.reference, 0);
        let r = c.wall_ns.relative[1].ratio.expect("ratio");
        assert!((r - 1.0 / 3.0).abs() < 1e-12, "{r}");
    }

    #[test]
    fn equal_memory_is_not_significant() {
        let a = result("a", &[100, 120], &[5000, 5000]);
        let b = result("b", &[100, 120], &[5000, 5000]);
        let c = compare(&[a, b], None).expect("two");
        assert!(!c.peak_rss_bytes.relative[1].significant);
        assert!(!c.wall_ns.relative[1].significant);
        assert!(compare(&[result("x", &[1], &[1])], None).is_none());
    }
}
