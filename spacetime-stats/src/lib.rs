//! Summary statistics of one figure over repeated runs, and Welch's t-test that says whether
//! two sets of runs differ by more than their spread. Shared by `spacetime bench` (its
//! reports and comparisons) and `cargo xtask bench` (spacetime's own benchmark), so a median
//! is computed one way everywhere.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// One figure over the runs: `{mean, stddev, median, min, max, values}` in the JSON export.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator, as hyperfine); null for one run.
    pub stddev: Option<f64>,
    /// The middle value; with an even number of runs, the mean of the two middle ones.
    pub median: f64,
    pub min: u64,
    pub max: u64,
    /// Every run's value, in run order.
    pub values: Vec<u64>,
}

impl Stats {
    /// None for no runs.
    pub fn of(values: &[u64]) -> Option<Stats> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let stddev = (n > 1).then(|| {
            let ss: f64 = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let median = if n % 2 == 1 {
            sorted[n / 2] as f64
        } else {
            (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
        };
        Some(Stats {
            mean,
            stddev,
            median,
            min: sorted[0],
            max: sorted[n - 1],
            values: values.to_vec(),
        })
    }

    /// The standard deviation, 0 for a single run.
    pub fn sd(&self) -> f64 {
        self.stddev.unwrap_or(0.0)
    }

    pub fn runs(&self) -> usize {
        self.values.len()
    }
}

/// `a / b` with the uncertainty propagated from both standard deviations (first order, as
/// hyperfine): σ = r·√((σa/μa)² + (σb/μb)²). None when `b`'s mean is 0.
pub fn ratio(a: &Stats, b: &Stats) -> Option<(f64, f64)> {
    if b.mean == 0.0 {
        return None;
    }
    let r = a.mean / b.mean;
    let rel = |s: &Stats| if s.mean == 0.0 { 0.0 } else { s.sd() / s.mean };
    Some((r, r * (rel(a).powi(2) + rel(b).powi(2)).sqrt()))
}

/// Two-sided p-value of Welch's t-test that `a` and `b` have the same mean. Runs with no
/// spread at all (memory peaks often repeat to the page) differ for certain when their means
/// differ (p = 0) and not at all when they are equal (p = 1). None with fewer than two runs
/// on a side that has spread: there is nothing to estimate it from.
pub fn welch_p(a: &Stats, b: &Stats) -> Option<f64> {
    let (na, nb) = (a.runs() as f64, b.runs() as f64);
    let (va, vb) = (a.sd().powi(2) / na, b.sd().powi(2) / nb);
    let se2 = va + vb;
    if se2 == 0.0 {
        return Some(if a.mean == b.mean { 1.0 } else { 0.0 });
    }
    if a.runs() < 2 || b.runs() < 2 {
        return None;
    }
    let t = (a.mean - b.mean).abs() / se2.sqrt();
    // Welch–Satterthwaite degrees of freedom; a side without spread contributes nothing.
    let part = |v: f64, n: f64| if v == 0.0 { 0.0 } else { v * v / (n - 1.0) };
    let df = se2 * se2 / (part(va, na) + part(vb, nb));
    Some(student_t_two_sided(t, df))
}

/// P(|T| ≥ t) for Student's t with `df` degrees of freedom.
pub fn student_t_two_sided(t: f64, df: f64) -> f64 {
    if t == 0.0 {
        return 1.0;
    }
    match StudentsT::new(0.0, 1.0, df) {
        Ok(d) => (2.0 * d.sf(t.abs())).clamp(0.0, 1.0),
        // df is positive and finite whenever it is computed from runs with spread.
        Err(_) => f64::NAN,
    }
}

/// Median, minimum and maximum of `values` (None when there are none): what a benchmark
/// table shows of a figure it does not test.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[u64]) -> Option<Spread> {
        Stats::of(values).map(|s| Spread {
            median: s.median,
            min: s.min as f64,
            max: s.max as f64,
        })
    }
}

/// The middle of `xs`; with an even count, the mean of the two middle values.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Modified Z-scores (Iglewicz and Hoaglin): each value's distance to the median over the
/// median absolute deviation, as hyperfine finds outliers. A MAD of 0 (a constant majority)
/// is taken as the smallest positive step, so any value off it stands out.
pub fn modified_zscores(xs: &[f64]) -> Vec<f64> {
    let m = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    let mad = median(&dev);
    let mad = if mad > 0.0 { mad } else { f64::EPSILON };
    xs.iter().map(|x| (x - m) / mad).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outliers_as_hyperfine_counts_them() {
        // hyperfine's cases (its src/outlier_detection.rs): above 1.4826 · 10.
        let outliers = |xs: &[f64]| {
            modified_zscores(xs)
                .iter()
                .filter(|s| s.abs() > 1.4826 * 10.0)
                .count()
        };
        assert_eq!(outliers(&[50.0]), 0);
        assert_eq!(outliers(&[1000.0, 0.0]), 0);
        assert_eq!(outliers(&[-0.2, 0.0, 0.2]), 0);
        assert_eq!(outliers(&[-0.2, 0.0, 0.2, 4.0]), 1);
        assert_eq!(outliers(&[0.5, 0.30, 0.29, 0.31, 0.30]), 1);
        let normal = [
            2.33269488,
            1.42195907,
            -0.57527698,
            -0.31293437,
            2.2948158,
            0.75813273,
            -1.0712388,
            -0.96394741,
            -1.15897446,
            1.10976285,
        ];
        assert_eq!(outliers(&normal), 0);
        let mut two = normal.to_vec();
        two.extend([20.0, -500.0]);
        assert_eq!(outliers(&two), 2);
        assert_eq!(
            outliers(&[10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 100.0]),
            1
        );
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn figures_of_hand_computed_runs() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squares of deviations sum to 32, 32/7 = 4.571428…
        let s = Stats::of(&[2, 4, 4, 4, 5, 5, 7, 9]).expect("runs");
        assert_eq!(s.mean, 5.0);
        assert!(close(s.sd(), (32.0f64 / 7.0).sqrt(), 1e-12), "{s:?}");
        assert_eq!((s.median, s.min, s.max), (4.5, 2, 9));
        assert_eq!(s.values, [2, 4, 4, 4, 5, 5, 7, 9]);
        // Odd count: the middle value of the sorted runs, whatever their order.
        let s = Stats::of(&[30, 10, 20]).expect("runs");
        assert_eq!((s.mean, s.median, s.sd()), (20.0, 20.0, 10.0));
        assert_eq!(s.values, [30, 10, 20], "values stay in run order");
        // One run: no spread to estimate.
        let s = Stats::of(&[7]).expect("one run");
        assert_eq!((s.stddev, s.median, s.min, s.max), (None, 7.0, 7, 7));
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn spread_is_the_median_and_the_extremes() {
        assert_eq!(Spread::of(&[]), None);
        let s = Spread::of(&[5, 1, 3]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        assert_eq!(Spread::of(&[4, 1, 3, 2]).unwrap().median, 2.5);
    }

    #[test]
    fn large_values_keep_their_precision() {
        // Peaks in bytes: 1 GiB ± one page must not lose the page.
        let g = 1u64 << 30;
        let s = Stats::of(&[g, g + 4096]).expect("runs");
        assert_eq!(s.mean, g as f64 + 2048.0);
        assert!(close(s.sd(), 4096.0 / 2f64.sqrt(), 1e-6), "{s:?}");
    }

    #[test]
    fn ratio_propagates_both_uncertainties() {
        let a = Stats::of(&[190, 210]).expect("a"); // mean 200, sd 14.142…
        let b = Stats::of(&[95, 105]).expect("b"); // mean 100, sd 7.071…
        let (r, u) = ratio(&a, &b).expect("ratio");
        assert_eq!(r, 2.0);
        // 2 · √(2 · (√200/200)²) = 2 · √(2 · 0.005) = 0.2
        assert!(close(u, 0.2, 1e-12), "{u}");
        let zero = Stats::of(&[0, 0]).expect("zero");
        assert!(ratio(&a, &zero).is_none());
    }

    #[test]
    fn student_t_matches_published_tables() {
        // Two-sided 5 % critical values: t(1) = 12.706, t(10) = 2.228, t(30) = 2.042;
        // 1 % at 5 degrees: 4.032; the normal limit 1.960.
        for (t, df, p) in [
            (12.706, 1.0, 0.05),
            (2.228, 10.0, 0.05),
            (2.042, 30.0, 0.05),
            (4.032, 5.0, 0.01),
            (1.960, 1e7, 0.05),
        ] {
            let got = student_t_two_sided(t, df);
            assert!(
                close(got, p, 2e-4),
                "t = {t}, df = {df}: p = {got}, want {p}"
            );
        }
        // t = 1 at one degree of freedom is the Cauchy distribution: P(|T| ≥ 1) = 1/2.
        assert!(close(student_t_two_sided(1.0, 1.0), 0.5, 1e-12));
        assert_eq!(student_t_two_sided(0.0, 4.0), 1.0);
    }

    #[test]
    fn welch_test_separates_what_differs() {
        // Hand-computed: a = 1, 2, 3 (mean 2, var 1), b = 4, 5, 6 (mean 5, var 1):
        // se² = 1/3 + 1/3, t = 3 / √(2/3) = 3.674, df = 4 → p = 0.0213.
        let a = Stats::of(&[1, 2, 3]).expect("a");
        let b = Stats::of(&[4, 5, 6]).expect("b");
        let p = welch_p(&a, &b).expect("p");
        assert!(close(p, 0.0213, 5e-4), "p = {p}");
        // Identical samples: no difference.
        assert!(close(welch_p(&a, &a).expect("p"), 1.0, 1e-12));
        // Peaks repeating to the byte: a 2x difference is certain, equality is not a difference.
        let m1 = Stats::of(&[100 << 20; 5]).expect("m1");
        let m2 = Stats::of(&[200 << 20; 5]).expect("m2");
        assert_eq!(welch_p(&m1, &m2), Some(0.0));
        assert_eq!(welch_p(&m1, &m1), Some(1.0));
        // One run against a spread: nothing to estimate the spread of the single run from.
        let one = Stats::of(&[3]).expect("one");
        assert_eq!(welch_p(&one, &b), None);
    }
}
